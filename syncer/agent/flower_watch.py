"""Flower-level health in the agent's status round: ask (FlowerProbe), compute (observe.flower_health),
remember across rounds (how long a pool has been short of SuperNodes, which failed runs were
reported), and tell: the Healthy check, metrics, Events and notifications.

News, each once: a federation whose pods are Ready but whose SuperNodes are not all connected
(`SuperNodesNotConnected`, Warning, when its Healthy condition turns Degraded for it), a run that
failed (`RunFailed`, Warning: its id and Flower's failure message; the failed runs a SuperLink
already had when the agent first heard from it are not news), a pool that had its SuperNodes and
lost some (`SuperNodesLost`, Warning), and that pool whole again (`SuperNodesConnected`, Normal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from syncer.agent.flower_probe import FlowerProbe
from syncer.cluster.events import Event
from syncer.engine.inventory import inventory_ref
from syncer.identity import Unit
from syncer.observe.conditions import HealthReason, UnitCondition
from syncer.observe.flower_health import (
    FlowerHealth,
    PoolHealth,
    compute,
    failure_message,
    health_condition,
    lost_pools,
    new_failures,
)
from syncer.plan import FlowerTarget

if TYPE_CHECKING:
    from syncer.observe.status import UnitStatus

log = structlog.get_logger("syncer.agent")

Report = Callable[[Unit, Event], None]


@dataclass
class _Seen:
    runs: set[int] = field(default_factory=set)
    baseline: bool = False  # the failed runs of the first answer were taken as known
    short_since: float | None = None
    last: FlowerHealth | None = None
    lost: set[tuple[str, str]] = field(default_factory=set)  # pools reported lost, until whole again
    answer: object = None  # the answer and target `last` was computed from (the very objects: the probe
    target: object = None  # hands out the same answer until a new check): not computed again


class FlowerWatch:
    def __init__(self, probe: FlowerProbe, report: Report, clock: Callable[[], float]) -> None:
        self.probe = probe
        self.report = report
        self.clock = clock
        self.health: dict[Unit, FlowerHealth] = {}  # replaced each round: read by the API thread
        self.conditions: dict[Unit, UnitCondition] = {}  # what `check` said last, per unit (for FlowerUnits)
        self._degraded: set[Unit] = set()  # units told SuperNodesNotConnected, until they are not Degraded
        self._seen: dict[Unit, _Seen] = {}
        self._ready: set[str] = set()  # unit ids whose pods were ready at the last round

    def round(self, targets: Mapping[Unit, FlowerTarget], statuses: Sequence[UnitStatus]) -> dict[Unit, FlowerHealth]:
        """One status round: every federation's health from the last answers; news reported.
        With --flower-health off: nothing (no `flower` figures, no check, no series)."""
        if not self.probe.enabled:
            self.health = {}
            return {}
        ready = {s.unit for s in statuses if s.ready}
        now_ready = frozenset(u for u in targets if u.id in ready and u.id not in self._ready)
        self._ready = ready
        answers = self.probe.round(targets, now_ready)
        desired = {(u.unit, p.pool): p.desired for u in statuses for p in u.pools}
        now = self.clock()
        healths: dict[Unit, FlowerHealth] = {}
        for unit, target in targets.items():
            seen = self._seen.setdefault(unit, _Seen())
            answer = answers[unit]
            if seen.answer is answer and seen.target is target and seen.last is not None and not _unsized(target):
                healths[unit] = seen.last  # nothing new since the last round
                continue
            health = compute(target, answer, desired)
            healths[unit] = health
            seen.answer, seen.target = answer, target
            if health.reachable:
                self._news(unit, health, seen)
                short = bool(health.short_pools())
                seen.short_since = (seen.short_since or now) if short else None
            seen.last = health
        for gone in set(self._seen) - set(targets):
            del self._seen[gone]
        self.health = healths
        return healths

    def _news(self, unit: Unit, health: FlowerHealth, seen: _Seen) -> None:
        failed = new_failures(health.failed, seen.runs)
        if not seen.baseline:  # what had failed before the agent heard from this SuperLink is not news
            seen.baseline, failed = True, []
        for run in failed:
            self.report(unit, Event(inventory_ref(unit), "Warning", "RunFailed", "FlowerHealth",
                                    f"Flower run {run.run_id} failed: {failure_message(run)}"))
        for pool in lost_pools(seen.last, health):
            seen.lost.add((pool.unit, pool.pool))
            self.report(unit, Event(inventory_ref(unit), "Warning", "SuperNodesLost", "FlowerHealth",
                                    f"{_pool(unit, pool)}: {pool.online}/{pool.expected} SuperNodes connected to the "
                                    "SuperLink" + (f" ({pool.offline} offline)" if pool.offline else "")))
        for pool in health.pools:
            if (pool.unit, pool.pool) in seen.lost and not pool.short:
                seen.lost.discard((pool.unit, pool.pool))
                self.report(unit, Event(inventory_ref(unit), "Normal", "SuperNodesConnected", "FlowerHealth",
                                        f"{_pool(unit, pool)}: {pool.online}/{pool.expected} SuperNodes connected "
                                        "again"))

    def check(self, subject: Any) -> UnitCondition | None:
        """The HealthCheck: for a federation whose pods are Ready, what its SuperLink says."""
        status: UnitStatus = subject
        if not self.health or not status.unit.startswith("federation/"):
            return None
        if not status.ready:
            self.conditions.pop(Unit.parse(status.unit), None)
            self._degraded.discard(Unit.parse(status.unit))
            return None  # its pods' own condition says more (and its SuperLink may be starting)
        unit = Unit.parse(status.unit)
        seen = self._seen.get(unit)
        short_for = self.clock() - seen.short_since if seen is not None and seen.short_since is not None else 0.0
        cond = health_condition(self.health.get(unit), short_for=short_for)
        if cond is None:
            self.conditions.pop(unit, None)
        else:
            self.conditions[unit] = cond
        if cond is not None and cond.reason == HealthReason.DEGRADED:
            if unit not in self._degraded:  # pods ready, SuperNodes not connected: news once per episode
                self._degraded.add(unit)
                self.report(unit, Event(inventory_ref(unit), "Warning", "SuperNodesNotConnected", "FlowerHealth",
                                        cond.message))
        else:
            self._degraded.discard(unit)
        return cond

    def to_dict(self, unit: Unit) -> dict[str, Any] | None:
        health = self.health.get(unit)
        return health.to_dict() if health is not None else None

    def recorded(self, unit: Unit) -> dict[str, Any] | None:
        """What a FlowerUnit's status keeps of it (`status.flower`): the health without the time of
        the check (written only when it changes: the writer stamps `checkedAt` then), and the
        Flower-level Healthy condition, if any. None before the first answer."""
        health = self.health.get(unit)
        if health is None or health.code == "pending":
            return None
        out = {k: v for k, v in health.to_dict().items() if k != "checkedAt"}
        if out["runs"]["lastFailure"] is None:  # a merge patch's null would remove it: leave it out
            out["runs"] = {k: v for k, v in out["runs"].items() if k != "lastFailure"}
        cond = self.conditions.get(unit)
        if cond is not None:
            out["condition"] = {"reason": str(cond.reason), "message": cond.message}
        return out


def _unsized(target: FlowerTarget) -> bool:
    """A pool whose count Git leaves to its workload (a DaemonSet): recomputed every round."""
    return any(p.expected is None for p in target.pools)


def _pool(unit: Unit, pool: PoolHealth) -> str:
    return f"pool {pool.pool}" if pool.unit == unit.id else f"{pool.unit}"
