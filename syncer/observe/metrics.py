"""Prometheus metrics of the agent, in a registry of their own.

`Metrics` never touches prometheus_client's global registry, so tests and two agents in one
process do not clash. `Metrics.exposition()` is what `GET /metrics` serves.

Labels are bounded: ``unit`` is a unit id (``federation/<namespace>/<name>``,
``supernode/<namespace>/<release>``), ``kind`` a Kubernetes kind, ``pool`` a pool of a unit
(``superlink``, a SuperNode pool, a SuperNode release component), ``resource`` a GPU resource name
(``nvidia.com/gpu``), ``node`` a node name, ``result`` one of ``success|failed|skipped``,
``action`` one of the sync actions (``created|configured|unchanged|deleted|recreated|skipped|failed``),
``reason`` one of `FETCH_ERROR_REASONS`. A unit removed from Git loses all its series
(`Metrics.forget_unit`); pools, units and nodes that vanish from the status lose theirs on the
next `Metrics.observe_status`.

Every family, with its type, labels and help: docs/reference/metrics.md, generated from the code
(tools/gen_reference.py). A family is described once: a prometheus_client metric registered here
(few series, set as events happen), or a `syncer.observe.families` description whose rows come from
a snapshot of figures (the per-unit series of syncer.observe.unit_metrics, the status and
Flower-level families below, which `exposition` also writes as text straight from the rows).

Details: a sync is ``failed`` when it has errors or a failed object, ``skipped`` when the unit was
not synced on purpose (suspended, removed from Git but not pruned), else ``success``.
``drift_objects`` comes from a dry-run sync (`drift_by_kind`, the same count as the DRIFT column
of ``flower-syncer status``); ``drift_corrections_total`` counts objects a real sync configured or
recreated whose live copy had been changed outside Git (`Change.drift`), or created again after
someone deleted them (`corrections_by_kind`). ``revision_info`` has one
series only: setting a new revision removes the old one.

Flower-level health (syncer.observe.flower_health), per Federation whose SuperLink answered:
``federation_supernodes`` has ``state`` online|offline|registered|expected per ``pool`` (a pool of
the Federation, or the unit id of a SuperNode release that points at it; ``-`` counts online
SuperNodes of no pool), ``federation_runs`` has ``status``
pending|starting|running|completed|failed|stopped. A SuperLink that does not answer keeps no
series of these two (so no stale count) and ``federation_control_api_up`` 0; one the agent did not
ask (``--flower-health off``, a Service name an agent outside the cluster cannot resolve) has no
series at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from syncer import __version__
from syncer.engine.changeset import Action, UnitResult
from syncer.identity import ObjectRef
from syncer.observe.families import Family, FamilyCollector, GaugeFamily, GaugeRow
from syncer.observe.unit_metrics import UnitSeries

if TYPE_CHECKING:
    from syncer.identity import Unit
    from syncer.observe.flower_health import FlowerHealth, Series
    from syncer.observe.health import NodeGPU
    from syncer.observe.status import ClusterGPUs, UnitStatus

log = structlog.get_logger(__name__)

PREFIX = "flower_syncer_"
# The classic text format: every name here is a legacy (ASCII) name, so the output is 0.0.4 whatever
# prometheus_client's CONTENT_TYPE_LATEST says in a given version.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Why a fetch of the Git source failed: the kinds of syncer.source.refs.SourceError. Anything else
# is counted as "other".
FETCH_ERROR_REASONS = ("unreachable", "auth", "ref-not-found", "path-not-found", "corrupt", "invalid", "unverified",
                       "other")
COMMIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 180.0, 300.0)
# Actions that put back an object someone changed outside Git (when the change says `drift`).
CORRECTING = (Action.CONFIGURED, Action.RECREATED)


def result_of(unit: UnitResult) -> str:
    """success, failed or skipped (suspended, or removed from Git and not pruned)."""
    if unit.failed():
        return "failed"
    if unit.skipped is not None:
        return "skipped"
    return "success"


def corrections_by_kind(unit: UnitResult, known: Collection[ObjectRef] = ()) -> dict[str, int]:
    """From a real sync of one unit: the objects put back after a change outside Git, by kind (for
    `observe_drift_corrections`): configured or recreated objects whose change says `drift`, and
    created objects whose reference is in `known` (the unit's inventory before the sync: someone
    deleted them)."""
    counts: dict[str, int] = {}
    for c in unit.changes:
        if (c.drift and c.action in CORRECTING) or (c.action is Action.CREATED and c.ref in known):
            counts[c.ref.kind] = counts.get(c.ref.kind, 0) + 1
    return counts


def drift_by_kind(unit: UnitResult) -> dict[str, int]:
    """From a *dry-run* sync of one unit: the objects that differ from Git, by kind (for `set_drift`)."""
    counts: dict[str, int] = {}
    for c in unit.changes:
        if c.action.is_change:
            counts[c.ref.kind] = counts.get(c.ref.kind, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------
# Status figures: replaced as a whole, served from one snapshot (a scrape never sees half of it)


@dataclass(frozen=True)
class _Pool:
    desired: int
    ready: int
    healthy: bool
    gpus: tuple[tuple[str, int, int], ...]  # (resource, requested, allocated)
    problem: tuple[str, int] | None = None  # (reason, pods affected): why it is not ready


@dataclass(frozen=True)
class _Snapshot:
    units: Mapping[str, bool]  # unit -> ready
    pools: Mapping[tuple[str, str], _Pool]  # (unit, pool)
    nodes: Mapping[tuple[str, str], tuple[int, int]]  # (node, resource) -> (allocatable, used)


_EMPTY = _Snapshot({}, {}, {})


@dataclass(frozen=True)
class _Sorted:
    """A snapshot in the order its series are served (sorted once per scrape)."""

    units: list[tuple[str, bool]]
    pools: list[tuple[tuple[str, str], _Pool]]
    nodes: list[tuple[tuple[str, str], tuple[int, int]]]

    @staticmethod
    def of(snap: _Snapshot) -> _Sorted:
        return _Sorted(sorted(snap.units.items()), sorted(snap.pools.items()), sorted(snap.nodes.items()))


def _pool_rows(value_of: Callable[[_Pool], float]) -> Callable[[_Sorted], Iterator[GaugeRow]]:
    def rows(snap: _Sorted) -> Iterator[GaugeRow]:
        for (unit, pool), p in snap.pools:
            yield (unit, pool), value_of(p)
    return rows


def _gpu_rows(requested: bool) -> Callable[[_Sorted], Iterator[GaugeRow]]:
    def rows(snap: _Sorted) -> Iterator[GaugeRow]:
        for (unit, pool), p in snap.pools:
            for resource, req, alloc in p.gpus:
                yield (unit, pool, resource), req if requested else alloc
    return rows


def _node_rows(which: int) -> Callable[[_Sorted], Iterator[GaugeRow]]:
    def rows(snap: _Sorted) -> Iterator[GaugeRow]:
        for (node, resource), figures in snap.nodes:
            yield (node, resource), figures[which]
    return rows


def _problem_rows(snap: _Sorted) -> Iterator[GaugeRow]:
    for (unit, pool), p in snap.pools:
        if p.problem is not None:
            yield (unit, pool, p.problem[0]), p.problem[1]


_STATUS_FAMILIES: tuple[Family[_Sorted], ...] = (
    GaugeFamily(PREFIX + "pool_desired_replicas", "Pods the pool should have.", ("unit", "pool"),
                _pool_rows(lambda p: p.desired)),
    GaugeFamily(PREFIX + "pool_ready_replicas", "Ready pods of the pool.", ("unit", "pool"),
                _pool_rows(lambda p: p.ready)),
    GaugeFamily(PREFIX + "pool_ready", "1 when the pool reached its goal (rolled out, every desired pod updated and "
                "ready).", ("unit", "pool"), _pool_rows(lambda p: 1.0 if p.healthy else 0.0)),
    GaugeFamily(PREFIX + "unit_ready", "1 when the unit exists and every pool of it is ready.", ("unit",),
                lambda snap: (((unit,), 1.0 if ok else 0.0) for unit, ok in snap.units)),
    GaugeFamily(PREFIX + "pool_gpus_requested", "GPUs the pool asks for (one pod's request x the desired pods).",
                ("unit", "pool", "resource"), _gpu_rows(True)),
    GaugeFamily(PREFIX + "pool_gpus_allocated", "GPUs held by the pool's pods bound to a node.",
                ("unit", "pool", "resource"), _gpu_rows(False)),
    GaugeFamily(PREFIX + "pool_problem_pods", "Pods of the pool with its main problem, by reason (Unschedulable, "
                "ImagePullBackOff, CrashLoopBackOff, OOMKilled, ...); absent when the pool has none.",
                ("unit", "pool", "reason"), _problem_rows),
    GaugeFamily(PREFIX + "node_gpus_allocatable", "GPUs the node offers to pods.", ("node", "resource"),
                _node_rows(0)),
    GaugeFamily(PREFIX + "node_gpus_used", "GPUs requested by the pods bound to the node (any owner).",
                ("node", "resource"), _node_rows(1)),
)


class _StatusCollector(FamilyCollector[_Sorted]):
    """The status figures (pools, unit readiness, GPUs), replaced as a whole each status round."""

    def __init__(self) -> None:
        super().__init__(_STATUS_FAMILIES, lambda: _Sorted.of(self.snapshot))
        self.snapshot = _EMPTY  # replaced, never mutated: reading the attribute is atomic


# flower_syncer_federation_*: (supernodes: unit, pool, state, value), (runs: unit, status, value),
# (Control API up: unit, answered), and the checks left waiting
_FlowerSeries = tuple[tuple[tuple[str, str, str, int], ...], tuple[tuple[str, str, int], ...],
                      tuple[tuple[str, bool], ...]]
_FLOWER_FAMILIES: tuple[Family[tuple[_FlowerSeries, int]], ...] = (
    GaugeFamily(PREFIX + "federation_supernodes", "SuperNodes at the federation's SuperLink, by the pool or release "
                "Git expects them from, and state (online, offline, registered: never connected, expected: what Git "
                "asks for).", ("unit", "pool", "state"),
                lambda s: (((unit, pool, state), value) for unit, pool, state, value in s[0][0])),
    GaugeFamily(PREFIX + "federation_runs", "Runs the federation's SuperLink lists, by status.", ("unit", "status"),
                lambda s: (((unit, status), value) for unit, status, value in s[0][1])),
    GaugeFamily(PREFIX + "federation_control_api_up", "1 when the federation's SuperLink answered its Control API in "
                "the last check.", ("unit",), lambda s: (((unit,), 1.0 if ok else 0.0) for unit, ok in s[0][2])),
    GaugeFamily(PREFIX + "flower_checks_waiting", "SuperLinks due for a Control API check at the last status round "
                "and left for a later one: the checks' CPU budget (as much as the round itself costs) holds them "
                "back; their answers get older meanwhile.", (), lambda s: [((), s[1])]),
)


class _FlowerCollector(FamilyCollector[tuple[_FlowerSeries, int]]):
    """flower_syncer_federation_*: replaced as a whole each status round."""

    def __init__(self) -> None:
        super().__init__(_FLOWER_FAMILIES, lambda: (self.snapshot, self.waiting))
        self.snapshot: _FlowerSeries = ((), (), ())
        self.waiting = 0


# ---------------------------------------------------------------------------------------------


class Metrics:
    """The agent's metrics. Thread-safe; see the module docstring for the list."""

    def __init__(self, version: str = __version__) -> None:
        self.registry = _Registry()
        self._units = UnitSeries(PREFIX)  # every series with a unit label but the status figures
        self.registry.add_writer(self._units)
        self._lock = threading.Lock()
        self._revision: str | None = None
        r = self.registry

        self.commit_to_applied = Histogram(PREFIX + "commit_to_applied_seconds", "Seconds from a new revision "
                                           "reaching the agent to its objects applied.", buckets=COMMIT_BUCKETS,
                                           registry=r)
        self.revision_info = Gauge(PREFIX + "source_revision_info", "1 for the Git revision currently synced.",
                                   ["revision"], registry=r)
        self.fetch_errors = Counter(PREFIX + "source_fetch_errors_total", "Failed fetches of the Git source, "
                                    "by reason.", ["reason"], registry=r)
        self.last_fetch = Gauge(PREFIX + "source_last_fetch_timestamp_seconds", "Unix time of the last "
                                "successful fetch of the Git source (0: none yet).", registry=r)
        self.poll_interval = Gauge(PREFIX + "source_poll_interval_seconds", "Seconds between polls of the Git "
                                   "source (a fetch is due at least this often).", registry=r)
        self.queue_depth = Gauge(PREFIX + "queue_depth", "Sync requests waiting to be worked on.", registry=r)
        self.leader = Gauge(PREFIX + "leader", "1 while this agent holds the leader lease.", registry=r)
        self.fenced = Counter(PREFIX + "fenced_syncs_total", "Syncs stopped at a write because this agent no "
                              "longer held the leader lease (not failures of the unit).", registry=r)
        self.status_round_cpu = Counter(PREFIX + "status_round_cpu_seconds", "CPU the agent's status rounds "
                                        "spent (every 10 s): part=round, their own work (pools, health, metrics); "
                                        "part=flower, Flower-level health (its bookkeeping in the round and the "
                                        "Control API checks, which may cost what the round does).", ["part"],
                                        registry=r)
        for part in ("round", "flower"):
            self.status_round_cpu.labels(part)
        self.up = Gauge(PREFIX + "up", "Always 1 while the agent runs.", registry=r)
        self.build_info = Gauge(PREFIX + "build_info", "Always 1; the agent's version.", ["version"], registry=r)
        self._status = _StatusCollector()
        self.registry.add_writer(self._status)
        self._flower = _FlowerCollector()
        # per federation: the health its series were made from, and the series (None: not checked)
        self._flower_made: dict[Unit, tuple[object, Series | None]] = {}
        r.register(self._flower)

        self.up.set(1)
        self.build_info.labels(version).set(1)
        for reason in FETCH_ERROR_REASONS:
            self.fetch_errors.labels(reason)  # present at 0, so rate() sees the first error

    # -- syncs -----------------------------------------------------------------------------------

    def init_unit(self, unit: str, kinds: Iterable[str]) -> None:
        """Create a unit's counter and histogram series at 0 when the agent first loads it:
        `rate()` and `increase()` cannot count the event that creates a series, so its first sync,
        first applied object or first drift correction would otherwise go unseen."""
        self._units.init(unit, sorted(a.value for a in Action), sorted(set(kinds)))

    def observe_sync(self, report_unit: UnitResult, seconds: float) -> None:
        """One finished (not dry-run) sync of a unit that took `seconds`. Drift corrections are
        counted separately (`observe_drift_corrections`): only the caller knows whether a created
        object was one someone deleted."""
        actions: dict[str, int] = {}
        for c in report_unit.changes:
            actions[c.action.value] = actions.get(c.action.value, 0) + 1
        self._units.sync(report_unit.unit.id, result_of(report_unit), max(seconds, 0.0), time.time(), actions)

    def observe_drift_corrections(self, unit: str, counts_by_kind: Mapping[str, int]) -> None:
        """Objects of `unit` changed or deleted outside Git that a sync put back, by kind (see
        `corrections_by_kind`)."""
        self._units.corrected(unit, counts_by_kind)

    def observe_commit_applied(self, seconds: float) -> None:
        """A new revision's objects are applied, `seconds` after it reached the agent."""
        self.commit_to_applied.observe(max(seconds, 0.0))

    def observe_unit_commit_applied(self, unit: str, seconds: float) -> None:
        """The unit's part of a new revision is applied, `seconds` after the revision reached the agent."""
        self._units.set(unit, commit_to_applied=max(seconds, 0.0))

    def set_drift(self, unit: str, counts_by_kind: Mapping[str, int]) -> None:
        """The objects of `unit` that differ from Git now, by kind (see `drift_by_kind`). Kinds that
        drifted before and are absent now are set to 0."""
        self._units.set_drift(unit, counts_by_kind)

    def set_config_errors(self, unit: str, n: int) -> None:
        self._units.set(unit, config_errors=n)

    def set_supernode_keys(self, unit: str, admitted: int, failing: int) -> None:
        self._units.set(unit, keys=(admitted, failing))

    def set_suspended(self, unit: str, suspended: bool) -> None:
        self._units.set(unit, suspended=suspended)

    def set_unit_state(self, unit: str, synced: str, health: str) -> None:
        """The unit's conditions' reasons (flower_syncer_unit_state): the one series replaces the last."""
        self._units.set(unit, state=(synced, health))

    def set_queue_depth(self, n: int) -> None:
        self.queue_depth.set(n)

    # -- source ----------------------------------------------------------------------------------

    def set_revision(self, rev: str) -> None:
        """The revision now synced; the previous revision's series goes away."""
        with self._lock:
            previous, self._revision = self._revision, rev
            if previous is not None and previous != rev:
                _remove(self.revision_info, previous)
            self.revision_info.labels(rev).set(1)

    def fetch_error(self, reason: str) -> None:
        """A failed fetch. `reason` outside FETCH_ERROR_REASONS is counted as "other"."""
        if reason not in FETCH_ERROR_REASONS:
            log.debug("metrics.unknown_fetch_error_reason", reason=reason)
            reason = "other"
        self.fetch_errors.labels(reason).inc()

    def fetch_ok(self) -> None:
        self.last_fetch.set(time.time())

    def set_poll_interval(self, seconds: float) -> None:
        self.poll_interval.set(seconds)

    # -- status ----------------------------------------------------------------------------------

    def observe_status(self, statuses: Sequence[UnitStatus],
                       node_gpus: ClusterGPUs | Iterable[NodeGPU] | None = None) -> None:
        """Replace every pool, unit-readiness and GPU series with these figures: units and pools not
        in `statuses` lose their series. `node_gpus` (the `ClusterGPUs` of a status report, or its
        `nodes`) replaces the node series; None leaves them as they are (not collected this time).
        Two pools of one unit with the same pool name are added up."""
        units: dict[str, bool] = {}
        pools: dict[tuple[str, str], _Pool] = {}
        for u in statuses:
            units[u.unit] = bool(u.ready)
            for p in u.pools:
                key = (u.unit, p.pool)
                gpus = {res: (c.requested, c.allocated) for res, c in p.gpus.items()}
                old = pools.get(key)
                if old is not None:
                    for res, req, alloc in old.gpus:
                        r0, a0 = gpus.get(res, (0, 0))
                        gpus[res] = (r0 + req, a0 + alloc)
                problem = (p.problem.reason, p.problem.pods) if p.problem is not None else None
                pools[key] = _Pool(
                    desired=p.desired + (old.desired if old else 0),
                    ready=p.ready + (old.ready if old else 0),
                    healthy=p.healthy and (old.healthy if old else True),
                    gpus=tuple((res, req, alloc) for res, (req, alloc) in sorted(gpus.items())),
                    problem=(old.problem if old and old.problem else problem))
        with self._lock:
            nodes = self._status.snapshot.nodes
            if node_gpus is not None:
                from syncer.observe.status import ClusterGPUs

                entries = node_gpus.nodes if isinstance(node_gpus, ClusterGPUs) else node_gpus
                nodes = {(n.node, n.resource): (n.allocatable, n.used) for n in entries}
            self._status.snapshot = _Snapshot(units, pools, nodes)

    def observe_flower(self, healths: Mapping[Unit, FlowerHealth], *, waiting: int = 0) -> None:
        """Replace every federation_* series with these federations' Flower-level health (one that
        was not checked, e.g. --flower-health off, has none); `waiting`: checks held back."""
        from syncer.observe.flower_health import UNCHECKED, metric_series

        self._flower.waiting = waiting
        made = self._flower_made
        if len(made) == len(healths) and all((m := made.get(u)) is not None and m[0] is h for u, h in healths.items()):
            return  # the very healths of the last round: nothing was heard since, the series stand
        nodes: list[tuple[str, str, str, int]] = []
        runs: list[tuple[str, str, int]] = []
        up: list[tuple[str, bool]] = []
        self._flower_made = {}
        for unit, health in sorted(healths.items(), key=lambda kv: kv[0].id):
            if health.code in UNCHECKED:
                # not asked: off, not yet, or a Service name an agent outside the cluster cannot resolve
                self._flower_made[unit] = (health, None)
                continue
            cached = made.get(unit)
            # a health the last round had (the very object: nothing new was heard) has the same series
            n, r = cached[1] if cached is not None and cached[0] is health and cached[1] is not None \
                else metric_series(unit.id, health)
            self._flower_made[unit] = (health, (n, r))
            nodes.extend(n)
            runs.extend(r)
            up.append((unit.id, health.reachable))
        self._flower.snapshot = (tuple(nodes), tuple(runs), tuple(up))

    # -- agent -----------------------------------------------------------------------------------

    def set_leader(self, leader: bool) -> None:
        self.leader.set(1 if leader else 0)

    def observe_fenced(self, _unit: str) -> None:
        """A sync of `_unit` stopped at a write refused by the lease fence."""
        self.fenced.inc()

    def forget_unit(self, unit: str) -> None:
        """Drop every series of a unit (it left Git)."""
        self._units.forget(unit)
        nodes, runs, up = self._flower.snapshot
        self._flower_made = {}  # the next round makes its series again
        self._flower.snapshot = (tuple(s for s in nodes if s[0] != unit), tuple(s for s in runs if s[0] != unit),
                                 tuple(s for s in up if s[0] != unit))
        with self._lock:
            snap = self._status.snapshot
            if unit in snap.units or any(u == unit for u, _ in snap.pools):
                self._status.snapshot = _Snapshot(
                    {u: r for u, r in snap.units.items() if u != unit},
                    {k: p for k, p in snap.pools.items() if k[0] != unit}, snap.nodes)

    def exposition(self) -> bytearray:
        """Everything, in the Prometheus text format (`CONTENT_TYPE`), in the order `generate_latest`
        of the registry gives. Families described in syncer.observe.families (the per-unit, status
        and Flower-level ones: nearly every series at thousands of units) are written straight
        from their rows; the other families one at a time, each freed before the next is made."""
        out = bytearray()
        for collector in self.registry.in_order():
            if isinstance(collector, FamilyCollector):
                collector.write_text(out)
                continue
            for family in collector.collect():
                out += generate_latest(_OneFamily(family))
                del family  # before the next is made
        return out


class _Registry(CollectorRegistry):
    """The agent's metrics: the collectors registered, in order, then the writers (the per-unit and
    status series), which `collect` gives last."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: list[FamilyCollector[Any]] = []
        self._registered: list[Collector] = []  # in the order `CollectorRegistry.collect` goes
        self._order = threading.Lock()

    def register(self, collector: Collector) -> None:
        super().register(collector)
        with self._order:
            self._registered.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        with self._order:
            self._registered.remove(collector)

    def add_writer(self, collector: FamilyCollector[Any]) -> None:
        self.writers.append(collector)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        for writer in self.writers:
            yield from writer.collect()

    def in_order(self) -> list[Collector]:
        """Every collector, in the order `collect` reads them."""
        with self._order:
            return [*self._registered, *self.writers]


class _OneFamily(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def _remove(metric: Counter | Gauge | Histogram, *labels: str) -> None:
    with suppress(KeyError):  # older prometheus_client raises for a label set it does not have
        metric.remove(*labels)
