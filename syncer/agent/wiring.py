"""Where the agent's parts are made and connected: the one place (`build_agent`) that knows which
part talks to which. Every part takes the few objects it uses, made before it, so nothing is set
after construction: the queue and the flags first, then the reporter, Flower-level health, the
holds and the canary pools, then the unit tables, the installer, the workers, and the Agent over all of them."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from syncer.agent.agent import Agent
from syncer.agent.cache import LiveCache
from syncer.agent.canaries import Canaries
from syncer.agent.failures import Failures
from syncer.agent.fetching import Fetcher
from syncer.agent.flower_probe import FlowerProbe
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.holding import Holds, hold_limits
from syncer.agent.installer import Installer
from syncer.agent.liveness import Liveness
from syncer.agent.messages import Event, InventoryChanged, InventoryDeleted, KeysForgotten, ObjectChanged
from syncer.agent.progress import RevisionProgress
from syncer.agent.reporter import Reporter
from syncer.agent.resyncs import Resyncs
from syncer.agent.revision import RevisionLoader
from syncer.agent.state import AgentOptions, Current, Source
from syncer.agent.supervisor import Supervisor
from syncer.agent.syncing import CheckedRecorder, UnitSyncs
from syncer.agent.unitstate import UnitBook
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.client import Kube
from syncer.cluster.events import Event as ReportedEvent
from syncer.cluster.events import EventRecorder
from syncer.engine.nodekeys import worker_share
from syncer.engine.sync import Engine
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.observe.notify import Notifier
from syncer.observe.view import Changes

FlowerFactory = Callable[[Callable[[Unit, ReportedEvent], None], Callable[[Unit], None]], FlowerWatch]
"""(report, rekey) -> the Flower-level health watch; a test's fake stands in for it."""


def build_agent(kube: Kube, source: Source, metrics: Metrics, options: AgentOptions,
                recorder: EventRecorder | None = None, notifier: Notifier | None = None, *,
                probe: FlowerProbe | None = None, flower: FlowerFactory | None = None,
                liveness: Liveness | None = None) -> Agent:
    """The agent, not started. `probe`: Flower-level health through it (agent.flower_watch);
    `flower`: the watch made otherwise (a test's); neither: no Flower-level health."""
    events: queue.Queue[Event] = queue.Queue()
    stop, leading, loaded = threading.Event(), threading.Event(), threading.Event()
    work: WorkQueue[Unit] = WorkQueue()
    supervisor = Supervisor(stop)
    current = Current()
    reporter = Reporter(leading, supervisor.guard, recorder, notifier)
    rekey: Callable[[Unit], None] = lambda unit: events.put(KeysForgotten(unit))  # noqa: E731
    watch = (flower(reporter.report, rekey) if flower is not None
             else FlowerWatch(probe, reporter.report, time.monotonic, rekey=rekey) if probe is not None else None)
    holds = Holds(reporter.report, work.add_after, lambda: watch, limits=hold_limits(options.tenancy))
    canaries = Canaries(reporter.report, work.add_after, lambda: watch)
    changes = Changes()
    cache = LiveCache(kube, namespaces=options.namespaces,
                      on_change=lambda unit, ref, obj: events.put(ObjectChanged(unit, ref, obj)),
                      on_inventory=lambda inv: events.put(InventoryChanged(inv)),
                      on_inventory_deleted=lambda unit: events.put(InventoryDeleted(unit)))
    engine = Engine(kube, unit_workers=1, identity=options.identity,
                    key_share=worker_share(options.workers))  # no tenant's keys hold every worker
    checked = CheckedRecorder(engine, cache, current, namespaces=options.namespaces, leading=leading,
                              supervisor=supervisor)
    progress = RevisionProgress(applied=metrics.observe_commit_applied, checked=checked.checked,
                                unit_applied=lambda u, s: metrics.observe_unit_commit_applied(u.id, s))
    book = UnitBook(current, cache, metrics, reporter.report, holds, watch, changes)
    installer = Installer(current, RevisionLoader(options.decryption_key_files, options.tenancy, options.cluster),
                          options, metrics=metrics, cache=cache, book=book, report=reporter.report,
                          progress=progress, supervisor=supervisor, loaded=loaded)
    resyncs = Resyncs(events.put, leading)
    failures = Failures(installer, resyncs, book, work, current=current, metrics=metrics, report=reporter.report,
                        post=events.put)
    liveness = liveness or Liveness()
    syncs = UnitSyncs(engine, cache, current, work, book=book, holds=holds, canaries=canaries, metrics=metrics,
                      report=reporter.report, post=events.put, options=options, leading=leading, liveness=liveness,
                      supervisor=supervisor,
                      failed=failures.sync_failed)
    fetcher = Fetcher(source, options, events, stop, supervisor.report)
    return Agent(kube=kube, source=source, metrics=metrics, options=options, events=events, stop=stop,
                 leading=leading, loaded=loaded, handling=threading.Event(), supervisor=supervisor,
                 liveness=liveness, current=current, fetcher=fetcher, installer=installer, progress=progress,
                 checked=checked, cache=cache, work=work, engine=engine, syncs=syncs, book=book, reporter=reporter,
                 failures=failures, resyncs=resyncs, holds=holds, canaries=canaries, changes=changes, flower=watch,
                 readiness=[], on_unit_synced=[], threads=[])
