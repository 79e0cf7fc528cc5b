"""`flower-syncer run`: wire the agent together and run it until SIGTERM/SIGINT.

Order of shutdown on a signal: cut the calls to tenants' servers (SuperLinks), stop taking work,
let the applies in flight finish, release the leader lease (so a standby takes over at once), stop
the HTTP server, exit 0.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from syncer import __version__
from syncer.actions.history import find_inventory
from syncer.actions.suspend import suspend_inventory
from syncer.agent.activity import Activity
from syncer.agent.agent import Agent
from syncer.agent.config import AgentConfig, load_policy, read_secret
from syncer.agent.flower_probe import FlowerProbe
from syncer.agent.flowerunits import FlowerUnits
from syncer.agent.memory import (
    Heap,
    allocation_report,
    fix_mmap_threshold,
    limit_malloc_arenas,
    release_free_memory,
)
from syncer.agent.stacks import StackDump
from syncer.agent.state import AgentOptions
from syncer.agent.view import known_unit, unit_rows, unit_view
from syncer.agent.wiring import build_agent
from syncer.cluster.client import ApiError, ClusterUnreachable, Kube, path_for
from syncer.cluster.events import EventRecorder
from syncer.cluster.fence import WriteFence
from syncer.cluster.lease import LeaderElector
from syncer.cluster.tenant_calls import TENANT_CALLS
from syncer.http import AgentServer
from syncer.identity import UnknownUnit, repository_identity
from syncer.logs import configure
from syncer.models.policy import AdminPolicy, RepositoryPolicy
from syncer.models.policymatch import canonical_ref
from syncer.observe.conditions import HealthCheck
from syncer.observe.gc_pauses import GCPauses
from syncer.observe.metrics import Metrics
from syncer.observe.notify import Notifier, load_receivers
from syncer.observe.status import targets_from
from syncer.observe.status_cache import StatusCache
from syncer.observe.view import Changes, UnitActivity, UnitRow, UnitView
from syncer.render.tenancy import Tenancy
from syncer.source.git import GitSource, SourceSpec, default_cache_dir
from syncer.source.location import local_origin, source_location
from syncer.source.refs import SourceError
from syncer.source.signatures import Verification
from syncer.source.watch import LocalRepoWatcher

log = structlog.get_logger("syncer.agent")

STATUS_INTERVAL = 10.0
SIGNAL_CHECK_INTERVAL = 0.5  # seconds: how late a signal another thread took may be handled


class _Api:
    """What the HTTP server exposes, backed by the agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def healthy(self) -> bool:
        return self.agent.healthy()

    def ready(self) -> tuple[bool, str]:
        return self.agent.ready()

    def status(self) -> dict[str, Any]:
        return {**self.agent.status(), "version": __version__}

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        result = self.agent.request_resync(unit, wait, timeout)
        if result.get("unknownUnit"):
            raise UnknownUnit(unit or "")
        return result

    def webhook(self, event: Any) -> None:
        self.agent.request_fetch("webhook")


class _View:
    """What the web view reads (syncer.agent.view) and its one write, suspend/resume (the CLI's
    `flower-syncer suspend`, on the unit's inventory): read with the agent's own rights, written with
    the rights its syncs have."""

    def __init__(self, agent: Agent, kube: Kube, namespaces: Sequence[str] | None) -> None:
        self.agent = agent
        self.kube = kube
        self.namespaces = namespaces
        self._activity = Activity(agent, kube)

    @property
    def changes(self) -> Changes:
        return self.agent.changes

    def rows(self, units: Collection[str] | None = None) -> list[UnitRow]:
        return unit_rows(self.agent, units)

    def unit(self, unit: str) -> UnitView | None:
        return unit_view(self.agent, unit)

    def activity(self, unit: str) -> UnitActivity | None:
        found = known_unit(self.agent, unit)
        return self._activity.of(found) if found is not None else None

    def suspend(self, unit: str, suspended: bool) -> bool:
        """Only a unit this repository owns, written as the agent writes (fenced: the leader only;
        impersonating the admin policy's ServiceAccount): never another repository's inventory."""
        inv = find_inventory(self.kube, unit, self.namespaces)
        plan = self.agent.installed.plan
        if not plan.owns_record(inv.repository, inv.source, in_git=inv.unit in plan.units):
            raise UnknownUnit(unit)  # another repository's unit: its own agent's to suspend
        return suspend_inventory(self.agent.kube, inv, suspended).changed

    def release_hold(self, unit: str) -> bool:
        found = [u for u in self.agent.installed.plan.units if u.id == unit]
        if not found:
            raise UnknownUnit(unit)
        return self.agent.holds.release_now(found[0])


def run(config: AgentConfig) -> int:
    configure(config.log_format, config.log_level)
    limit_malloc_arenas()  # before any thread starts
    fix_mmap_threshold()
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal received; shutting down", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR2, lambda _s, _f: threading.Thread(target=_log_allocations, daemon=True).start())
    # `kill -QUIT`: every thread's stack on stderr, as Go and Java programs do, written by a thread
    # of ours (agent.stacks: a C-level dump of running threads could crash the agent)
    StackDump().install()

    try:
        # the replica's identity in the user agent: the API server's audit log tells replicas apart
        kube = Kube.from_kubeconfig(config.kubeconfig, config.context,
                                    user_agent=f"flower-syncer/{__version__} ({config.identity})")
    except ClusterUnreachable as exc:
        log.error("cannot connect to Kubernetes", error=str(exc))
        return 3
    spec = SourceSpec(url=config.repo, ref=config.ref, path=config.path,
                      cache_dir=config.cache_dir or default_cache_dir(config.repo, config.ref),
                      token_file=config.git_token_file, username=config.git_username,
                      ssh_key_file=config.ssh_key_file, known_hosts_file=config.known_hosts_file)
    metrics = Metrics()
    metrics.set_poll_interval(config.interval)
    gc_pauses = GCPauses()
    metrics.registry.register(gc_pauses)
    try:
        tenancy = repository_tenancy(config)
    except SourceError as exc:
        log.error("invalid source", error=str(exc))
        return 2
    except ValueError as exc:
        log.error("invalid admin policy", error=str(exc), hint="fix the file given with --policy")
        return 2
    repository = tenancy.name
    # the admin's required signatures, and the ref fetched checked against the policy entry
    source = GitSource(dataclasses.replace(spec, verify=tenancy.verify, admit=tenancy.admit))
    # every write of the agent checks the fence: with leader election nothing is written until we
    # lead, and nothing after the lease's renew deadline (lease duration - safety margin)
    fence = WriteFence() if config.leader_elect else WriteFence.open()
    options = AgentOptions(namespaces=config.namespaces, workers=config.workers, poll_interval=config.interval,
                           repository=repository, identity=config.identity, tenancy=tenancy.tenancy,
                           cluster=config.cluster,
                           decryption_key_files=tuple(config.decryption_key_files or ()))
    try:
        notifier = Notifier(load_receivers(config.notifications_file)) if config.notifications_file else None
    except (OSError, ValueError) as exc:
        log.error("invalid notification config", error=str(exc))
        return 2
    recorder = EventRecorder(kube.fenced(fence), config.identity)  # only the leader reports
    # the repository's writes are made as the ServiceAccount the admin names: the API server's RBAC
    # is the boundary, even where our own checks would miss something
    # Flower-level health: the agent's own reads (the CA Secrets), off the event queue and the status loop
    probe = FlowerProbe(kube, enabled=config.flower_health == "on")
    agent = build_agent(kube.fenced(fence).impersonating(tenancy.impersonate), source, metrics, options, recorder,
                        notifier, probe=probe)
    recorder.start(agent.supervisor.spawn)
    # `kubectl get flowerunits` and reconcile requests by annotation: the agent's own writes, fenced
    flower_units = FlowerUnits(agent, kube.fenced(fence), namespaces=config.namespaces)
    if notifier is not None:
        metrics.registry.register(notifier)  # flower_syncer_notifications_total, ..._queue
        notifier.start(agent.supervisor.spawn)  # a worker per receiver, restarted should it crash
    host, port = config.listen_address()
    server = AgentServer(_Api(agent), metrics, host=host, port=port,
                         api_token=read_secret(config.api_token_file),
                         webhook_secret=read_secret(config.webhook_secret_file),
                         protect_reads=config.protect_reads, view=_View(agent, kube, config.namespaces))
    try:
        server.start()
    except OSError as exc:
        log.error("cannot listen for HTTP", listen=config.listen, error=exc.strerror,
                  hint="another process uses the port: choose another --listen")
        recorder.stop()
        probe.close()
        if notifier is not None:
            notifier.stop()
        return 3
    log.info("flower-syncer agent starting", version=__version__, source=source.describe(),
             listen=f"{server.address[0]}:{server.address[1]}", leader_election=config.leader_elect,
             web_view=f"http://{server.address[0]}:{server.address[1]}/ui/",
             namespaces=config.namespaces or "all")
    gc_pauses.install()
    agent.start()
    flower_units.start(stop)
    watcher = None
    local = source.local_paths()
    if local:
        watcher = LocalRepoWatcher(local, lambda: agent.request_fetch("watch"))
        watcher.start()

    elector = None
    elector_thread = None
    if config.leader_elect:
        elector = LeaderElector(kube, config.lease_namespace, config.lease_name, config.identity,
                                lease_duration=config.lease_duration, renew_period=config.lease_renew_period,
                                retry_period=config.lease_retry_period, safety_margin=config.lease_safety_margin,
                                fence=fence,
                                on_started_leading=lambda: _leading(agent, kube, True),
                                on_stopped_leading=lambda: _leading(agent, kube, False))
        agent.readiness.append(lambda: elector.problem if elector is not None else "")
        elector_thread = agent.supervisor.spawn("leader-election", functools.partial(elector.run, stop))
    else:
        _leading(agent, kube, True)

    status_cache = StatusCache(kube, namespaces=config.namespaces)
    status_cache.start(stop)
    # under the agent's supervisor: a loop that raises is restarted, and /healthz says so meanwhile
    agent.supervisor.spawn("status", functools.partial(_status_loop, agent, status_cache, metrics, stop))
    agent.supervisor.spawn("gc-pauses", functools.partial(_log_gc_pauses, gc_pauses, stop))
    # A Python signal handler runs on the main thread, once that thread is back in the
    # interpreter; the kernel may hand SIGTERM to any thread (cpython#85300). So the main thread
    # never waits unwoken: a handler whose signal another thread took runs within the interval.
    while not stop.wait(SIGNAL_CHECK_INTERVAL):
        pass

    if watcher is not None:
        watcher.stop()
    # calls to tenants' servers are cut now (each is bounded anyway): a worker inside one returns
    # at once, and a stopping agent never waits for a tenant
    TENANT_CALLS.abort()
    agent.shutdown()
    _label_own_pod(kube, leader=False)
    if elector is not None:
        elector.release()
    if elector_thread is not None:
        elector_thread.join(5)
    server.stop()
    probe.close()
    recorder.stop()
    if notifier is not None:
        notifier.stop()
    gc_pauses.uninstall()
    log.info("flower-syncer agent stopped")
    return 0


@dataclass(frozen=True)
class RepositoryTenancy:
    name: str  # the derived name (when flower-syncer.yaml sets none)
    tenancy: Tenancy
    impersonate: str | None
    verify: Verification | None = None  # the signatures the admin's policy requires (source.signatures)
    admit: Callable[[str], str] | None = None  # the remote ref fetched gets the same policy entry (SourceSpec)


def repository_tenancy(config: AgentConfig) -> RepositoryTenancy:
    """Who the agent's repository is (its derived name, with the ref when one is named; the name
    derived before refs were part of it, as a legacy name), and the admin's policy for it, from
    the agent's own settings only: `repo` (or `source_url`), `ref` and `path`, never what the
    repository's `.git/config` says. Logs once what applies. Raises SourceError, or ValueError for
    a bad policy file."""
    source, sub = source_location(config.source_url or config.repo, config.path, origin=False)
    ref = config.ref or ""
    who = repository_identity(source, sub, ref)
    origin = local_origin(config.repo) if config.source_url is None else ""
    if origin and origin != source:
        log.warning("the repository is known by its path, not by its origin remote", source=source, origin=origin,
                    hint=f"a local repository's .git/config never names it; if this agent ran before under the "
                         f"origin's identity, set source_url: {origin} to keep it (see docs/source-identity.md)")
    admin = load_policy(config.policy) if config.policy is not None else None
    policy = admin.for_source(source, ref, sub) if admin is not None else None
    if admin is not None and policy is not None and origin and origin != source:
        # an agent upgraded from when the origin named a local repository: the admin chose its entry by
        # that origin; never fall silently to the default entry (another ServiceAccount, no `verify`).
        # A path the admin lists keeps its own entry, whatever the work tree's origin says.
        was = admin.for_source(source_location(origin, config.path, origin=False)[0], ref, sub)
        if policy is admin.default and was is not policy:
            raise SourceError("invalid", f"the admin's policy gives this repository {admin.entry_name(policy)} by its "
                                         f"path {source} but {admin.entry_name(was)} by its origin {origin}; set "
                                         f"source_url: {origin} to keep the origin's entry, or source_url: {source} "
                                         "to take the path's (see docs/source-identity.md)")
    if policy is None:
        log.warning("no admin policy (--policy): single-tenant mode; the repository's own flower-syncer.yaml "
                    "guardrails are all that limits it, and writes use the agent's own rights",
                    hint="give the agent a policy file to confine the repository (see docs/policy.md)")
    else:
        rails = policy.guardrails
        namespaces = rails.allowedNamespaces if rails.allowedNamespaces is not None else "any but the cluster's own"
        log.info("admin policy applies", source=source, ref=ref, path=sub, namespaces=namespaces,
                 pod_features=list(rails.allowPodFeatures), names=policy.names,
                 service_account=policy.serviceAccount or "none (writes use the agent's own rights)")
    verify = None
    if policy is not None and policy.verify is not None:
        verify = Verification(policy.verify.mode, tuple(policy.verify.publicKeys))
        log.info("signed revisions only: a commit not signed as the admin's policy requires is not applied",
                 mode=verify.mode, keys=len(verify.keys))
    admit = functools.partial(_same_entry, admin, policy, source, sub, ref) if admin is not None else None
    return RepositoryTenancy(who.name, Tenancy(who.source, policy, who.legacy),
                             policy.impersonate if policy is not None else None, verify, admit)


def _same_entry(admin: AdminPolicy, entry: RepositoryPolicy | None, source: str, sub: str, ref: str,
                remote_ref: str) -> str:
    """Why the remote ref the agent's ref resolved to may not be synced: an entry of the admin's
    policy before the agent's own matches it (the remote's default branch is `main`, an entry
    says `ref: main`, and the agent was started without a ref, so it got a later entry), or ""."""
    entries = admin.repositories
    stop = next((i for i, e in enumerate(entries) if e is entry), len(entries))
    got = next((e for e in entries[:stop] if e.matches(source, remote_ref, sub)), None)
    wanted = f"--ref {ref}" if ref else "no --ref (the remote's default branch)"
    if got is None and entry is not None and not entry.matches(source, remote_ref, sub):
        return (f"the agent was started with {wanted}, which the admin's policy gives {admin.entry_name(entry)}; "
                f"the remote resolves it to {remote_ref}, which that entry does not match (a tag, not a branch, "
                f"or the other way round): start the agent with --ref {remote_ref}")
    if got is None:  # the first entry for either spelling is the agent's
        return ""
    return (f"the agent was started with {wanted}, which the admin's policy gives "
            f"{admin.entry_name(entry) if entry is not None else 'no entry'}; the remote resolves it to "
            f"{remote_ref}, which the policy gives {admin.entry_name(got)}: start the agent with --ref "
            f"{canonical_ref(remote_ref) or remote_ref}")


def _leading(agent: Agent, kube: Kube, leading: bool) -> None:
    log.info("leadership changed", leader=leading)
    agent.set_leading(leading)
    _label_own_pod(kube, leader=leading)


LABEL_LEADER = "flower-syncer.io/leader"


def _label_own_pod(kube: Kube, *, leader: bool) -> None:
    """In a pod (POD_NAME and POD_NAMESPACE from the downward API), mark it as the leader so the
    chart's API/webhook Service sends requests to the replica that writes."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return
    patch = {"metadata": {"labels": {LABEL_LEADER: "true" if leader else None}}}
    try:
        kube.request("PATCH", path_for("Pod", namespace, name), body=patch,
                     content_type="application/merge-patch+json", query={"fieldManager": "flower-syncer-leader"})
    except (ApiError, ClusterUnreachable) as exc:
        log.warning("cannot label this pod as the leader; webhooks may reach a standby", error=str(exc))


def _status_loop(agent: Agent, cache: StatusCache, metrics: Metrics, stop: threading.Event) -> None:
    """Pool readiness and GPU figures for the metrics, every few seconds, from the status cache's
    watches (no request); at its quiet moments, the heap is settled (agent.memory.Heap)."""
    heap = Heap()
    while not stop.wait(STATUS_INTERVAL if agent.loaded.is_set() else 1.0):
        if not agent.loaded.is_set() or not cache.synced.is_set():
            continue
        # status is best effort: a failed round is reported and the next one tries again
        agent.supervisor.guard("status collection", functools.partial(_status_round, agent, cache, metrics,
                                                                      heap=heap))


def _status_round(agent: Agent, cache: StatusCache, metrics: Metrics, *, heap: Heap | None = None) -> None:
    cpu = time.thread_time()
    units = sorted(set(agent.desired) | set(agent.cache.state.inventories))
    report = cache.report(targets_from(dict.fromkeys(units), agent.cache.state))
    metrics.observe_status(report.units, report.gpus)
    checks: list[HealthCheck] = []
    flower = 0.0
    if agent.flower is not None:  # SuperNodes connected, runs: from the last answers of the SuperLinks
        started = time.thread_time()
        metrics.observe_flower(agent.flower.round(agent.installed.plan.flower, report.units),
                               waiting=agent.flower.probe.waiting)
        flower = time.thread_time() - started
        checks.append(agent.flower.check)
        for unit in agent.holds.due(agent.installed.plan):  # held restarts whose runs ended (agent.holding)
            agent.work.add(unit)
    agent.book.observe_health(report.units, checks)  # the web view's pools and GPUs, then each unit's Healthy
    own = time.thread_time() - cpu - flower
    metrics.status_round_cpu.labels("round").inc(own)
    if agent.flower is not None:  # the Control API checks may cost what the round does (flower_probe)
        metrics.status_round_cpu.labels("flower").inc(agent.flower.finish_round(own=own, flower=flower))
    if heap is None:
        release_free_memory()  # what the last syncs freed
    else:  # before this round's drift check is posted: that is work in flight
        settled = heap.settle(agent.idle())  # trims too
        if settled is not None:
            log.info("heap settled: what the agent holds is frozen out of the garbage collector's walks",
                     full=settled.full, collected=settled.collected, frozen=settled.frozen,
                     ms=round(settled.seconds * 1000, 1))
    agent.request_drift_check()  # measured by a worker, like every sync


def _log_allocations() -> None:
    """On SIGUSR2: where the agent's memory is, into the log (agent.memory.allocation_report)."""
    rows = allocation_report()
    if rows is None:
        log.warning("no allocation report: Python is not tracing allocations", hint="start the agent with the "
                    "environment variable PYTHONTRACEMALLOC=1 (it costs memory and time), then send SIGUSR2 again")
        return
    log.info("where the agent's memory was allocated (the source lines that hold the most)", allocations=rows)


def _log_gc_pauses(pauses: GCPauses, stop: threading.Event) -> None:
    """Log each garbage collection that stopped the agent for `pauses.slow` seconds or more (the
    collector's callback itself must not log: it may run inside the logging machinery)."""
    while not stop.is_set():
        pause = pauses.next_slow(timeout=1.0)
        if pause is not None:
            log.info("garbage collection paused the agent", generation=pause.generation,
                     ms=round(pause.seconds * 1000, 1), collected=pause.collected)
