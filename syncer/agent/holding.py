"""Rollouts that wait for training, in the agent: the gate each sync asks before a change that
would stop running pods (engine.holds decides), what is held now, and when to try again.

- **The gate** of a unit's sync: the runs of the federation whose SuperLink the unit's pods are
  or dial (Flower-level health's last answer, agent.flower_watch), the unit's settings from Git
  within the admin's policy, when its hold began (kept on its inventory's Synced condition, whose
  `since` survives the agent restarting), and when a person last released it (the FlowerUnit's
  `flower-syncer.io/release-hold` annotation).
- **After the sync**: an Event and a notification when a hold begins (`RolloutHeld`) and when it
  ends (`RolloutResumed`, with why: the runs ended, the deadline, a person); the unit's Synced
  condition is `Held` meanwhile (status, `/api/v1/status`, the FlowerUnit, the
  `flower_syncer_unit_state` series), and its `hold` in `/api/v1/status` has the run ids, since and
  until when. The unit is queued again at its deadline.
- **Each status round** (`due`): held units whose runs ended, or whose deadline passed, are
  queued again. A release by annotation queues the unit at once (`release_seen`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from syncer.cluster.events import Event
from syncer.cluster.flower_control import RunInfo
from syncer.engine.changeset import UnitResult
from syncer.engine.disruption import Disruption
from syncer.engine.holds import HELD, ActiveRun, Decision, Gate, HoldSettings, Runs, Why, decide, parse_stamp
from syncer.engine.inventory import Inventory, inventory_ref
from syncer.identity import ANN_RELEASE_HOLD, Unit
from syncer.observe.flower_health import UNCHECKED, active_runs, run_state
from syncer.plan import FlowerTarget, Plan, UnitPlan
from syncer.render.tenancy import Tenancy

if TYPE_CHECKING:
    from syncer.agent.flower_watch import FlowerWatch

log = structlog.get_logger("syncer.agent")

DEFAULT_LIMITS = (3600.0, 86400.0)  # the admin policy's defaults (models.policy.HoldLimits): 1h, at most 24h
RESUMED = {Why.NO_RUNS: "the runs ended", Why.DEADLINE: "the deadline passed", Why.RELEASED: "a person released it",
           Why.RUNS_UNKNOWN: "the runs can no longer be read (not strict)", Why.HOLDS_OFF: "holding was turned off",
           Why.NO_RESTART: "the change no longer restarts pods"}


class Holds:
    """What the agent holds now, per unit (thread-safe: workers, the status round, the watch)."""

    def __init__(self, report: Callable[[Unit, Event], None], requeue: Callable[[Unit, float], None],
                 flower: Callable[[], FlowerWatch | None], *, clock: Callable[[], float] = time.time,
                 limits: tuple[float, float] = DEFAULT_LIMITS) -> None:
        self.report = report
        self.requeue = requeue  # (unit, delay in seconds): the work queue's add_after
        self.flower = flower  # the agent's Flower-level health (None: off)
        self.clock = clock
        self.limits = limits  # (default, maximum) seconds: the admin's policy
        self.held: dict[Unit, Decision] = {}
        self._released: dict[Unit, float] = {}
        self._lock = threading.Lock()
        self._feds: tuple[object, dict[str, Unit]] = (None, {})
        self._asking: set[Unit] = set()  # units whose federation's SuperLink is being asked (ask_runs)

    # -- inputs ---------------------------------------------------------------------------------

    def release_now(self, unit: Unit) -> bool:
        """A person released the unit's holds through the agent (the web view's action, behind the
        API token): holds begun until now go ahead. True when a hold was going on (the unit queued)."""
        now = self.clock()
        with self._lock:
            self._released[unit] = now
            held = self.held.get(unit)
        if held is None or held.since is None or now < held.since:
            return False
        log.info("hold released through the agent's API", unit=unit.id)
        self.requeue(unit, 0.0)
        return True

    def release_seen(self, unit: Unit, obj: Mapping[str, Any]) -> bool:
        """A FlowerUnit as its watch delivered it: remember its release time; True (and the unit
        queued) when that releases a hold going on now."""
        value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_RELEASE_HOLD)
        at = parse_stamp(str(value)) if value else None
        if at is None:
            return False
        with self._lock:
            if self._released.get(unit) == at:
                return False
            self._released[unit] = at
            held = self.held.get(unit)
        if held is None or held.since is None or at < held.since:
            return False
        log.info("hold released by annotation", unit=unit.id, at=value)
        self.requeue(unit, 0.0)
        return True

    def runs(self, unit: Unit, plan: Plan) -> Runs:
        """What is known now of the runs of the federation `unit` is, or whose SuperLink it dials:
        the last status round's reading, or the SuperLink's answer got since (`ask_runs`)."""
        fed = self._federation(unit, plan)
        if fed is None:
            return Runs(False, why="no federation of this repository serves it")
        watch = self.flower()
        if watch is None or not watch.probe.enabled:
            return Runs(False, why="Flower-level health is off")
        health = watch.health.get(fed)
        if health is not None and health.code != "pending":
            return self._read(fed, health.code, health.reachable, health.error, health.truncated, health.active)
        target = plan.flower.get(fed)
        answer = watch.probe.answer_for(fed, target) if target is not None else None
        if answer is not None and answer.code != "pending":  # asked since the last round
            return self._read(fed, answer.code, answer.reachable, answer.error, answer.truncated, active_runs(answer))
        if target is not None and watch.probe.unreachable_from_here(target.address):  # never will be
            return Runs(False, why=f"the SuperLink of {fed.id} is not asked: the agent runs outside the cluster")
        return Runs(False, why=f"the SuperLink of {fed.id} was not asked yet", pending=True)

    @staticmethod
    def _read(fed: Unit, code: str, reachable: bool, error: str, truncated: bool,
              active: tuple[RunInfo, ...]) -> Runs:
        if code in UNCHECKED:
            return Runs(False, why=f"the SuperLink of {fed.id} is not asked: {code}")
        if not reachable:
            return Runs(False, why=f"the SuperLink of {fed.id} does not answer: {error}")
        if truncated:  # the runs in progress may be among those not read: not "no run"
            return Runs(False, why=f"the SuperLink of {fed.id} lists more runs than the agent reads")
        return Runs(True, tuple(ActiveRun(r.run_id, run_state(r), r.running_at or r.pending_at) for r in active))

    def ask_runs(self, unit: Unit, plan: Plan) -> None:
        """A restart of `unit` waits for its federation's runs, not read yet (the agent just
        started): its SuperLink is asked now rather than at its turn in a status round (up to
        several rounds at hundreds of federations), and the unit synced again once it answered."""
        fed = self._federation(unit, plan)
        watch = self.flower()
        target = plan.flower.get(fed) if fed is not None else None
        if fed is None or target is None or watch is None:
            return
        with self._lock:
            if unit in self._asking:
                return
            self._asking.add(unit)

        def answered() -> None:
            with self._lock:
                self._asking.discard(unit)
            self.requeue(unit, 0.0)

        watch.probe.ask_now(fed, target, answered)

    def _federation(self, unit: Unit, plan: Plan) -> Unit | None:
        if unit.kind == "federation":
            return unit if unit in plan.flower else None
        targets: Mapping[Unit, FlowerTarget] = plan.flower
        of, feds = self._feds
        if of is not targets:
            feds = {p.unit: fed for fed, t in targets.items() for p in t.pools}
            self._feds = (targets, feds)
        return feds.get(unit.id)

    # -- the gate ----------------------------------------------------------------------------------

    def gate(self, planned: UnitPlan, plan: Plan, inventory: Inventory | None) -> Gate:
        """The question the engine asks for each change of `planned` that would stop pods."""
        unit = planned.unit
        settings = HoldSettings.of(planned.policy, *self.limits)
        since = self._since(unit, inventory)
        with self._lock:
            before = self.held.get(unit)
        for_runs = before.runs if before is not None and before.why in (Why.RUNS_ACTIVE, Why.UNKNOWN_STRICT) else ()
        asked: list[Disruption] = []
        known: list[tuple[Runs, float, float | None]] = []  # one reading per sync: the same runs and clock

        def ask(disruption: Disruption) -> str | None:
            if not known:
                with self._lock:
                    released = self._released.get(unit)
                known.append((self.runs(unit, plan), self.clock(), released))
            runs, now, released = known[0]
            asked.append(disruption)
            # the unit's decision names every workload asked so far; the change's, its own
            decision = decide(asked, runs, settings, now=now, held_since=since, released_at=released,
                              holding_for=for_runs)
            if decision.hold:
                with self._lock:
                    self.held[unit] = decision
                if decision.why is Why.RUNS_PENDING:
                    self.ask_runs(unit, plan)
                return decide([disruption], runs, settings, now=now, held_since=since, released_at=released,
                              holding_for=for_runs).message
            self._going(unit, decision)
            return None

        return ask

    def _since(self, unit: Unit, inventory: Inventory | None) -> float | None:
        with self._lock:
            held = self.held.get(unit)
        if held is not None and held.since is not None:
            return held.since
        cond = inventory.condition if inventory is not None else None
        return parse_stamp(cond.since) if cond is not None and cond.reason == HELD else None

    def _going(self, unit: Unit, decision: Decision) -> None:
        """A change that stops pods goes ahead: the end of a hold, if one was going on."""
        with self._lock:
            ended = self.held.pop(unit, None)
        if ended is None and decision.since is None and decision.why is not Why.RELEASED:
            if decision.why is Why.RUNS_UNKNOWN:  # a SuperLink the agent cannot ask holds nothing: say so
                self.report(unit, Event(inventory_ref(unit), "Warning", "RestartNotHeld", "Hold", decision.message))
            return
        self.report(unit, Event(inventory_ref(unit), "Normal", "RolloutResumed", "Hold",
                                f"{RESUMED.get(decision.why, decision.why.value)}: {decision.message}"))

    # -- after the sync --------------------------------------------------------------------------

    def after(self, unit: Unit, result: UnitResult, before: Decision | None) -> None:
        """What a sync held: the Event when a hold begins, a try again at its deadline. `before`:
        what was held before the sync (`held.get(unit)` then)."""
        with self._lock:
            now = self.held.get(unit)
            stale = now is not None and not result.is_held()  # the gate was not asked: nothing restarts now
            if stale:
                del self.held[unit]
        if stale and result.ok:
            self.report(unit, Event(inventory_ref(unit), "Normal", "RolloutResumed", "Hold",
                                    "the held changes no longer restart pods"))
        if now is None or stale:
            return
        if before is None:
            self.report(unit, Event(inventory_ref(unit), "Normal", "RolloutHeld", "Hold", now.message))
            log.info("restart held", unit=unit.id, runs=list(now.runs), why=now.message)
        if now.deadline is not None:
            self.requeue(unit, max(0.0, now.deadline - self.clock()) + 1.0)

    def due(self, plan: Plan) -> list[Unit]:
        """Held units to sync again now: their runs ended, or their deadline passed (a status round)."""
        with self._lock:
            held = dict(self.held)
        now = self.clock()
        out = []
        for unit, decision in held.items():
            runs = self.runs(unit, plan)
            ended = runs.known and not runs.active
            unknown = decision.why is Why.RUNS_PENDING and not runs.pending  # read at last (or cannot be)
            if ended or unknown or (decision.deadline is not None and now >= decision.deadline):
                out.append(unit)
        return out

    def status(self, unit: Unit) -> dict[str, Any] | None:
        """`hold` of a unit in `/api/v1/status`: the run ids, since and until when; None when not held."""
        with self._lock:
            held = self.held.get(unit)
        return held.to_dict() if held is not None else None

    def forget(self, unit: Unit) -> None:
        with self._lock:
            self.held.pop(unit, None)
            self._released.pop(unit, None)


def hold_limits(tenancy: Tenancy | None) -> tuple[float, float]:
    """(default, maximum) seconds of a hold: the admin's policy for the repository, else 1h and 24h."""
    policy = tenancy.policy if tenancy is not None else None
    return policy.holds.seconds() if policy is not None else DEFAULT_LIMITS
