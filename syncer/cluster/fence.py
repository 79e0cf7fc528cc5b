"""Fenced writes: a replica that may have lost its leadership writes nothing.

client-go tells leader-election callers to stop writing the moment leadership is lost; a paused
process (SIGSTOP, a long GC pause, a partition) does not get that callback in time, so every write
checks the fence itself, just before it is sent. The fence holds while we hold the Lease AND the
monotonic clock is before a deadline derived from the last successful renewal:

    renewed_at + (lease duration - safety margin)

`renewed_at` is when the renewing request was *sent* (the server may have written it any time
after), so no follower can have seen the Lease expire before the deadline as long as the margin
covers how early a follower may date the renewal (its retry period). Reads and dry-runs pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Fenced(Exception):
    """A write refused before it was sent: this replica no longer holds the Lease. Not an API
    error (nothing reached the server) and not a failure of the unit's config: the caller stops
    its sync and leaves the unit to whoever leads next."""

    def __init__(self, method: str, path: str, why: str) -> None:
        self.method = method
        self.path = path
        self.detail = why
        super().__init__(f"{method} {path} not sent: {why}")


class WriteFence:
    """Lets writes through only while the Lease is held and its renew deadline has not passed.

    The leader elector calls `renewed(sent_at)` after each successful renewal and `lost(why)` when
    it stops leading; `open()` makes a fence for an agent without leader election. A new fence is
    closed: nothing is written until we lead. `on_lost` callbacks run once per loss (on the
    elector's thread), e.g. to cancel queued work."""

    def __init__(self, valid_for: float = 0.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.valid_for = valid_for  # lease duration - safety margin, in seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._held = False
        self._open = False
        self._renewed_at = 0.0
        self._why = "this replica does not hold the leader-election Lease"
        self._on_lost: list[Callable[[], None]] = []
        self.refused = 0  # writes refused, for tests and metrics

    @classmethod
    def open(cls) -> WriteFence:
        """A fence that always lets writes through (no leader election: we are the only writer)."""
        fence = cls()
        fence._open = True
        return fence

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._on_lost.append(callback)

    def renewed(self, sent_at: float) -> None:
        """The Lease is ours, renewed by a request sent at monotonic `sent_at`."""
        with self._lock:
            self._held = True
            self._renewed_at = max(self._renewed_at, sent_at)

    def lost(self, why: str = "the leader-election Lease was lost") -> None:
        """We stopped leading: refuse every write from now on and tell the listeners."""
        with self._lock:
            was_held = self._held
            self._held = False
            self._why = why
        if was_held:
            for callback in list(self._on_lost):
                callback()

    def deadline(self) -> float | None:
        """Monotonic time after which writes are refused; None if they are refused now or never."""
        with self._lock:
            if self._open or not self._held:
                return None
            return self._renewed_at + self.valid_for

    def holds(self) -> bool:
        with self._lock:
            if self._open:
                return True
            return self._held and self._clock() < self._renewed_at + self.valid_for

    def check(self, method: str, path: str) -> None:
        """Raise Fenced unless a write may be sent now."""
        if method not in WRITE_METHODS or self.holds():
            return
        with self._lock:
            self.refused += 1
            why = self._why if not self._held else "the Lease could not be renewed before its deadline"
        raise Fenced(method, path, why)
