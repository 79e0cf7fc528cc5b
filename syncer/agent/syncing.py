"""The workers: each takes a unit off the work queue and syncs it with the installed revision
through the engine (the leader only), records what came of it (metrics, drift, Events), requeues
it on failure, and posts `UnitSynced` for the dispatcher. Also the record of the revision checked
over every unit (`CheckedRecorder`), written off the dispatcher's thread."""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from syncer.agent.cache import LiveCache
from syncer.agent.canaries import Canaries
from syncer.agent.holding import Holds
from syncer.agent.liveness import Liveness
from syncer.agent.messages import Event, UnitSynced
from syncer.agent.reporting import sync_events
from syncer.agent.state import AgentOptions, Current
from syncer.agent.supervisor import Supervisor
from syncer.agent.unitstate import UnitBook
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.client import ClusterUnreachable
from syncer.cluster.events import Event as ReportedEvent
from syncer.cluster.fence import Fenced
from syncer.engine.changeset import Action, UnitResult
from syncer.engine.sync import Engine, SyncOptions, unit_namespaces
from syncer.identity import Unit
from syncer.observe.metrics import Metrics, corrections_by_kind, drift_by_kind
from syncer.plan import Plan

log = structlog.get_logger("syncer.agent")

SUPERLINK_STARTING_RETRY = 10.0  # longest wait before registering keys again at a SuperLink that does not answer


class UnitSyncs:
    def __init__(self, engine: Engine, cache: LiveCache, current: Current, work: WorkQueue[Unit], *,
                 book: UnitBook, holds: Holds, canaries: Canaries, metrics: Metrics,
                 report: Callable[[Unit, ReportedEvent], None],
                 post: Callable[[Event], None], options: AgentOptions, leading: threading.Event,
                 liveness: Liveness, supervisor: Supervisor,
                 failed: Callable[[Unit, BaseException, str], None]) -> None:
        self.engine = engine
        self.cache = cache
        self.current = current
        self.work = work
        self.book = book
        self.holds = holds
        self.canaries = canaries  # canary pools' steps and when to look again (agent.canaries)
        self.metrics = metrics
        self.report = report
        self.post = post  # onto the agent's event queue
        self.options = options
        self.leading = leading
        self.liveness = liveness  # syncs in flight: /healthz
        self.supervisor = supervisor
        self.failed = failed  # a sync that raised (agent.failures)

    def run(self) -> None:
        """A worker thread: until the queue shuts down."""
        while (unit := self.work.get()) is not None:
            self.work_on(unit)

    def work_on(self, unit: Unit) -> None:
        try:
            if self.leading.is_set():  # the leader does the writing; we pick the unit up when we lead
                with self.liveness.syncing(unit):
                    self.supervisor.guard("sync", functools.partial(self.sync, unit),
                                          quiet=(Fenced, ClusterUnreachable),
                                          on_error=functools.partial(self.failed, unit), about={"unit": unit.id})
        finally:
            self.work.done(unit)

    def drain(self) -> int:
        """Work on every unit the queue hands out now (not those waiting for a backoff) on the
        caller's thread, as a worker does; returns how many."""
        count = 0
        while (unit := self.work.get(timeout=0)) is not None:
            self.work_on(unit)
            count += 1
        return count

    def sync(self, unit: Unit) -> None:
        """Sync one unit with the installed plan, on the caller's thread (a worker's, or a test's):
        record it in the metrics, requeue it on failure, report its Events, post UnitSynced."""
        if not self.cache.synced.is_set() and not self.cache.wait_synced(30):
            # without the listed inventories and objects a sync would record a partial inventory,
            # and what left Git meanwhile would never be pruned: wait for the watches instead
            log.warning("the cluster's objects are not listed yet; the unit waits", unit=unit.id,
                        retry_in=self.work.retry(unit))
            return
        plan = self.current.plan  # one snapshot for the whole sync
        desired = plan.units.get(unit)
        revision = desired.revision if desired is not None else plan.revision
        before = self.cache.state.inventories.get(unit)
        held = self.holds.held.get(unit)
        opts = SyncOptions(prune=self.options.prune,
                           gate=self.holds.gate(desired, plan, before) if desired is not None else None,
                           canary_health=self.canaries.health(unit))
        known = set(before.entries) if before else set()
        start = time.monotonic()
        if desired is None:
            result = self._prune_vanished(unit, opts, plan)
        else:
            result = self.engine.sync_unit(desired, self.cache.state, opts, plan)
        seconds = time.monotonic() - start
        self.holds.after(unit, result, held)
        self.canaries.after(unit, result, revision)
        self.metrics.observe_sync(result, seconds)
        self.metrics.set_suspended(unit.id, result.skipped is not None and result.skipped.suspended)
        if result.node_keys is not None and not result.node_keys.waiting:
            self.metrics.set_supernode_keys(unit.id, result.node_keys.admitted, result.node_keys.failing)
        corrected = corrections_by_kind(result, known)
        if corrected:
            self.metrics.observe_drift_corrections(unit.id, corrected)
        if result.skipped is None:  # what still differs from Git: the objects that failed
            failed = Counter(c.ref.kind for c in result.changes if c.action is Action.FAILED)
            self.metrics.set_drift(unit.id, failed)
            self.book.drifted[unit] = tuple(c.ref for c in result.changes if c.action is Action.FAILED)
        elif result.skipped.suspended and desired is not None:
            dry = self.engine.suspended_drift(desired, self.cache.state, plan)
            self.metrics.set_drift(unit.id, drift_by_kind(dry))
            self.book.drifted[unit] = tuple(c.ref for c in dry.changes if c.action.is_change)
        writes = sum(1 for c in result.changes if c.action.is_change)
        if writes or not result.ok:
            log.info("unit synced", unit=unit.id, revision=revision[:12], ok=result.ok,
                     seconds=round(seconds, 3), changed=writes,
                     unchanged=result.count(Action.UNCHANGED), errors=result.errors[:3],
                     failed=[str(c.ref) for c in result.changes if c.action is Action.FAILED][:5])
        if result.ok:  # keys that waited for their namespace's share: the next status round asks them
            self.work.forget(unit)
        else:
            # a SuperLink still starting is retried every status round, not after minutes of backoff
            # (the syncs its own pods' events trigger meanwhile would have doubled it to 5 min)
            starting = result.node_keys is not None and result.node_keys.superlink_unreachable and not result.failures()
            delay = self.work.retry(unit, cap=SUPERLINK_STARTING_RETRY if starting else None)
            log.warning("unit failed; retrying", unit=unit.id, retry_in=delay, error=result.first_error())
        if not opts.dry_run:
            for ev in sync_events(unit, result, known, revision):
                self.report(unit, ev)
        self.post(UnitSynced(unit, result, seconds, revision))

    def _prune_vanished(self, unit: Unit, opts: SyncOptions, plan: Plan) -> UnitResult:
        """A unit removed from Git: the engine's rules and deletion, then forget its figures."""
        had_inventory = unit in self.cache.state.inventories
        res = self.engine.prune_vanished(unit, self.cache.state, opts, plan)
        if had_inventory and unit not in self.cache.state.inventories:
            self.book.pruned(unit)
        return res


class CheckedRecorder:
    """Every unit of a revision has been synced: note it for `status` (syncer.engine.checked_revision), the
    leader only, on a thread of its own (never the dispatcher's)."""

    def __init__(self, engine: Engine, cache: LiveCache, current: Current, *, namespaces: list[str] | None,
                 leading: threading.Event, supervisor: Supervisor) -> None:
        self.engine = engine
        self.cache = cache
        self.current = current
        self.namespaces = namespaces
        self.leading = leading
        self.supervisor = supervisor
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checked")

    def checked(self, revision: str) -> None:
        if self.leading.is_set():
            plan = self.current.plan
            write = functools.partial(self._write, plan.repository, revision, unit_namespaces(plan, self.namespaces))
            self._pool.submit(self.supervisor.guard, "recording the checked revision", write)

    def _write(self, repository: str, revision: str, namespaces: set[str]) -> None:
        try:
            errors = self.engine.record_checked(repository, revision, namespaces, self.cache.state,
                                                source=self.current.plan.source)
        except Fenced:
            return  # the next leader records it
        for error in errors:
            log.warning("could not record the checked revision", revision=revision[:12], error=error)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
