"""Flower-level health in the agent's status round: ask (FlowerProbe), compute (observe.flower_health),
remember across rounds (how long a pool has been short of SuperNodes, which failed runs were
reported), and tell: the Healthy check, metrics, Events and notifications.

News, each once: a federation whose pods are Ready but whose SuperNodes are not all connected
(`SuperNodesNotConnected`, Warning, when its Healthy condition turns Degraded for it), a run that
failed (`RunFailed`, Warning: its id and Flower's failure message; the failed runs a SuperLink
already had when the agent first heard from it are not news), a pool that had its SuperNodes and
lost some (`SuperNodesLost`, Warning), and that pool whole again (`SuperNodesConnected`, Normal),
and a SuperLink that no longer knows keys flower-syncer registered there (`SuperNodeKeysForgotten`,
Warning: it lost its state): the unit's key registration is asked for at once (`rekey`, through the
agent's event queue), again after REKEY_AFTER seconds while they stay unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from syncer.agent.flower_probe import MIN_BUDGET, FlowerProbe
from syncer.cluster.events import Event
from syncer.engine.inventory import inventory_ref
from syncer.identity import Unit
from syncer.observe.conditions import HealthReason, UnitCondition
from syncer.observe.flower_health import (
    GRACE,
    FlowerHealth,
    PoolHealth,
    compute,
    failure_message,
    forgotten_keys,
    health_condition,
    lost_pools,
    new_failures,
)
from syncer.plan import FlowerTarget

if TYPE_CHECKING:
    from syncer.observe.status import UnitStatus

log = structlog.get_logger("syncer.agent")

Report = Callable[[Unit, Event], None]
REKEY_AFTER = 60.0  # seconds before the same forgotten keys are asked to be registered again


@dataclass
class _Seen:
    runs: set[int] = field(default_factory=set)
    baseline: bool = False  # the failed runs of the first answer were taken as known
    short_since: float | None = None
    last: FlowerHealth | None = None
    lost: set[tuple[str, str]] = field(default_factory=set)  # pools reported lost, until whole again
    answer: object = None  # the answer and target `last` was computed from (the very objects: the probe
    target: object = None  # hands out the same answer until a new check): not computed again
    unsized: bool = False  # a pool of `target` leaves its count to its workload: computed every round
    condition: UnitCondition | None = None  # what `check` said of `condition_of`: (health, short past grace)
    condition_of: tuple[object, bool] | None = None
    forgotten: frozenset[bytes] = frozenset()  # keys the SuperLink did not know at the last answer
    rekeyed_at: float | None = None  # when their registration was last asked for


class FlowerWatch:
    def __init__(self, probe: FlowerProbe, report: Report, clock: Callable[[], float],
                 rekey: Callable[[Unit], None] | None = None) -> None:
        self.probe = probe
        self.report = report
        self.clock = clock
        self.rekey = rekey
        self.health: dict[Unit, FlowerHealth] = {}  # replaced each round: read by the API thread
        self.conditions: dict[Unit, UnitCondition] = {}  # what `check` said last, per unit (for FlowerUnits)
        self._degraded: set[Unit] = set()  # units told SuperNodesNotConnected, until they are not Degraded
        self._seen: dict[Unit, _Seen] = {}
        self._units: dict[str, Unit] = {}  # the federations of the last round, by id
        self._targets: Mapping[Unit, FlowerTarget] | None = None  # ... and the plan's mapping they came from
        self._ready: set[str] | None = None  # unit ids whose pods were ready at the last round
        self._own: float | None = None  # CPU seconds of a status round without Flower-level health (average)
        self._bookkeeping = 0.0  # CPU seconds the last round spent on Flower-level health itself
        self._checks_cpu = 0.0  # the probe's `cpu` at the last round

    def round(self, targets: Mapping[Unit, FlowerTarget], statuses: Sequence[UnitStatus]) -> dict[Unit, FlowerHealth]:
        """One status round: every federation's health from the last answers; news reported.
        With --flower-health off: nothing (no `flower` figures, no check, no series)."""
        if not self.probe.enabled:
            self.health = {}
            return {}
        if targets is not self._targets:  # a new plan: its federations by id
            self._targets, self._units = targets, {u.id: u for u in targets}
        ready = {s.unit for s in statuses if s.ready}
        # at the first round, pods already ready did not just become ready: their checks wait their turn
        now_ready = frozenset(self._units[i] for i in ready - (self._ready or ready) if i in self._units)
        self._ready = ready
        answers = self.probe.round(targets, now_ready, self.budget(), start_now=False)  # see finish_round
        desired: dict[tuple[str, str], int] = {}  # filled when a health is computed again
        now = self.clock()
        healths: dict[Unit, FlowerHealth] = {}
        for unit, target in targets.items():
            seen = self._seen.get(unit) or self._seen.setdefault(unit, _Seen())
            answer = answers[unit]
            if seen.answer is answer and seen.target is target and seen.last is not None and not seen.unsized:
                healths[unit] = seen.last  # nothing new since the last round
                continue
            if not desired:
                desired.update(((u.unit, p.pool), p.desired) for u in statuses for p in u.pools)
            health = compute(target, answer, desired)
            healths[unit] = health
            seen.answer, seen.target, seen.unsized = answer, target, _unsized(target)
            if health.reachable:
                self._news(unit, health, seen)
                self._forgotten(unit, forgotten_keys(target, answer), len(target.registered), seen, now)
                short = bool(health.short_pools())
                seen.short_since = (seen.short_since or now) if short else None
            seen.last = health
        if len(self._seen) > len(targets):  # federations that left Git
            for gone in set(self._seen) - set(targets):
                del self._seen[gone]
        self.health = healths
        return healths

    def soon(self, unit: Unit, within: float) -> None:
        """Ask `unit`'s SuperLink within `within` seconds, not at its turn (FlowerProbe.soon)."""
        target = (self._targets or {}).get(unit)
        if target is not None and self.probe.enabled:
            self.probe.soon(unit, target, within)

    def finish_round(self, own: float, flower: float) -> float:
        """The status round's work is done: remember what it cost, in CPU seconds of its thread (its
        own work, `own`, and the part of it that was Flower-level health, `flower`: this round's
        bookkeeping), and start the checks the round chose. Started now, not during the round, they
        never compete with it for the interpreter (that made the round's own work cost half as
        much again, bench/status_round.py). Returns the CPU seconds Flower-level health spent since
        the last round: `flower` and what the checks' threads spent meanwhile."""
        self._own = own if self._own is None else self._own + (own - self._own) * 0.2
        self._bookkeeping = flower
        self.probe.start()
        checks, self._checks_cpu = self.probe.cpu - self._checks_cpu, self.probe.cpu
        return flower + checks

    def budget(self) -> float:
        """CPU seconds the checks of the next round may cost: what the round costs without them,
        less what Flower-level health itself spends in it, at least MIN_BUDGET."""
        return max(MIN_BUDGET, (self._own or 0.0) - self._bookkeeping)

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

    def _forgotten(self, unit: Unit, keys: frozenset[bytes], listed: int, seen: _Seen, now: float) -> None:
        """Keys Git lists that the SuperLink does not know: registered again now, not at a resync."""
        if keys and (keys != seen.forgotten or seen.rekeyed_at is None or now - seen.rekeyed_at >= REKEY_AFTER):
            if keys != seen.forgotten:
                self.report(unit, Event(inventory_ref(unit), "Warning", "SuperNodeKeysForgotten", "FlowerHealth",
                                        f"the SuperLink does not know {len(keys)} of the {listed} SuperNode key(s) "
                                        "Git lists (it lost its state: restarted in memory?); registering "
                                        "them again"))
            if self.rekey is not None:
                self.rekey(unit)
            seen.rekeyed_at = now
        seen.forgotten = keys

    def check(self, subject: Any) -> UnitCondition | None:
        """The HealthCheck: for a federation whose pods are Ready, what its SuperLink says."""
        status: UnitStatus = subject
        if not self.health or not status.unit.startswith("federation/"):
            return None
        unit = self._units.get(status.unit) or Unit.parse(status.unit)
        if not status.ready:
            self.conditions.pop(unit, None)
            self._degraded.discard(unit)
            return None  # its pods' own condition says more (and its SuperLink may be starting)
        health = self.health.get(unit)
        seen = self._seen.get(unit)
        short_for = self.clock() - seen.short_since if seen is not None and seen.short_since is not None else 0.0
        # the condition depends on the answer and on whether a short pool has been short past GRACE
        of = (health, short_for >= GRACE)
        if seen is not None and health is not None and seen.condition_of == of:
            cond = seen.condition  # nothing new: the same condition, not computed again
        else:
            cond = health_condition(health, short_for=short_for)
            if seen is not None:
                seen.condition, seen.condition_of = cond, of
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
