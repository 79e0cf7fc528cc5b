"""Fenced writes: a replica that may have lost its leadership writes nothing.

client-go tells leader-election callers to stop writing the moment leadership is lost; a paused
process (SIGSTOP, a long GC pause, a partition) does not get that callback in time, so every write
checks the fence itself, just before it is sent. The fence holds while the Lease was renewed
recently enough that no follower can have taken it yet (`LeaderElector.is_leader`: the last
successful renewal plus the renew deadline, on the monotonic clock). Reads and dry-runs pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Fenced(Exception):
    """A write refused before it was sent: this replica no longer holds the Lease. Not an API
    error (nothing reached the server): the caller stops its sync and leaves the unit queued for
    whoever leads next."""

    def __init__(self, method: str, path: str, why: str) -> None:
        self.method = method
        self.path = path
        self.detail = why
        super().__init__(f"{method} {path} not sent: {why}")


class WriteFence:
    """Lets writes through while `holds()` says so. `holds` is set once the elector exists; until
    then nothing is written."""

    def __init__(self, holds: Callable[[], bool] | None = None,
                 why: str = "this replica does not hold the leader-election Lease") -> None:
        self.holds = holds
        self.why = why
        self._lock = threading.Lock()
        self.refused = 0  # writes refused, for tests and metrics

    def check(self, method: str, path: str) -> None:
        """Raise Fenced unless a write may be sent now."""
        if method not in WRITE_METHODS:
            return
        holds = self.holds
        if holds is not None and holds():
            return
        with self._lock:
            self.refused += 1
        raise Fenced(method, path, self.why)
