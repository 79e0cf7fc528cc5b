"""Where a failure of the agent is reported: the `on_error` handlers of the supervisor's guards
for the dispatcher (one event) and the workers (one unit's sync). Each turns the exception into
an error a user sees where they look for it (the unit's status and Events, the fetch error, the
waiting `resync --wait`) and leaves the agent able to go on: the unit is synced again later."""

from __future__ import annotations

import structlog

from syncer.agent.messages import (
    Event,
    InventoryChanged,
    InventoryDeleted,
    ObjectChanged,
    ResyncRequested,
    RevisionFetched,
    UnitSynced,
)
from syncer.agent.reporting import internal_error_event
from syncer.agent.state import AgentView, UnitState
from syncer.cluster.client import ClusterUnreachable
from syncer.cluster.fence import Fenced
from syncer.engine.changeset import Cause, UnitResult
from syncer.identity import Unit

log = structlog.get_logger("syncer.agent")


def _unit_of(event: Event) -> Unit | None:
    if isinstance(event, ObjectChanged | InventoryDeleted | UnitSynced):
        return event.unit
    if isinstance(event, InventoryChanged):
        return event.inventory.unit
    return None


def event_failed(agent: AgentView, event: Event, _exc: BaseException, text: str) -> None:
    """The dispatcher failed on `event` (runs on the dispatcher's thread)."""
    if isinstance(event, RevisionFetched):
        # the revision could not be installed: the last good one stays; the next fetch tries again
        rev = event.checkout.revision[:12]
        agent.fetch_error = f"revision {rev} could not be installed (the last good revision stays): {text}"
        for waiter in [w for w in agent.waiters if w.units is None]:
            waiter.finish(agent.fetch_error)
            agent.waiters.remove(waiter)
        return
    if isinstance(event, ResyncRequested):
        if event.waiter is not None:
            event.waiter.finish(f"the resync request failed: {text}")
            if event.waiter in agent.waiters:
                agent.waiters.remove(event.waiter)
        return
    unit = _unit_of(event)
    if unit is None:
        return
    agent.units.setdefault(unit, UnitState()).internal_error = f"the agent failed handling a change: {text}"
    if isinstance(event, UnitSynced):  # whoever waits for this unit hears about it
        for waiter in list(agent.waiters):
            if waiter.units is not None and unit in waiter.units:
                waiter.units.discard(unit)
                failed = waiter.results[unit.id] = UnitResult(unit)
                failed.fail(Cause.CRASHED, text)
                if not waiter.units:
                    waiter.finish()
                    agent.waiters.remove(waiter)
    agent.report(unit, internal_error_event(unit, text))
    if agent.ours(unit):
        agent.work.retry(unit)  # a sync puts right whatever the event meant (after a backoff: no tight loop)


def sync_failed(agent: AgentView, unit: Unit, exc: BaseException, text: str) -> None:
    """A worker's sync of `unit` raised (runs on the worker's thread)."""
    if isinstance(exc, Fenced):
        # the Lease may be someone else's by now: stop here, write nothing more; whoever leads
        # next syncs the unit (and so do we, should we lead again). Not a failure of the unit's
        # config: counted as fenced.
        agent.metrics.observe_fenced(unit.id)
        log.warning("sync fenced: this replica no longer holds the Lease", unit=unit.id,
                    refused=f"{exc.method} {exc.path}", reason=exc.detail)
        return
    agent.work.retry(unit)  # first: whatever fails below, the unit is tried again
    crashed = UnitResult(unit)
    if isinstance(exc, ClusterUnreachable):
        log.warning("sync failed: the API server is unreachable", unit=unit.id, error=str(exc))
        crashed.fail(Cause.UNREACHABLE, f"sync failed: {exc}")
    else:
        crashed.fail(Cause.CRASHED, f"sync crashed: {text}")
    agent.metrics.observe_sync(crashed, 0.0)
    agent.events.put(UnitSynced(unit, crashed, 0.0, agent.installed.plan.revision))

