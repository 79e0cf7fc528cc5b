"""The web view's data (`syncer.observe.view`) from what the agent already holds: each unit's
conditions (`unitstate`), the last status round's pools and GPUs (`Agent.statuses`), the
Flower-level health of the last round (`FlowerWatch`), the last sync's result and what differed
from Git (`Agent.drifted`), and the inventories of the live cache (objects, history). No request to
the cluster or to a SuperLink: a page view costs what this module computes, nothing more."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from syncer.agent.unitstate import known_units, unit_state
from syncer.identity import ObjectRef, Unit
from syncer.observe.conditions import UnitConditions, describe
from syncer.observe.view import DialingRow, HistoryRow, ObjectRow, PoolRow, UnitRow, UnitView

if TYPE_CHECKING:
    from syncer.agent.agent import Agent


def unit_rows(agent: Agent, ids: Collection[str] | None = None) -> list[UnitRow]:
    """Every unit the agent reports on, as overview rows; with `ids`, only those of them (the
    units touched since a page last read them: `syncer.observe.view.Changes`)."""
    return [unit_row(agent, unit, unit_state(agent, unit))
            for unit in (known_units(agent) if ids is None else _known(agent, ids))]


def _known(agent: Agent, ids: Collection[str]) -> list[Unit]:
    plan, units = agent.installed.plan, agent.units
    out = []
    for i in ids:
        try:
            unit = Unit.parse(i)
        except ValueError:
            continue
        if unit in plan.units or unit in plan.failed or unit in units:
            out.append(unit)
    return out


def known_unit(agent: Agent, selector: str) -> Unit | None:
    """The unit whose id is `selector`, when the agent reports on it."""
    found = _known(agent, (selector,))
    return found[0] if found else None


def unit_row(agent: Agent, unit: Unit, state: UnitConditions) -> UnitRow:
    st = agent.statuses.get(unit)
    flower = agent.flower.health.get(unit) if agent.flower is not None else None
    reachable = flower is not None and flower.reachable
    message = state.synced.message if not state.synced.status else state.healthy.message
    return UnitRow(
        unit=unit.id, repository=agent.options.repository,
        synced=str(state.synced.reason), synced_ok=state.synced.status,
        healthy=str(state.healthy.reason), healthy_ok=state.healthy.status,
        message=message, revision=state.revision[:12],
        pools_ready=sum(1 for p in st.pools if p.healthy) if st is not None else None,
        pools=len(st.pools) if st is not None else None,
        supernodes_online=sum(min(p.online, p.expected) for p in flower.pools) if reachable and flower else None,
        supernodes_expected=flower.expected if reachable and flower else None,
        runs_running=flower.runs.get("running", 0) if reachable and flower else None,
        runs_failed=flower.runs.get("failed", 0) if reachable and flower else None,
        gpus=sum(c.allocated for p in st.pools for c in p.gpus.values()) if st is not None else None,
        drift=len(agent.drifted.get(unit, ())),
        suspended=str(state.synced.reason) == "Suspended",
    )


def unit_view(agent: Agent, selector: str) -> UnitView | None:
    """The page of the unit whose id is `selector`; None when the agent knows no such unit."""
    unit = known_unit(agent, selector)
    if unit is None:
        return None
    state = unit_state(agent, unit)
    row = unit_row(agent, unit, state)
    st = agent.statuses.get(unit)
    flower = agent.flower.health.get(unit) if agent.flower is not None else None
    online = {p.pool: p for p in flower.pools if p.unit == unit.id} if flower is not None else {}
    pools = tuple(PoolRow(pool=p.pool, kind=p.kind, name=p.name, ready=p.ready, desired=p.desired, healthy=p.healthy,
                          reason=p.summary, gpus=sum(c.allocated for c in p.gpus.values()),
                          online=online[p.pool].online if p.pool in online else None,
                          expected=online[p.pool].expected if p.pool in online else None)
                  for p in (st.pools if st is not None else ()))
    dialing = tuple(DialingRow(p.unit, p.pool, p.online, p.expected)
                    for p in (flower.pools if flower is not None else ()) if p.unit != unit.id)
    ust = agent.units.get(unit)
    inv = agent.cache.state.inventories.get(unit)
    result = ust.last_result if ust is not None else None
    plan = agent.installed.plan
    errors = [*(result.errors if result else []),
              *(describe(d) for d in (ust.config_errors if ust is not None and unit in plan.failed else [])),
              *([ust.internal_error] if ust is not None and ust.internal_error else [])]
    return UnitView(
        row=row,
        conditions=tuple((c.type, c.status, str(c.reason), c.message) for c in (state.synced, state.healthy)),
        errors=tuple(dict.fromkeys(errors)),
        pools=pools, dialing=dialing,
        superlink=flower.address if flower is not None else "",
        superlink_error=flower.error if flower is not None else "",
        runs=dict(flower.runs) if flower is not None and flower.reachable else {},
        last_failure=_failure(flower.to_dict()) if flower is not None else "",
        objects=_objects(agent, unit),
        history=tuple(HistoryRow(a.revision[:12], a.at, a.by, ", ".join(f"{n} {k}" for k, n in a.counts))
                      for a in (inv.history if inv is not None else ())),
        last_sync=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ust.last_sync)) if ust and ust.last_sync else "",
    )


def _failure(flower: dict[str, Any]) -> str:
    failure = flower.get("runs", {}).get("lastFailure")
    if not failure:
        return ""
    return f"run {failure.get('runId')}: {failure.get('message', '')}"


def _objects(agent: Agent, unit: Unit) -> tuple[ObjectRow, ...]:
    """The objects its inventory lists, with the last sync's action on each, whether it differs
    from Git now, and whether that sync put it back."""
    inv = agent.cache.state.inventories.get(unit)
    ust = agent.units.get(unit)
    changes = {c.ref: c for c in ust.last_result.changes} if ust is not None and ust.last_result else {}
    drifted = set(agent.drifted.get(unit, ()))
    refs: set[ObjectRef] = set(inv.entries) if inv is not None else set()
    refs |= set(changes) | drifted
    rows = []
    for ref in sorted(refs, key=lambda r: (r.kind, r.namespace, r.name)):
        change = changes.get(ref)
        rows.append(ObjectRow(ref=str(ref), action=str(change.action) if change else "",
                              drift=ref in drifted, corrected=change is not None and change.drift,
                              detail=change.message if change else ""))
    return tuple(rows)
