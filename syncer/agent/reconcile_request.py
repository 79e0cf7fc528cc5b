"""Reconcile requests by annotation: `kubectl annotate flowerunit NAME flower-syncer.io/requestedAt=...`.

Flux's `reconcile.fluxcd.io/requestedAt` pattern: any new value of the annotation on a unit's
FlowerUnit asks the leader to fetch the source and sync that unit, without a token or a
port-forward (the FlowerUnits' watch delivers it within milliseconds). The value handled last is
recorded in the FlowerUnit's `status.lastHandledReconcileAt`, so the same value is never handled
twice, not even by the next leader. Only the leader acts; a standby leaves the request in place and
takes it up when it leads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from syncer.agent.messages import ResyncRequested, Waiter
from syncer.identity import ANN_REQUESTED_AT, Unit

log = structlog.get_logger("syncer.agent")

__all__ = ["ANN_REQUESTED_AT", "ReconcileRequests", "handled_at", "requested_at"]


def requested_at(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_REQUESTED_AT) or "")


def handled_at(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("lastHandledReconcileAt") or "")


class ReconcileRequests:
    """Turns new `requestedAt` values into resyncs (one each) and remembers which were handled.

    `post` puts an event on the agent's queue; `leading` says whether this replica writes."""

    def __init__(self, post: Callable[[ResyncRequested], None], leading: Callable[[], bool]) -> None:
        self._post = post
        self._leading = leading
        self._lock = threading.Lock()
        self._pending: dict[Unit, tuple[str, Waiter]] = {}  # requested, resync not finished yet
        self._handled: dict[Unit, str] = {}  # finished here, maybe not yet recorded in the status
        self.requested = 0  # resyncs asked for, for tests and logs

    def seen(self, unit: Unit, obj: Mapping[str, Any]) -> bool:
        """A FlowerUnit as the watch delivered it: True when its annotation asked for a resync now."""
        value = requested_at(obj)
        if not value or not self._leading():
            return False
        with self._lock:
            pending = self._pending.get(unit)
            if value in (handled_at(obj), self._handled.get(unit)) or (pending is not None and pending[0] == value):
                return False
            waiter = Waiter(selector=unit.id)
            self._pending[unit] = (value, waiter)
            self.requested += 1
        log.info("reconcile requested by annotation", unit=unit.id, requestedAt=value)
        self._post(ResyncRequested(unit.id, waiter))
        return True

    def handled(self, unit: Unit, observed: Mapping[str, Any] | None) -> str:
        """The value to record as `lastHandledReconcileAt`: the last one whose resync finished
        here, else what the object already records."""
        with self._lock:
            pending = self._pending.get(unit)
            if pending is not None and pending[1].done.is_set():
                self._handled[unit] = pending[0]
                del self._pending[unit]
                if pending[1].error:
                    log.warning("reconcile request finished with an error", unit=unit.id,
                                requestedAt=pending[0], error=pending[1].error)
            mine = self._handled.get(unit)
        return mine if mine is not None else handled_at(observed or {})

    def forget(self, unit: Unit) -> None:
        with self._lock:
            self._pending.pop(unit, None)
            self._handled.pop(unit, None)
