"""The agent's components, each a narrow object of its own, made and connected in one place
(agent.wiring.build_agent) and never replaced afterwards (the dataclass is frozen). `Agent` adds
the dispatcher and the agent's lifecycle on top of them (agent.agent)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from syncer.agent.cache import LiveCache
from syncer.agent.canaries import Canaries
from syncer.agent.failures import Failures
from syncer.agent.fetching import Fetcher
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.holding import Holds
from syncer.agent.installer import Installer
from syncer.agent.liveness import Liveness
from syncer.agent.messages import Event
from syncer.agent.progress import RevisionProgress
from syncer.agent.reporter import Reporter
from syncer.agent.resyncs import Resyncs
from syncer.agent.state import AgentOptions, Current, Source
from syncer.agent.supervisor import Supervisor
from syncer.agent.syncing import CheckedRecorder, UnitSyncs
from syncer.agent.unitstate import UnitBook
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.client import Kube
from syncer.engine.sync import Engine
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.observe.view import Changes


@dataclass(frozen=True, eq=False)
class AgentParts:
    kube: Kube
    source: Source
    metrics: Metrics
    options: AgentOptions
    # the agent's signals: one queue of events for the dispatcher, and the flags every thread reads
    events: queue.Queue[Event]
    stop: threading.Event
    leading: threading.Event  # this replica holds the Lease (or there is no election): it writes
    loaded: threading.Event  # the first revision is installed
    handling: threading.Event  # the dispatcher is handling an event (Agent.idle)
    supervisor: Supervisor  # every thread: an exception is reported, never fatal
    liveness: Liveness  # syncs in flight and tenant calls past their deadline: /healthz
    # revisions: fetched (source thread), installed as the desired state (dispatcher)
    current: Current
    fetcher: Fetcher
    installer: Installer
    progress: RevisionProgress
    checked: CheckedRecorder
    # the cluster as watched, and the work on it: the queue, the workers, the engine they sync with
    cache: LiveCache
    work: WorkQueue[Unit]
    engine: Engine
    syncs: UnitSyncs
    # what the agent knows and tells of each unit
    book: UnitBook
    reporter: Reporter
    failures: Failures
    resyncs: Resyncs
    holds: Holds  # restarts that wait for runs (agent.holding)
    canaries: Canaries  # canary pools' steps, told once, and when to look again (agent.canaries)
    changes: Changes  # touched where a unit's state may change (UnitBook.publish, forget): the web view
    flower: FlowerWatch | None  # Flower-level health of the federations (agent.flower_watch); None: off
    # hooks others register on: more reasons not to be ready ("": none), e.g. the Lease's; listeners of
    # each sync handled (the FlowerUnits' writer, on the dispatcher's thread)
    readiness: list[Callable[[], str]]
    on_unit_synced: list[Callable[[Unit], None]]
    threads: list[threading.Thread]  # the agent's own threads, joined at shutdown
