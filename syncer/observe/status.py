"""Live status of units: pools, readiness, pod problems and GPUs, read with a few LIST requests.

For each namespace that holds a unit: one LIST per workload kind the units there use, one LIST of
pods (all by the managed-by label, never a GET per object), plus one LIST of inventory ConfigMaps
for the last applied revisions; for the cluster GPU table, the nodes once and the bound pods of
the whole cluster once.

The assembly from live objects (`assemble`, `unit_status`) is pure: the agent feeds it from the
watches of `syncer.observe.status_cache` instead of LISTs, and `syncer.observe.wait` polls it for
`flower-syncer sync --wait`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from syncer.cluster.client import ApiError, Kube
from syncer.engine.checked_revision import Checked
from syncer.engine.inventory import Condition, Inventory
from syncer.engine.live import LiveState
from syncer.identity import (
    INVENTORY_SELECTOR,
    LABEL_COMPONENT,
    LABEL_POOL,
    LABEL_UNIT,
    LABEL_UNIT_KIND,
    MANAGED_SELECTOR,
    WORKLOAD_KINDS,
    Manifest,
    Unit,
    unit_matches,
)
from syncer.observe.conditions import UnitConditions, healthy_condition, synced_from_record
from syncer.observe.flower_health import connected_cell, recorded_flower_check
from syncer.observe.health import (
    GPUCount,
    NodeGPU,
    ProblemSummary,
    is_terminating,
    node_gpus,
    pool_gpus,
    selector_matches,
    summarize_problems,
    workload_health,
)
from syncer.observe.slim_objects import slim_node, slim_pod, slim_workload
from syncer.shared_strings import share_strings

if TYPE_CHECKING:
    from syncer.engine.sync import SyncReport

UNIT_WORKLOAD_KINDS: dict[str, tuple[str, ...]] = {
    "federation": ("StatefulSet", "DaemonSet"),
    "supernode": ("Deployment",),
}
# Pods that hold node resources: bound to a node and not finished.
BOUND_PODS_FIELDS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
LIST_PAGE = 500  # whole objects held at once while a listing is slimmed
SUPERLINK_POOL = "superlink"

WorkloadKey = tuple[str, str]  # (kind, name)


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class PoolStatus:
    """One workload of a unit: the SuperLink, a SuperNode pool, or a SuperNode release component.
    `ready` is the number of ready pods; `healthy` says whether the workload reached its goal."""

    pool: str
    kind: str
    name: str
    desired: int
    ready: int
    updated: int = 0
    rolling_out: bool = False
    healthy: bool = False
    reason: str = ""  # why it is not healthy (from the workload's status), if it is not
    gpus: dict[str, GPUCount] = field(default_factory=dict)
    problem: ProblemSummary | None = None  # what is visibly wrong with its pods
    found: bool = True  # the workload exists in the cluster
    terminating: int = 0  # pods of the pool being deleted
    stalled: bool = False  # the controller gave up on the rollout

    @property
    def summary(self) -> str:
        """The one line to show: the pod problem, else the workload's reason, else ''."""
        if self.problem is not None:
            return str(self.problem)
        return self.reason

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pool": self.pool, "kind": self.kind, "name": self.name, "desired": self.desired,
            "ready": self.ready, "updated": self.updated, "rollingOut": self.rolling_out,
            "healthy": self.healthy, "found": self.found,
            "gpus": {name: c.to_dict() for name, c in self.gpus.items()},
        }
        if self.reason:
            out["reason"] = self.reason
        if self.problem is not None:
            out["problem"] = self.problem.to_dict()
        if self.stalled:
            out["stalled"] = True
        return out


@dataclass
class UnitStatus:
    unit: str  # Unit.id: kind/namespace/name
    revision: str = ""  # last applied revision, from the unit's inventory
    checked: str = ""  # the newest revision a sync went over it at (see syncer.engine.checked_revision)
    checked_at: str = ""
    pools: list[PoolStatus] = field(default_factory=list)
    drift: int | None = None  # objects that differ from the repository; None when not computed
    found: bool = True  # False: no inventory and no workload of the unit in the cluster
    errors: list[str] = field(default_factory=list)
    suspended: bool = False  # by `flower-syncer suspend` (its inventory says so)
    condition: Condition | None = None  # the outcome of its last sync, from its inventory
    flower: dict[str, Any] | None = None  # a federation's Flower-level health, as the agent recorded it

    @property
    def ready(self) -> bool:
        """Found and every pool at its goal: the pods' side alone (what `sync --wait` waits for).
        The unit's whole answer is `state.ready`: Synced and Healthy."""
        return self.found and all(p.healthy for p in self.pools)

    @property
    def state(self) -> UnitConditions:
        """Its Synced condition (as its inventory records its last sync) and Healthy condition (from
        its pools): see syncer.observe.conditions."""
        healthy = healthy_condition(self.pools, found=self.found, checks=(recorded_flower_check,), subject=self)
        return UnitConditions(synced_from_record(self.condition, suspended=self.suspended), healthy,
                              self.checked or self.revision)

    @property
    def connected(self) -> str:
        """The CONNECTED cell: SuperNodes online of those Git expects (`-` when not a federation or
        not checked)."""
        return connected_cell(self.flower)

    @property
    def gpus(self) -> dict[str, GPUCount]:
        total: dict[str, GPUCount] = {}
        for p in self.pools:
            for name, c in p.gpus.items():
                t = total.setdefault(name, GPUCount())
                t.requested += c.requested
                t.allocated += c.allocated
        return dict(sorted(total.items()))

    def to_dict(self) -> dict[str, Any]:
        kind, namespace, name = self.unit.split("/", 2)
        state = self.state
        out: dict[str, Any] = {
            "unit": self.unit, "kind": kind, "namespace": namespace, "name": name, "ready": state.ready,
            "synced": str(state.synced.reason), "health": str(state.healthy.reason),
            "found": self.found, "revision": self.revision, "checkedRevision": self.checked or self.revision,
            "checkedAt": self.checked_at, "drift": self.drift,
            "gpus": {n: c.to_dict() for n, c in self.gpus.items()},
            "pools": [p.to_dict() for p in self.pools],
        }
        if self.errors:
            out["errors"] = self.errors
        out["suspended"] = self.suspended
        out["conditions"] = [state.synced.to_dict(), state.healthy.to_dict()]
        if self.condition is not None:  # as its inventory records it, with when it last changed
            out["inventoryCondition"] = self.condition.to_dict()
        if kind == "federation":
            out["flower"] = {k: v for k, v in self.flower.items() if k != "condition"} if self.flower else None
        return out



@dataclass
class ClusterGPUs:
    nodes: list[NodeGPU] = field(default_factory=list)
    error: str = ""  # why the figures are missing (e.g. no permission to list nodes)

    def totals(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for n in self.nodes:
            t = out.setdefault(n.resource, {"allocatable": 0, "used": 0, "free": 0})
            t["allocatable"] += n.allocatable
            t["used"] += n.used
            t["free"] += n.free
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodes": [n.to_dict() for n in self.nodes], "totals": self.totals()}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class StatusReport:
    units: list[UnitStatus] = field(default_factory=list)
    gpus: ClusterGPUs | None = None

    @property
    def ready(self) -> bool:
        """Every unit's pods ready (what `sync --wait` waits for); see `settled`."""
        return all(u.ready for u in self.units)

    @property
    def settled(self) -> bool:
        """Every unit Synced and Healthy: the `ready` of the JSON and what `status`'s exit code says."""
        return all(u.state.ready for u in self.units)

    @property
    def drifted(self) -> bool:
        return any(u.drift for u in self.units)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ready": self.settled, "drifted": self.drifted,
                               "units": [u.to_dict() for u in self.units]}
        if self.gpus is not None:
            out["gpus"] = self.gpus.to_dict()
        return out


# ---------------------------------------------------------------------------------------------
# What to look at


@dataclass
class Target:
    """A unit to report on. `workloads` are the workloads it should have (rendered manifests, or
    None for ones only known from the inventory); None = whatever the cluster has for the unit."""

    unit: Unit
    workloads: dict[WorkloadKey, Manifest | None] | None = None
    revision: str = ""
    has_inventory: bool = False
    suspended: bool = False
    condition: Condition | None = None
    checked: Checked | None = None  # the revision its repository was last checked at, in its namespace


UnitsArg = Iterable[Unit] | Mapping[Unit, Sequence[Manifest] | None] | None


def discover_units(kube: Kube, namespaces: Iterable[str] | None = None) -> dict[Unit, Inventory]:
    """Units that have an inventory in the cluster (cluster-wide, or in the given namespaces)."""
    return _read_inventories(kube, namespaces).inventories


def _read_inventories(kube: Kube, namespaces: Iterable[str] | None = None) -> LiveState:
    """The inventories and the checked records (cluster-wide, or in the given namespaces)."""
    scopes: list[str | None] = [*sorted(set(namespaces))] if namespaces is not None else [None]
    found = LiveState()
    for ns in scopes:
        for cm in kube.list("ConfigMap", ns, labels=INVENTORY_SELECTOR)[0]:
            found.note(cm)
    return found


NEVER_APPLIED = ("ConfigError", "Decryption")  # Synced reasons of a unit that may never have loaded


def unloaded_units(kube: Kube, namespaces: Iterable[str] | None = None) -> dict[Unit, Condition]:
    """Units in Git that the agent could not load and that have no inventory yet (a new unit whose
    file does not parse, or cannot be decrypted): the leader writes their Synced condition on their
    FlowerUnit (syncer/agent/flowerunits.py), as for every unit. {} when FlowerUnits cannot be read
    (the CRD not installed, no right to list them): `status` then shows the units it can."""
    scopes: list[str | None] = [*sorted(set(namespaces))] if namespaces is not None else [None]
    found: dict[Unit, Condition] = {}
    for ns in scopes:
        try:
            items, _ = kube.list("FlowerUnit", ns)
        except ApiError:
            return {}
        for obj in items:
            meta = obj.get("metadata") or {}
            unit = Unit.from_labels(meta.get("namespace", ""), meta.get("labels"))
            if unit is None or meta.get("name") != f"{unit.kind}.{unit.name}":  # only the unit's own
                continue
            status_ = obj.get("status") or {}
            synced = next((c for c in status_.get("conditions") or [] if c.get("type") == "Synced"), None)
            if synced and synced.get("status") == "False" and synced.get("reason") in NEVER_APPLIED:
                found[unit] = Condition(False, str(synced["reason"]), str(synced.get("message", "")),
                                        str(synced.get("lastTransitionTime", "")))
    return found


def resolve_targets(kube: Kube, units: UnitsArg = None, selectors: Sequence[str] = ()) -> list[Target]:
    """Targets for units: a list of Units (expected workloads from their inventories), a mapping
    of Unit to rendered manifests (None: from the inventory), or None for every unit with an
    inventory in the cluster; only those matching a selector (NAME, KIND/NAME, KIND/NAMESPACE/NAME)
    when selectors are given. Reads the inventories: one LIST per namespace, or one in all."""
    given: dict[Unit, Sequence[Manifest] | None]
    if units is None:
        known = _read_inventories(kube)
        given = dict.fromkeys(known.inventories)
    else:
        given = dict(units) if isinstance(units, Mapping) else dict.fromkeys(units)
    if selectors:
        given = {u: m for u, m in given.items() if any(unit_matches(u, s) for s in selectors)}
    if units is not None:
        known = _read_inventories(kube, {u.namespace for u in given}) if given else LiveState()
    return targets_from(given, known)


def targets_from(given: Mapping[Unit, Sequence[Manifest] | None], known: LiveState) -> list[Target]:
    """Targets for units, given as a mapping of Unit to rendered manifests (None: the workloads
    its inventory lists), with what `known` holds of inventories and checked records (pure)."""
    targets = []
    for unit in sorted(given):
        inv = known.inventories.get(unit)
        manifests = given[unit]
        workloads: dict[WorkloadKey, Manifest | None] | None = None
        if manifests is not None:
            workloads = {(m["kind"], m["metadata"]["name"]): m for m in manifests
                         if m["kind"] in WORKLOAD_KINDS}
        elif inv is not None:
            workloads = {(r.kind, r.name): None for r in sorted(inv.entries) if r.kind in WORKLOAD_KINDS}
        targets.append(Target(unit, workloads, inv.revision if inv else "", inv is not None,
                              inv.suspended if inv else False, inv.condition if inv else None,
                              known.checked.get((unit.namespace, inv.repository)) if inv else None))
    return targets


# ---------------------------------------------------------------------------------------------
# Collection


def status(kube: Kube, units: UnitsArg = None, *, selectors: Sequence[str] = (), nodes: bool = True,
           drift: Mapping[str, int] | None = None,
           errors: Mapping[str, Sequence[str]] | None = None) -> StatusReport:
    """The status of units (see `resolve_targets`), with the cluster's GPU table when `nodes`, and
    per unit id the drift counts and errors of a dry-run sync when given (see `drift_counts`)."""
    report = collect_status(kube, resolve_targets(kube, units, selectors), nodes=nodes)
    attach_flower(kube, report)
    for u in report.units:
        if drift is not None:
            u.drift = drift.get(u.unit, 0)
        u.errors.extend((errors or {}).get(u.unit, ()))
    return report


def attach_flower(kube: Kube, report: StatusReport) -> None:
    """Each federation's Flower-level health as the agent recorded it on its FlowerUnit
    (`status.flower`): one LIST per namespace with federations. Without the CRD, or without the
    right to read FlowerUnits, the federations' CONNECTED stays `-`."""
    recorded = recorded_flower(kube, {u.unit.split("/")[1] for u in report.units if u.unit.startswith("federation/")})
    for u in report.units:
        u.flower = recorded.get(u.unit, u.flower)


def recorded_flower(kube: Kube, namespaces: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Federation unit id -> its Flower-level health as the agent recorded it on its FlowerUnit
    (one LIST per namespace); {} without the CRD or the right to read FlowerUnits."""
    recorded: dict[str, dict[str, Any]] = {}
    for ns in sorted(set(namespaces)):
        try:
            items, _ = kube.list("FlowerUnit", ns)
        except ApiError:
            return {}  # not installed (404), or not ours to read (403): nothing to show
        for obj in items:
            name = str((obj.get("metadata") or {}).get("name") or "")
            flower = (obj.get("status") or {}).get("flower")
            if name.startswith("federation.") and isinstance(flower, dict):
                recorded[f"federation/{ns}/{name.removeprefix('federation.')}"] = flower
    return recorded


def collect_status(kube: Kube, targets: Sequence[Target], *, nodes: bool = True) -> StatusReport:
    """The status of targets from LISTs: per namespace, its workloads (by kind) and pods."""
    by_ns: dict[str, list[Target]] = {}
    for t in targets:
        by_ns.setdefault(t.unit.namespace, []).append(t)
    workloads_of: dict[Unit | None, list[dict[str, Any]]] = {}
    pods_of: dict[Unit | None, list[dict[str, Any]]] = {}
    for ns, ns_targets in sorted(by_ns.items()):
        kinds = sorted({k for t in ns_targets for k in UNIT_WORKLOAD_KINDS[t.unit.kind]}
                       | {k for t in ns_targets for k, _ in (t.workloads or {})})
        for kind in kinds:
            items, _ = kube.list(kind, ns, labels=MANAGED_SELECTOR, each=_held(slim_workload), page_size=LIST_PAGE)
            for obj in items:
                workloads_of.setdefault(labelled_unit(obj, ns), []).append(obj)
        pods, _ = kube.list("Pod", ns, labels=MANAGED_SELECTOR, each=_held(slim_pod), page_size=LIST_PAGE)
        for pod in pods:
            pods_of.setdefault(labelled_unit(pod, ns), []).append(pod)
    report = assemble(targets, lambda u: workloads_of.get(u, ()), lambda u: pods_of.get(u, ()))
    if nodes:
        report.gpus = cluster_gpus(kube)
    return report


UnitObjects = Callable[[Unit], Sequence[Mapping[str, Any]]]


PoolsOf = Callable[[Target], tuple[list[PoolStatus], bool]]
"""A target's pools and whether the unit was found (`unit_pools` of its live objects)."""


def _held(slim: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`slim`, with the short strings of its result shared: a listing holds its 12,000 slim pods as
    dicts until the report is assembled (the agent's status cache keeps them compressed instead)."""
    return lambda obj: share_strings(slim(obj))


def assemble(targets: Sequence[Target], workloads_of: UnitObjects, pods_of: UnitObjects, *,
             pools_of: PoolsOf | None = None) -> StatusReport:
    """The status report of targets from the live workloads and pods labelled with each unit
    (pure; the GPU table is left to the caller). `pools_of`, if given, answers for `unit_pools`
    of each target's objects (a cache of them: syncer.observe.status_cache)."""
    report = StatusReport()
    for t in targets:
        result = _unit_result(t)
        result.pools, result.found = (pools_of(t) if pools_of is not None
                                      else unit_pools(t, workloads_of(t.unit), pods_of(t.unit)))
        _note_checked(result, t)
        report.units.append(result)
    return report


def labelled_unit(obj: Mapping[str, Any], namespace: str | None = None) -> Unit | None:
    """The unit a live object's labels name, in its namespace (or `namespace`), if any."""
    meta = obj.get("metadata") or {}
    return Unit.from_labels(namespace or str(meta.get("namespace") or ""), meta.get("labels"))


def _note_checked(result: UnitStatus, target: Target) -> None:
    """The newest revision a sync went over the unit at: its repository's record, unless the unit is
    suspended (then nothing looks at it) or its own inventory knows a newer observation."""
    result.checked = target.condition.revision if target.condition and target.condition.revision else ""
    result.checked_at = target.condition.since if result.checked and target.condition else ""
    record = target.checked
    if record is not None and not target.suspended and record.at >= result.checked_at:
        result.checked, result.checked_at = record.revision, record.at


def cluster_gpus(kube: Kube) -> ClusterGPUs:
    """GPUs of every node: allocatable and used by the pods bound there (all namespaces)."""
    try:
        node_items, _ = kube.list("Node", each=slim_node, page_size=LIST_PAGE)
        bound, _ = kube.list("Pod", None, fields=BOUND_PODS_FIELDS, each=slim_pod, page_size=LIST_PAGE)
    except ApiError as exc:
        if exc.forbidden:
            return ClusterGPUs(error=f"cannot read nodes and pods cluster-wide: {exc.message}")
        raise
    return ClusterGPUs(node_gpus(node_items, bound))


def _belongs(obj: Mapping[str, Any], unit: Unit) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_UNIT) == unit.name and labels.get(LABEL_UNIT_KIND) == unit.kind


def pool_name(unit_kind: str, workload: Mapping[str, Any]) -> str:
    """The pool a workload stands for: a federation's `superlink` or `<pool>`, or a SuperNode
    release's component (`supernode`, `superexec-clientapp`); else the workload's name."""
    meta = workload.get("metadata") or {}
    labels = meta.get("labels") or {}
    if unit_kind == "federation":
        if labels.get(LABEL_COMPONENT) == SUPERLINK_POOL:
            return SUPERLINK_POOL
        if labels.get(LABEL_POOL):
            return str(labels[LABEL_POOL])
    elif labels.get(LABEL_COMPONENT):
        return str(labels[LABEL_COMPONENT])
    return str(meta.get("name", ""))


def unit_status(target: Target, workloads: Sequence[Mapping[str, Any]],
                pods: Sequence[Mapping[str, Any]]) -> UnitStatus:
    """A unit's status from the workloads and pods of its namespace (pure)."""
    result = _unit_result(target)
    result.pools, result.found = unit_pools(target, workloads, pods)
    return result


def _unit_result(target: Target) -> UnitStatus:
    return UnitStatus(target.unit.id, revision=target.revision, suspended=target.suspended,
                      condition=target.condition)


def unit_pools(target: Target, workloads: Sequence[Mapping[str, Any]],
               pods: Sequence[Mapping[str, Any]]) -> tuple[list[PoolStatus], bool]:
    """A unit's pools from the workloads and pods of its namespace, and whether the unit was found
    (pure: it reads of the target only its unit, `workloads` and `has_inventory`)."""
    unit = target.unit
    live = {(w["kind"], w["metadata"]["name"]): w for w in workloads
            if _belongs(w, unit) and not is_terminating(w)}
    unit_pods = [p for p in pods if _belongs(p, unit)]
    pools: list[PoolStatus] = []
    found = True
    if target.workloads is None:
        for key in sorted(live):
            pools.append(_live_pool(unit, live[key], unit_pods))
        found = target.has_inventory or bool(live)
    else:
        for key, manifest in target.workloads.items():
            if key in live:
                pools.append(_live_pool(unit, live[key], unit_pods))
            else:
                pools.append(_missing_pool(unit, key, manifest))
    pools.sort(key=lambda p: (p.pool != SUPERLINK_POOL, p.pool, p.name))
    return pools, found


def _live_pool(unit: Unit, obj: Mapping[str, Any], unit_pods: Sequence[Mapping[str, Any]]) -> PoolStatus:
    health = workload_health(obj)
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    pods = [p for p in unit_pods if selector_matches(selector, (p.get("metadata") or {}).get("labels"))]
    template = (spec.get("template") or {}).get("spec") or {}
    return PoolStatus(
        pool=pool_name(unit.kind, obj), kind=health.kind, name=obj["metadata"]["name"],
        desired=health.desired, ready=health.ready, updated=health.updated, rolling_out=health.rolling_out,
        healthy=health.healthy, reason=health.reason, gpus=pool_gpus(template, health.desired, pods),
        problem=summarize_problems(pods), terminating=sum(1 for p in pods if is_terminating(p)),
        stalled=health.stalled)


def _missing_pool(unit: Unit, key: WorkloadKey, manifest: Manifest | None) -> PoolStatus:
    kind, name = key
    if manifest is None:
        return PoolStatus(name, kind, name, 0, 0, found=False, reason="missing from the cluster")
    spec = manifest.get("spec") or {}
    desired = 0 if kind == "DaemonSet" else int(spec.get("replicas", 1))
    template = (spec.get("template") or {}).get("spec") or {}
    return PoolStatus(pool_name(unit.kind, manifest), kind, name, desired, 0, found=False,
                      reason="not in the cluster (not synced yet?)", gpus=pool_gpus(template, desired, []))


def unit_from_id(unit_id: str) -> Unit:
    """The Unit of an id `kind/namespace/name`. Raises ValueError."""
    return Unit.parse(unit_id)


def drift_counts(report: SyncReport) -> tuple[dict[str, int], dict[str, list[str]]]:
    """From a dry-run sync: per unit id, the number of objects that would change, and the errors."""
    counts: dict[str, int] = {}
    errors: dict[str, list[str]] = {}
    for u in report.units:
        counts[u.unit.id] = sum(1 for c in u.changes if c.action.is_change)
        if u.errors:
            errors[u.unit.id] = list(u.errors)
    return counts, errors
