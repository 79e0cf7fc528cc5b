"""The live objects the agent's status figures read, kept current by watches instead of re-listed.

`flower-syncer status` lists what it reports on (see `syncer.observe.status`); an agent reporting
every few seconds on thousands of units cannot: re-listing 12,000 pods every 10 s competes with
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

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from syncer.cluster.client import ApiError, Kube
from syncer.cluster.reflector import Reflector
from syncer.identity import MANAGED_SELECTOR, WORKLOAD_KINDS, Unit
from syncer.observe.health import GPUUsage, gpu_table, node_allocatable_gpus, pod_gpu_usage
from syncer.observe.slim import slim_pod, slim_workload
from syncer.observe.status import (
    BOUND_PODS_FIELDS,
    LIST_PAGE,
    ClusterGPUs,
    StatusReport,
    Target,
    assemble,
    labelled_unit,
)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace, name


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


class _ByUnit:
    """Objects by key, grouped by the unit their labels name (objects naming none are not kept)."""

    def __init__(self) -> None:
        self._unit_of: dict[Key, Unit] = {}
        self._groups: dict[Unit, dict[Key, Obj]] = {}

    def put(self, obj: Obj) -> None:
        key = _key(obj)
        self.remove(key)
        unit = labelled_unit(obj)
        if unit is not None:
            self._unit_of[key] = unit
            self._groups.setdefault(unit, {})[key] = obj

    def remove(self, key: Key) -> None:
        unit = self._unit_of.pop(key, None)
        if unit is not None:
            group = self._groups[unit]
            group.pop(key, None)
            if not group:
                del self._groups[unit]

    def replace(self, kind: str, namespace: str | None, items: Iterable[Obj]) -> None:
        """A fresh listing of `kind` in `namespace` (None: all): what it lacks is gone."""
        fresh = list(items)
        keep = {_key(o) for o in fresh}
        for key in [k for k in self._unit_of if k[0] == kind and (namespace is None or k[1] == namespace)
                    and k not in keep]:
            self.remove(key)
        for obj in fresh:
            self.put(obj)

    def of(self, unit: Unit) -> list[Obj]:
        return list(self._groups.get(unit, {}).values())

    def __len__(self) -> int:
        return len(self._unit_of)


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
        self._nodes: dict[str, dict[str, int]] = {}  # node -> GPUs offered by resource
        self._gpu_pods: dict[tuple[str, str], GPUUsage] = {}  # (namespace, name) -> GPUs held where
        self._gpu_error = ""
        self._pending: set[str] = set()
        self._threads: list[threading.Thread] = []

    # -- reading ----------------------------------------------------------------------------------

    def report(self, targets: Sequence[Target]) -> StatusReport:
        """The status of targets and the cluster GPU table, from what the watches hold."""
        with self._lock:
            report = assemble(targets, self._workloads.of, self._pods.of)
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
        allocatable = {(node, res): n for node, offered in self._nodes.items() for res, n in offered.items()}
        used: Counter[tuple[str, str]] = Counter()
        for usage in self._gpu_pods.values():
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
        reflectors.append(self._cluster_wide("Node", None, _node_gpus, self._nodes_replace, self._node_event))
        reflectors.append(self._cluster_wide("Pod", BOUND_PODS_FIELDS, _pod_gpus, self._gpu_pods_replace,
                                             self._gpu_pod_event))
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
                if kind_of_event == "DELETED":
                    into.remove(_key(obj))
                else:
                    into.put(obj)

        return Reflector(self.kube, kind, ns, replace, event, labels=MANAGED_SELECTOR, transform=transform,
                         page_size=LIST_PAGE, listed=self._listed(f"{kind}/{ns or ''}/"))

    def _cluster_wide(self, kind: str, fields: str | None, transform: Callable[[Obj], Obj],
                      replace: Callable[[list[Obj]], None], event: Callable[[str, Obj], None]) -> Reflector:
        name = f"{kind}//{fields or ''}"
        listed = self._listed(name)

        def failed(exc: Exception) -> None:
            if isinstance(exc, ApiError) and exc.forbidden:
                with self._lock:
                    self._gpu_error = f"cannot read nodes and pods cluster-wide: {exc.message}"
                listed()  # nothing more will come: the GPU table reports the error instead

        def replaced(items: list[Obj]) -> None:
            with self._lock:
                self._gpu_error = ""
            replace(items)

        return Reflector(self.kube, kind, None, replaced, event, fields=fields, transform=transform,
                         page_size=LIST_PAGE, listed=listed, failed=failed, optional=True)

    def _nodes_replace(self, items: list[Obj]) -> None:
        with self._lock:
            self._nodes = {o["name"]: o["gpus"] for o in items if o["gpus"]}

    def _node_event(self, kind_of_event: str, obj: Obj) -> None:
        with self._lock:
            if kind_of_event == "DELETED" or not obj["gpus"]:
                self._nodes.pop(obj["name"], None)
            else:
                self._nodes[obj["name"]] = obj["gpus"]

    def _gpu_pods_replace(self, items: list[Obj]) -> None:
        with self._lock:
            self._gpu_pods = {o["key"]: o["usage"] for o in items if o["usage"]}

    def _gpu_pod_event(self, kind_of_event: str, obj: Obj) -> None:
        with self._lock:
            if kind_of_event == "DELETED" or not obj["usage"]:
                self._gpu_pods.pop(obj["key"], None)
            else:
                self._gpu_pods[obj["key"]] = obj["usage"]


def _node_gpus(node: Obj) -> Obj:
    """A node as the GPU table keeps it: its name and the GPUs it offers."""
    return {"name": (node.get("metadata") or {}).get("name", ""), "gpus": node_allocatable_gpus(node)}


def _pod_gpus(pod: Obj) -> Obj:
    """A bound pod as the GPU table keeps it: the GPUs it holds, by (node, resource)."""
    meta = pod.get("metadata") or {}
    return {"key": (meta.get("namespace", ""), meta.get("name", "")), "usage": pod_gpu_usage(pod)}
