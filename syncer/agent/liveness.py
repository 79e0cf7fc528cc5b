"""Whether the agent makes progress, for `/healthz`: the syncs in flight and since when, and the
calls to servers tenants run (syncer.cluster.tenant_calls) past their deadline.

Every call to a tenant's server is bounded by a deadline, and a sync by what it calls, so a sync
that has run for STUCK_SYNC seconds, or a tenant call LATE_CALL seconds past its deadline, means a
worker no longer makes progress: the agent is not healthy (503) until it does, and the kubelet
restarts a replica that stays so. `why()` says which, for the log and the status API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from syncer.cluster.tenant_calls import TENANT_CALLS, InFlight
from syncer.identity import Unit

STUCK_SYNC = 600.0  # seconds one unit's sync may run before the worker counts as stuck
LATE_CALL = 5.0  # seconds past its deadline a call to a tenant's server counts as stuck


class Liveness:
    """The syncs in flight (thread-safe) and the tenant calls of `calls`."""

    def __init__(self, calls: InFlight = TENANT_CALLS, *, clock: Callable[[], float] = time.monotonic,
                 stuck_sync: float = STUCK_SYNC, late_call: float = LATE_CALL) -> None:
        self.calls = calls
        self.clock = clock
        self.stuck_sync = stuck_sync
        self.late_call = late_call
        self._lock = threading.Lock()
        self._syncs: dict[int, tuple[Unit, float]] = {}  # by token: the unit and when its sync started
        self._next = 0

    @contextmanager
    def syncing(self, unit: Unit) -> Iterator[None]:
        """Around one unit's sync."""
        with self._lock:
            self._next += 1
            token = self._next
            self._syncs[token] = (unit, self.clock())
        try:
            yield
        finally:
            with self._lock:
                del self._syncs[token]

    def why(self) -> str:
        """"" while the agent makes progress; else what is stuck, and for how long."""
        now = self.clock()
        with self._lock:
            syncs = sorted(self._syncs.values(), key=lambda s: s[1])
        if syncs and now - syncs[0][1] >= self.stuck_sync:
            unit, started = syncs[0]
            return f"the sync of {unit.id} has run for {now - started:.0f}s (more than {self.stuck_sync:g}s)"
        late = self.calls.overdue(self.late_call)
        if late:
            call = late[0]
            return (f"a call to a tenant's server ({call.what} at {call.address}) has run {now - call.deadline:.0f}s "
                    "past its deadline")
        return ""
