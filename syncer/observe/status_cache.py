"""The live objects the agent's status figures read, kept current by watches instead of re-listed.

`flower-syncer status` lists what it reports on (see `syncer.observe.status`); an agent reporting
every few seconds on thousands of units cannot: re-listing all their pods every round competes with
the syncs for the API server and the agent's cores. `StatusCache` lists once and then follows:

- the workloads (StatefulSets, DaemonSets, Deployments) and pods labelled managed-by
  flower-syncer, cluster-wide or in the agent's namespaces, slimmed to what health reads and
  grouped by the unit their labels name;
- for the cluster GPU table, the nodes (name and GPUs offered) and, cluster-wide, the pods bound
  to a node and not finished, kept only as the GPUs each holds where (most pods hold none).

Without permission to read nodes and pods cluster-wide, the GPU table says so (as the CLI's does)
and the pool figures still work. `report(targets)` assembles a `StatusReport` from memory: no
request.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from syncer.cluster.client import ApiError, Kube
from syncer.cluster.reflector import Reflector
from syncer.engine.live import UnitIndex
from syncer.identity import MANAGED_SELECTOR, WORKLOAD_KINDS, Unit
from syncer.observe.health import gpu_table, node_allocatable_gpus, pod_gpu_usage
from syncer.observe.slim_objects import slim_pod, slim_workload
from syncer.observe.status import (
    BOUND_PODS_FIELDS,
    LIST_PAGE,
    ClusterGPUs,
    PoolStatus,
    StatusReport,
    Target,
    assemble,
    labelled_unit,
    unit_pools,
)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace, name
_PoolsKey = tuple[int, int, Any, bool]


def _workloads_key(target: Target) -> Any:
    """What `unit_pools` reads of a target's workloads, comparable with ==: the keys in order,
    each with its manifest (compared by identity first, then by value)."""
    return None if target.workloads is None else tuple(target.workloads.items())


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


class _ByUnit:
    """Objects by key, grouped by the unit their labels name (objects naming none are not kept).

    Each is kept as its JSON, compressed (zlib's fastest level), and parsed again when its unit's
    pools are worked out, which the report does only for units whose objects changed: less than
    half what they take as dicts (bench/status_report.py's objects). (Not orjson's bytes as they
    come: each would keep the whole buffer it was written into, several times the dicts.)

    `version(unit)` changes whenever an object of the unit is put or removed, and is 0 while the
    unit has none (so far, or again): equal versions mean the same objects. Each change takes the
    next number of one counter, so a version never comes back for other objects."""

    def __init__(self) -> None:
        self._index: UnitIndex[Key, bytes] = UnitIndex()
        self._versions: dict[Unit, int] = {}
        self._counter = itertools.count(1)

    def version(self, unit: Unit) -> int:
        return self._versions.get(unit, 0)

    def _changed(self, unit: Unit | None) -> None:
        if unit is None:
            return
        if self._index.of(unit):
            self._versions[unit] = next(self._counter)
        else:
            self._versions.pop(unit, None)

    def put(self, obj: Obj) -> None:
        key, unit = _key(obj), labelled_unit(obj)
        before = self._index.unit_of(key)
        if unit is not None:
            self._index.put(key, unit, zlib.compress(orjson.dumps(obj), 1))
        else:
            self._index.remove(key)
        if before != unit:
            self._changed(before)
        self._changed(unit)

    def remove(self, obj: Obj) -> None:
        key = _key(obj)
        before = self._index.unit_of(key)
        self._index.remove(key)
        self._changed(before)

    def replace(self, kind: str, namespace: str | None, items: Iterable[Obj]) -> None:
        """A fresh listing of `kind` in `namespace` (None: all): what it lacks is gone."""
        fresh = list(items)
        keep = {_key(o) for o in fresh}
        for key in self._index:
            if key[0] == kind and (namespace is None or key[1] == namespace) and key not in keep:
                before = self._index.unit_of(key)
                self._index.remove(key)
                self._changed(before)
        for obj in fresh:
            self.put(obj)

    def event(self, kind_of_event: str, obj: Obj) -> None:
        if kind_of_event == "DELETED":
            self.remove(obj)
        else:
            self.put(obj)

    def of(self, unit: Unit) -> list[Obj]:
        return [orjson.loads(zlib.decompress(blob)) for blob in self._index.of(unit).values()]

    def __len__(self) -> int:
        return len(self._index)


class _Table:
    """What the GPU table keeps of one kind: a value by key, from items {"key", "value"}; empty
    values are not kept."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}

    def replace(self, items: Iterable[Obj]) -> None:
        self.values = {o["key"]: o["value"] for o in items if o["value"]}

    def event(self, kind_of_event: str, obj: Obj) -> None:
        if kind_of_event == "DELETED" or not obj["value"]:
            self.values.pop(obj["key"], None)
        else:
            self.values[obj["key"]] = obj["value"]

    def __len__(self) -> int:
        return len(self.values)


class StatusCache:
    """Start with `start(stop)`; `synced` is set once every read listed (or, for the optional
    cluster-wide ones, was refused); `report(targets)` at any time after."""

    def __init__(self, kube: Kube, *, namespaces: Sequence[str] | None = None) -> None:
        self.kube = kube
        self.namespaces = namespaces
        self.synced = threading.Event()
        self._lock = threading.Lock()
        self._workloads = _ByUnit()
        self._pods = _ByUnit()
        self._nodes = _Table()  # node -> GPUs offered by resource
        self._gpu_pods = _Table()  # (namespace, name) -> the GPUs a bound pod holds, by (node, resource)
        self._gpu_error = ""
        self._pending: set[str] = set()
        self._threads: list[threading.Thread] = []
        # unit -> what its pools were worked out from (the objects' versions, the target's workloads)
        # and the result. Invariant: a report through the memo equals `assemble` without it
        # (test_status_cache.py compares them over a sequence of changes).
        self._memo: dict[Unit, tuple[_PoolsKey, tuple[list[PoolStatus], bool]]] = {}

    # -- reading ----------------------------------------------------------------------------------

    def report(self, targets: Sequence[Target]) -> StatusReport:
        """The status of targets and the cluster GPU table, from what the watches hold. A unit's
        pools are worked out again only when its workloads, its pods or what its target says of
        them changed since the previous report (working out every unit's pools was most of a
        status round's CPU at thousands of units, while few units' objects change between two
        rounds)."""
        with self._lock:
            memo: dict[Unit, tuple[_PoolsKey, tuple[list[PoolStatus], bool]]] = {}

            def pools_of(target: Target) -> tuple[list[PoolStatus], bool]:
                key = (self._workloads.version(target.unit), self._pods.version(target.unit),
                       _workloads_key(target), target.has_inventory)
                known = self._memo.get(target.unit)
                if known is not None and known[0] == key:
                    pools, found = known[1]
                else:
                    pools, found = unit_pools(target, self._workloads.of(target.unit), self._pods.of(target.unit))
                memo[target.unit] = (key, (pools, found))
                return list(pools), found

            report = assemble(targets, self._workloads.of, self._pods.of, pools_of=pools_of)
            self._memo = memo  # only the units of this report: the memo never outgrows the repository
            report.gpus = self._gpus()
        return report

    def sizes(self) -> dict[str, int]:
        """How many objects of each sort are held (for tests and debugging)."""
        with self._lock:
            return {"workloads": len(self._workloads), "pods": len(self._pods), "nodes": len(self._nodes),
                    "gpuPods": len(self._gpu_pods)}

    def _gpus(self) -> ClusterGPUs:
        if self._gpu_error:
            return ClusterGPUs(error=self._gpu_error)
        allocatable = {(node, res): n for node, offered in self._nodes.values.items() for res, n in offered.items()}
        used: Counter[tuple[str, str]] = Counter()
        for usage in self._gpu_pods.values.values():
            used.update(usage)
        return ClusterGPUs(gpu_table(allocatable, used))

    # -- watching ---------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        scopes: list[str | None] = [*sorted(set(self.namespaces))] if self.namespaces is not None else [None]
        reflectors: list[Reflector] = []
        for ns in scopes:
            for kind in WORKLOAD_KINDS:
                reflectors.append(self._managed(kind, ns, slim_workload, self._workloads))
            reflectors.append(self._managed("Pod", ns, slim_pod, self._pods))
        reflectors.append(self._cluster_wide("Node", None, _node_gpus, self._nodes))
        reflectors.append(self._cluster_wide("Pod", BOUND_PODS_FIELDS, _pod_gpus, self._gpu_pods))
        self._pending = {f"{r.kind}/{r.namespace or ''}/{r.fields or ''}" for r in reflectors}
        for r in reflectors:
            t = threading.Thread(target=r.run, args=(stop,), name=f"status-watch-{r.kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def _listed(self, name: str) -> Callable[[], None]:
        def listed() -> None:
            with self._lock:
                self._pending.discard(name)
                if not self._pending:
                    self.synced.set()
        return listed

    def _managed(self, kind: str, ns: str | None, transform: Callable[[Obj], Obj], into: _ByUnit) -> Reflector:
        def replace(items: list[Obj]) -> None:
            with self._lock:
                into.replace(kind, ns, items)

        def event(kind_of_event: str, obj: Obj) -> None:
            with self._lock:
                into.event(kind_of_event, obj)

        return Reflector(self.kube, kind, ns, replace, event, labels=MANAGED_SELECTOR, transform=transform,
                         page_size=LIST_PAGE, listed=self._listed(f"{kind}/{ns or ''}/"))

    def _cluster_wide(self, kind: str, fields: str | None, transform: Callable[[Obj], Obj],
                      into: _Table) -> Reflector:
        listed = self._listed(f"{kind}//{fields or ''}")

        def failed(exc: Exception) -> None:
            if isinstance(exc, ApiError) and exc.forbidden:
                with self._lock:
                    self._gpu_error = f"cannot read nodes and pods cluster-wide: {exc.message}"
                listed()  # nothing more will come: the GPU table reports the error instead

        def replace(items: list[Obj]) -> None:
            with self._lock:
                self._gpu_error = ""
                into.replace(items)

        def event(kind_of_event: str, obj: Obj) -> None:
            with self._lock:
                into.event(kind_of_event, obj)

        return Reflector(self.kube, kind, None, replace, event, fields=fields, transform=transform,
                         page_size=LIST_PAGE, listed=listed, failed=failed, optional=True)


def _node_gpus(node: Obj) -> Obj:
    """A node as the GPU table keeps it: its name and the GPUs it offers."""
    return {"key": (node.get("metadata") or {}).get("name", ""), "value": node_allocatable_gpus(node)}


def _pod_gpus(pod: Obj) -> Obj:
    """A bound pod as the GPU table keeps it: the GPUs it holds, by (node, resource)."""
    meta = pod.get("metadata") or {}
    return {"key": (meta.get("namespace", ""), meta.get("name", "")), "value": pod_gpu_usage(pod)}
