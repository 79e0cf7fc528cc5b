"""Where a failure of the agent is reported: the `on_error` handlers of the supervisor's guards
for the dispatcher (one event) and the workers (one unit's sync). Each turns the exception into
an error a user sees where they look for it (the unit's status and Events, the fetch error, the
waiting `resync --wait`) and leaves the agent able to go on: the unit is synced again later."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from syncer.agent.installer import Installer
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
from syncer.agent.resyncs import Resyncs
from syncer.agent.state import Current
from syncer.agent.unitstate import UnitBook
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.client import ClusterUnreachable
from syncer.cluster.events import Event as ReportedEvent
from syncer.cluster.fence import Fenced
from syncer.engine.changeset import Cause, UnitResult
from syncer.identity import Unit
from syncer.observe.metrics import Metrics

log = structlog.get_logger("syncer.agent")


def _unit_of(event: Event) -> Unit | None:
    if isinstance(event, ObjectChanged | InventoryDeleted | UnitSynced):
        return event.unit
    if isinstance(event, InventoryChanged):
        return event.inventory.unit
    return None


class Failures:
    def __init__(self, installer: Installer, resyncs: Resyncs, book: UnitBook, work: WorkQueue[Unit], *,
                 current: Current, metrics: Metrics, report: Callable[[Unit, ReportedEvent], None],
                 post: Callable[[Event], None]) -> None:
        self.installer = installer
        self.resyncs = resyncs
        self.book = book
        self.work = work
        self.current = current
        self.metrics = metrics
        self.report = report
        self.post = post  # onto the agent's event queue

    def event_failed(self, event: Event, _exc: BaseException, text: str) -> None:
        """The dispatcher failed on `event` (runs on the dispatcher's thread)."""
        if isinstance(event, RevisionFetched):
            # the revision could not be installed: the last good one stays; the next fetch tries again
            self.installer.install_failed(event.checkout, text)
            self.resyncs.fetch_failed(self.installer.fetch_error)
            return
        if isinstance(event, ResyncRequested):
            if event.waiter is not None:
                self.resyncs.request_failed(event.waiter, text)
            return
        unit = _unit_of(event)
        if unit is None:
            return
        self.book.failed_handling(unit, text)
        if isinstance(event, UnitSynced):  # whoever waits for this unit hears about it
            self.resyncs.crashed(unit, text)
        self.report(unit, internal_error_event(unit, text))
        if self.installer.ours(unit):
            self.work.retry(unit)  # a sync puts right whatever the event meant (after a backoff: no tight loop)

    def sync_failed(self, unit: Unit, exc: BaseException, text: str) -> None:
        """A worker's sync of `unit` raised (runs on the worker's thread)."""
        if isinstance(exc, Fenced):
            # the Lease may be someone else's by now: stop here, write nothing more; whoever leads
            # next syncs the unit (and so do we, should we lead again). Not a failure of the unit's
            # config: counted as fenced.
            self.metrics.observe_fenced(unit.id)
            log.warning("sync fenced: this replica no longer holds the Lease", unit=unit.id,
                        refused=f"{exc.method} {exc.path}", reason=exc.detail)
            return
        self.work.retry(unit)  # first: whatever fails below, the unit is tried again
        crashed = UnitResult(unit)
        if isinstance(exc, ClusterUnreachable):
            log.warning("sync failed: the API server is unreachable", unit=unit.id, error=str(exc))
            crashed.fail(Cause.UNREACHABLE, f"sync failed: {exc}")
        else:
            crashed.fail(Cause.CRASHED, f"sync crashed: {text}")
        self.metrics.observe_sync(crashed, 0.0)
        self.post(UnitSynced(unit, crashed, 0.0, self.current.plan.revision))
