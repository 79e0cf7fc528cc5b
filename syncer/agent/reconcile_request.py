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


MAX_REQUESTED_AT = 256  # characters of a requestedAt value handled (Flux's: a timestamp)


def bounded(value: str, limit: int = 64) -> str:
    """`value` for a log line: whole when short, else its start and its length."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def requested_at(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_REQUESTED_AT) or "")


def handled_at(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("lastHandledReconcileAt") or "")


class ReconcileRequests:
    """Turns new `requestedAt` values into resyncs (one each) and remembers which were handled.

    `post` puts an event on the agent's queue; `leading` says whether this replica writes; `mine`
    whether a FlowerUnit is of this agent's repository (another's requests are its agent's)."""

    def __init__(self, post: Callable[[ResyncRequested], None], leading: Callable[[], bool],
                 mine: Callable[[Unit, Mapping[str, Any]], bool] = lambda _unit, _obj: True) -> None:
        self._post = post
        self._leading = leading
        self._mine = mine
        self._refused: dict[Unit, int] = {}  # the hash of the last over-long value warned about, per unit
        self._lock = threading.Lock()
        self._pending: dict[Unit, tuple[str, Waiter]] = {}  # requested, resync not finished yet
        self._handled: dict[Unit, str] = {}  # finished here, maybe not yet recorded in the status
        self.requested = 0  # resyncs asked for, for tests and logs

    def seen(self, unit: Unit, obj: Mapping[str, Any]) -> bool:
        """A FlowerUnit as the watch delivered it: True when its annotation asked for a resync now."""
        value = requested_at(obj)
        if not value or not self._leading() or not self._mine(unit, obj):
            return False
        if len(value) > MAX_REQUESTED_AT:  # a timestamp or a token: never a document in the log
            with self._lock:
                news = self._refused.get(unit) != hash(value)
                self._refused[unit] = hash(value)
            if news:
                log.warning("reconcile request ignored: its value is too long", unit=unit.id,
                            requestedAt=value[:64] + "...", hint=f"set {ANN_REQUESTED_AT} to a timestamp, e.g. "
                            f"$(date +%s); at most {MAX_REQUESTED_AT} characters")
            return False
        with self._lock:
            pending = self._pending.get(unit)
            if value in (handled_at(obj), self._handled.get(unit)) or (pending is not None and pending[0] == value):
                return False
            waiter = Waiter(selector=unit.id)
            self._pending[unit] = (value, waiter)
            self.requested += 1
        log.info("reconcile requested by annotation", unit=unit.id, requestedAt=bounded(value))
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
                                requestedAt=bounded(pending[0]), error=pending[1].error)
            mine = self._handled.get(unit)
        return mine if mine is not None else handled_at(observed or {})

    def forget(self, unit: Unit) -> None:
        with self._lock:
            self._pending.pop(unit, None)
            self._handled.pop(unit, None)
            self._refused.pop(unit, None)
