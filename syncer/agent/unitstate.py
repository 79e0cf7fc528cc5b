"""Each unit's state as the agent knows it now: its Synced and Healthy conditions
(`syncer.observe.conditions`), recomputed from the installed revision, the last sync and the last
status round every time it is asked for, so no earlier revision's or sync's reason can stay behind.
`Agent.unit_conditions()` and `/api/v1/status` read it; so do the metrics and the logs."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog

from syncer.agent.reporting import recovered_event, unverified_event
from syncer.agent.state import AgentView, UnitTables
from syncer.identity import Unit
from syncer.observe.conditions import (
    HealthReason,
    SyncedReason,
    UnitCondition,
    UnitConditions,
    describe,
    healthy_condition,
    synced_condition,
)
from syncer.render.tenancy import Tenancy

if TYPE_CHECKING:
    from syncer.observe.conditions import HealthCheck
    from syncer.observe.status import UnitStatus

log = structlog.get_logger("syncer.agent")
_PUBLISHING = threading.Lock()  # guards every agent's `published` table: a compare-and-set, nothing slow

UNKNOWN_HEALTH = UnitCondition("Healthy", False, HealthReason.UNKNOWN, "no status round yet")


def known_units(agent: UnitTables) -> list[Unit]:
    """Every unit the agent reports on: in Git (loaded, or failed to load), or synced before."""
    plan = agent.installed.plan  # one snapshot; `units` copied at once (the status thread asks too)
    return sorted(set(plan.units) | set(plan.failed) | set(agent.units.copy()))


def suspended(agent: UnitTables, unit: Unit) -> bool:
    """Suspended now: by `flower-syncer suspend` (its inventory) or by its policy in Git."""
    inv = agent.cache.state.inventories.get(unit)
    desired = agent.installed.plan.units.get(unit)
    return (inv is not None and inv.suspended) or (desired is not None and desired.policy.suspend)


def unit_state(agent: UnitTables, unit: Unit) -> UnitConditions:
    plan = agent.installed.plan
    st = agent.units.get(unit)
    errors = st.config_errors if st is not None and unit in plan.failed else []
    synced = synced_condition(config_errors=errors, result=st.last_result if st else None,
                              suspended=suspended(agent, unit), internal_error=st.internal_error if st else "",
                              in_git=plan.in_git(unit), refused=agent.refusal)
    desired = plan.units.get(unit)
    return UnitConditions(synced, agent.health.get(unit, UNKNOWN_HEALTH),
                          desired.revision if desired is not None else (st.last_revision if st else ""))


def unit_states(agent: UnitTables) -> dict[Unit, UnitConditions]:
    return {unit: unit_state(agent, unit) for unit in known_units(agent)}


def observe_health(agent: UnitTables, units: Sequence[UnitStatus], checks: Sequence[HealthCheck] = ()) -> None:
    """A status round's figures: each unit's Healthy condition, replaced as a whole (a unit no
    longer reported has no health figures); then every unit's state is published again."""
    agent.health = {Unit.parse(u.unit): healthy_condition(u.pools, found=u.found, checks=checks, subject=u)
                    for u in units}
    for unit in known_units(agent):
        publish(agent, unit)


def publish(agent: UnitTables, unit: Unit) -> None:
    """The unit's state, recomputed, to the metrics (flower_syncer_unit_state) and, when it
    changed, to the log (the reasons and the messages, which name files, lines and objects, never
    secret values). Called at every revision, every sync and every status round: so it also tells
    the web view that the unit may have changed (`agent.changes`)."""
    agent.changes.touch(unit.id)
    state = unit_state(agent, unit)
    key = (str(state.synced.reason), str(state.healthy.reason))
    agent.metrics.set_unit_state(unit.id, *key)
    seen = (*key, state.synced.message, state.healthy.message)
    with _PUBLISHING:  # the status thread and a worker may publish one unit at once: one of them tells
        before = agent.published.get(unit)
        if before == seen:
            return
        agent.published[unit] = seen
    if before is not None and state.synced.status and before[0] not in (SyncedReason.SYNCED, SyncedReason.PENDING,
                                                                         SyncedReason.SUSPENDED, SyncedReason.HELD,
                                                                         SyncedReason.CANARY):
        agent.report(unit, recovered_event(unit, before[0], state.revision))
    if before is None and key[0] in (SyncedReason.PENDING, SyncedReason.SYNCED):
        return  # a unit first seen (the agent starting): only its troubles are news
    log.info("unit state", unit=unit.id, synced=key[0], health=key[1], ready=state.ready,
                 revision=state.revision[:12], why=state.synced.message if not state.synced.status else "",
                 health_message=state.healthy.message if not state.healthy.status else "")


def set_refusal(agent: UnitTables, refusal: str) -> None:
    """The source refused its newest revision (`refusal`: why; not signed as the admin's policy
    requires), or took one again (""). While refused, nothing of it is applied, the last good
    revision stays, and every unit of the repository says so: Synced False, reason Unverified, and
    one Warning Event per refused revision (then the Synced Event when a revision is applied)."""
    if refusal == agent.refusal:
        return
    agent.refusal = refusal
    if refusal:
        log.error("revision refused: not signed as the admin's policy requires; the last good revision stays",
                  error=refusal)
    for unit in known_units(agent):
        if refusal:
            agent.report(unit, unverified_event(unit, refusal))
        publish(agent, unit)


def forget(agent: UnitTables, unit: Unit) -> None:
    agent.changes.touch(unit.id)
    agent.published.pop(unit, None)
    agent.health.pop(unit, None)
    agent.holds.forget(unit)


def unit_report(agent: UnitTables, unit: Unit, state: UnitConditions) -> dict[str, Any]:
    """One unit of `/api/v1/status`: its conditions beside what its last sync did."""
    plan = agent.installed.plan
    st = agent.units.get(unit)
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
        **({"flower": agent.flower.to_dict(unit)} if agent.flower is not None and unit.kind == "federation" else {}),
        **({"hold": hold} if (hold := agent.holds.status(unit)) is not None else {}),
    }


def agent_status(agent: AgentView) -> dict[str, Any]:
    """`/api/v1/status`: the agent (`ready`: its own readiness, see Agent.ready; `unitsReady`: every
    unit Synced and Healthy), its source, and each unit with its conditions."""
    states = unit_states(agent)
    checkout = agent.checkout
    return {
        "leader": agent.leading.is_set(),
        "ready": agent.ready()[0],
        "unitsReady": all(state.ready for state in states.values()),
        "source": {
            "url": agent.source.describe(),
            "revision": checkout.revision if checkout else "",
            "subject": checkout.subject if checkout else "",
            "error": agent.fetch_error,
        },
        "queueDepth": agent.work.depth(),
        "flowerHealth": "on" if agent.flower is not None and agent.flower.probe.enabled else "off",
        "tenancy": (agent.options.tenancy or Tenancy()).status(),
        "units": [unit_report(agent, unit, state) for unit, state in states.items()],
        "supervisor": agent.supervisor.summary(),
        "stuck": agent.liveness.why(),  # "" while the agent makes progress; else why /healthz is 503
    }
