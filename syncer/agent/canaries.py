"""Canary pools in the agent (engine.canary decides, engine.rollout applies): what Flower-level
health last saw of a canary pool (its SuperNodes online at the SuperLink), the Events (and
notifications) of a canary's start, pass and failure, each once, naming the revision, and when to
look at a canary in progress again (and, when it waits for the SuperLink's next answer, to ask the
SuperLink by then rather than at its turn, every 30 s)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from syncer.cluster.events import Event
from syncer.engine.canary import CanaryNote, FlowerSeen, Step, epoch
from syncer.engine.changeset import UnitResult
from syncer.engine.rollout import FlowerOf
from syncer.identity import ObjectRef, Unit
from syncer.observe.flower_health import UNCHECKED

if TYPE_CHECKING:
    from syncer.agent.flower_watch import FlowerWatch

log = structlog.get_logger("syncer.agent")



def canary_event(note: CanaryNote, revision: str) -> Event | None:
    """The Event of a canary pool's step (on its StatefulSet); None for one still waiting."""
    text = f"revision {revision[:12] or '(no revision)'}: {note.message}"
    if note.step is Step.STARTED:
        return Event(note.ref, "Normal", "CanaryStarted", "Rollout", text)
    if note.step is Step.PASSED:
        return Event(note.ref, "Normal", "CanaryPassed", "Rollout", text)
    if note.step is Step.FAILED:
        return Event(note.ref, "Warning", "CanaryFailed", "Rollout", text)
    return None


class Canaries:
    """Thread-safe: the workers call it."""

    def __init__(self, report: Callable[[Unit, Event], None], requeue: Callable[[Unit, float], None],
                 flower: Callable[[], FlowerWatch | None]) -> None:
        self.report = report
        self.requeue = requeue  # (unit, delay in seconds): the work queue's add_after
        self.flower = flower
        self._told: dict[ObjectRef, tuple[Step, str]] = {}  # the last Event of each canary pool
        self._lock = threading.Lock()

    def health(self, unit: Unit) -> FlowerOf:
        """What the engine asks of a canary pool of `unit`: a Federation's pool, or a SuperNode
        release's SuperNodes (listed by the SuperLink of the Federation they dial)."""
        def seen(ref: ObjectRef, pool: str) -> FlowerSeen | None:
            watch = self.flower()
            if watch is None or not watch.probe.enabled:
                return None
            health = watch.health.get(unit)
            if health is None and unit.kind == "supernode":
                health = next((h for h in list(watch.health.values())
                               if any(p.unit == unit.id and p.pool == pool for p in h.pools)), None)
            if health is None or health.code in UNCHECKED or not health.reachable:
                return None
            at = epoch(health.checked_at)
            mine = next((p for p in health.pools if p.pool == pool and p.unit == unit.id), None)
            if mine is None or at is None:
                return None
            return FlowerSeen(mine.online, mine.expected, at, mine.heard)
        return seen

    def after(self, unit: Unit, result: UnitResult, revision: str) -> None:
        """Events for what the sync did to canary pools, and a look again at those in progress."""
        retry = None
        for note in result.canaries:
            if note.step in (Step.STARTED, Step.WAITING):
                retry = note.retry if retry is None else min(retry, note.retry)
            self._tell(unit, note, revision)
        if retry is not None and result.ok:
            self.requeue(unit, retry)
            watch = self.flower()
            if watch is not None and any(n.asks_flower for n in result.canaries):
                watch.soon(unit, retry)  # the SuperLink's next answer decides: asked before the next look

    def _tell(self, unit: Unit, note: CanaryNote, revision: str) -> None:
        event = canary_event(note, revision)
        with self._lock:
            before = self._told.get(note.ref)
            if event is None or before == (note.step, note.message):
                return
            self._told[note.ref] = (note.step, note.message)
        if note.step is Step.FAILED and before is not None and before[0] is Step.FAILED:
            return  # the same failure, its words changed (ErrImagePull, ImagePullBackOff): told once
        log.info("canary", unit=unit.id, pool=note.pool, step=note.step.value, why=note.message,
                 revision=revision[:12])
        self.report(unit, event)
