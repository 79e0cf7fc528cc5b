"""Each unit's state as the agent knows it now: its Synced and Healthy conditions
(`syncer.observe.conditions`), recomputed from the installed revision, the last sync and the last
status round every time it is asked for, so no earlier revision's or sync's reason can stay behind.
`UnitBook` keeps the tables they are computed from; `Agent.unit_conditions()`, `/api/v1/status`,
the web view, the metrics and the logs read it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from syncer.agent.reporting import recovered_event, unverified_event
from syncer.agent.state import Current, UnitState
from syncer.cluster.events import Event
from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import UnitResult
from syncer.identity import ObjectRef, Unit
from syncer.observe.conditions import (
    HealthReason,
    SyncedReason,
    UnitCondition,
    UnitConditions,
    describe,
    healthy_condition,
    synced_condition,
)

if TYPE_CHECKING:
    from syncer.agent.cache import LiveCache
    from syncer.agent.flower_watch import FlowerWatch
    from syncer.agent.holding import Holds
    from syncer.observe.conditions import HealthCheck
    from syncer.observe.metrics import Metrics
    from syncer.observe.status import UnitStatus
    from syncer.observe.view import Changes

log = structlog.get_logger("syncer.agent")
_PUBLISHING = threading.Lock()  # guards every book's `published` table: a compare-and-set, nothing slow

UNKNOWN_HEALTH = UnitCondition("Healthy", False, HealthReason.UNKNOWN, "no status round yet")


class UnitBook:
    """The tables of what the agent knows of each unit, and the one place its state is published.
    Written by the dispatcher (syncs, revisions), the workers (drift) and the status round (health)."""

    def __init__(self, current: Current, cache: LiveCache, metrics: Metrics, report: Callable[[Unit, Event], None],
                 holds: Holds, flower: FlowerWatch | None, changes: Changes) -> None:
        self.current = current
        self.cache = cache
        self.metrics = metrics
        self.report = report
        self.holds = holds
        self.flower = flower  # Flower-level health of the federations (None: not watched)
        self.changes = changes  # touched where a unit's state may change (publish, forget): the web view
        self.units: dict[Unit, UnitState] = {}
        self.health: dict[Unit, UnitCondition] = {}  # each unit's Healthy condition, from the last status round
        self.statuses: dict[Unit, UnitStatus] = {}  # each unit's pools and GPUs, from the last status round
        self.drifted: dict[Unit, tuple[ObjectRef, ...]] = {}  # objects differing from Git after the last sync
        self.published: dict[Unit, tuple[str, ...]] = {}  # each unit's state as last logged (publish)
        self.refusal = ""  # why the source refused its newest revision (source.signatures); "" if it did not
        self._errors_counted: set[Unit] = set()  # units whose config_errors metric is set
        self._suspended: dict[Unit, bool] = {}  # as last seen on each inventory, to report a change

    def known_units(self) -> list[Unit]:
        """Every unit the agent reports on: in Git (loaded, or failed to load), or synced before."""
        plan = self.current.plan  # one snapshot; `units` copied at once (the status thread asks too)
        return sorted(set(plan.units) | set(plan.failed) | set(self.units.copy()))

    def suspended(self, unit: Unit) -> bool:
        """Suspended now: by `flower-syncer suspend` (its inventory) or by its policy in Git."""
        inv = self.cache.state.inventories.get(unit)
        desired = self.current.plan.units.get(unit)
        return (inv is not None and inv.suspended) or (desired is not None and desired.policy.suspend)

    def unit_state(self, unit: Unit) -> UnitConditions:
        plan = self.current.plan
        st = self.units.get(unit)
        errors = st.config_errors if st is not None and unit in plan.failed else []
        synced = synced_condition(config_errors=errors, result=st.last_result if st else None,
                                  suspended=self.suspended(unit), internal_error=st.internal_error if st else "",
                                  in_git=plan.in_git(unit), refused=self.refusal)
        desired = plan.units.get(unit)
        return UnitConditions(synced, self.health.get(unit, UNKNOWN_HEALTH),
                              desired.revision if desired is not None else (st.last_revision if st else ""))

    def unit_states(self) -> dict[Unit, UnitConditions]:
        return {unit: self.unit_state(unit) for unit in self.known_units()}

    # -- what changes a unit's state ---------------------------------------------------------------

    def observe_health(self, units: Sequence[UnitStatus], checks: Sequence[HealthCheck] = ()) -> None:
        """A status round's figures: each unit's Healthy condition, replaced as a whole (a unit no
        longer reported has no health figures); then every unit's state is published again, and
        the pools and GPUs are kept for the web view."""
        self.health = {Unit.parse(u.unit): healthy_condition(u.pools, found=u.found, checks=checks, subject=u)
                       for u in units}
        self.statuses = {Unit.parse(u.unit): u for u in units}  # before publishing: the web view reads them
        for unit in self.known_units():
            self.publish(unit)

    def set_config_errors(self, unit: Unit, errors: list[Diagnostic]) -> None:
        """The errors of the unit in the revision installed now (none: it loaded and rendered)."""
        st = self.units.setdefault(unit, UnitState())
        if st.config_errors or errors or unit not in self._errors_counted:
            self.metrics.set_config_errors(unit.id, len(errors))
            self._errors_counted.add(unit)
        st.config_errors = errors

    def synced(self, unit: Unit, result: UnitResult, revision: str, now: float) -> None:
        """A sync of a unit of ours ended (the dispatcher's UnitSynced)."""
        st = self.units.setdefault(unit, UnitState())
        if st.last_result != result:
            # an equal result (every unit of a no-op resync) keeps the one held: the new one goes
            # with the sync's temporaries instead of settling among them, and the collector
            # does not walk a new set of every unit's changes until the next freeze
            st.last_result = result
        st.last_sync = now
        st.internal_error = ""
        if result.ok:
            st.last_revision = revision
        self.publish(unit)

    def failed_handling(self, unit: Unit, text: str) -> None:
        """The agent failed handling an event of the unit (cleared by its next sync)."""
        self.units.setdefault(unit, UnitState()).internal_error = f"the agent failed handling a change: {text}"

    def suspension_changed(self, unit: Unit, suspended: bool) -> bool:
        """The unit's inventory says `suspended`: True when that differs from what it said before."""
        before = self._suspended.get(unit)
        self._suspended[unit] = suspended
        return before is not None and before != suspended

    def pruned(self, unit: Unit) -> None:
        """The unit left Git and its inventory is gone: nothing of it is left to count."""
        self.units.pop(unit, None)
        self.drifted.pop(unit, None)
        self._errors_counted.discard(unit)
        self.metrics.forget_unit(unit.id)

    def forget(self, unit: Unit) -> None:
        """Another repository's unit, or one pruned: nothing of it is reported on."""
        self.changes.touch(unit.id)
        self.units.pop(unit, None)
        self.published.pop(unit, None)
        self.health.pop(unit, None)
        self.holds.forget(unit)

    def publish(self, unit: Unit) -> None:
        """The unit's state, recomputed, to the metrics (flower_syncer_unit_state) and, when it
        changed, to the log (the reasons and the messages, which name files, lines and objects,
        never secret values). Called at every revision, every sync and every status round: so it also
        tells the web view that the unit may have changed (`changes`)."""
        self.changes.touch(unit.id)
        state = self.unit_state(unit)
        key = (str(state.synced.reason), str(state.healthy.reason))
        self.metrics.set_unit_state(unit.id, *key)
        seen = (*key, state.synced.message, state.healthy.message)
        with _PUBLISHING:  # the status thread and a worker may publish one unit at once: one of them tells
            before = self.published.get(unit)
            if before == seen:
                return
            self.published[unit] = seen
        if before is not None and state.synced.status and before[0] not in (
                SyncedReason.SYNCED, SyncedReason.PENDING, SyncedReason.SUSPENDED, SyncedReason.HELD,
                SyncedReason.CANARY):
            self.report(unit, recovered_event(unit, before[0], state.revision))
        if before is None and key[0] in (SyncedReason.PENDING, SyncedReason.SYNCED):
            return  # a unit first seen (the agent starting): only its troubles are news
        log.info("unit state", unit=unit.id, synced=key[0], health=key[1], ready=state.ready,
                 revision=state.revision[:12], why=state.synced.message if not state.synced.status else "",
                 health_message=state.healthy.message if not state.healthy.status else "")

    def set_refusal(self, refusal: str) -> None:
        """The source refused its newest revision (`refusal`: why; not signed as the admin's policy
        requires), or took one again (""). While refused, nothing of it is applied, the last good
        revision stays, and every unit of the repository says so: Synced False, reason Unverified,
        and one Warning Event per refused revision (then the Synced Event when one is applied)."""
        if refusal == self.refusal:
            return
        self.refusal = refusal
        if refusal:
            log.error("revision refused: not signed as the admin's policy requires; the last good revision stays",
                      error=refusal)
        for unit in self.known_units():
            if refusal:
                self.report(unit, unverified_event(unit, refusal))
            self.publish(unit)

    def unit_report(self, unit: Unit, state: UnitConditions) -> dict[str, Any]:
        """One unit of `/api/v1/status`: its conditions beside what its last sync did."""
        plan = self.current.plan
        st = self.units.get(unit)
        result = st.last_result if st else None
        errors = st.config_errors if st is not None and unit in plan.failed else []
        return {
            "unit": unit.id,
            "inGit": plan.in_git(unit),
            "lastSync": (st.last_sync if st else 0.0) or None,
            "lastAppliedRevision": st.last_revision if st else "",
            "ok": result.ok if result else None,
            "suspended": state.synced.reason == "Suspended",
            "errors": (result.errors if result else []) + [describe(d) for d in errors]
            + ([st.internal_error] if st is not None and st.internal_error else []),
            "failedObjects": [c.to_dict() for c in result.failures()] if result else [],
            "nodeKeys": result.node_keys.to_dict() if result and result.node_keys else None,
            **state.to_dict(),
            **({"flower": self.flower.to_dict(unit)} if self.flower is not None and unit.kind == "federation" else {}),
            **({"hold": hold} if (hold := self.holds.status(unit)) is not None else {}),
        }


class Booked(Protocol):
    """Whatever holds a unit book (the Agent): what the web view (agent.view) reads it through."""

    @property
    def book(self) -> UnitBook: ...


def known_units(agent: Booked) -> list[Unit]:
    return agent.book.known_units()


def unit_state(agent: Booked, unit: Unit) -> UnitConditions:
    return agent.book.unit_state(unit)
