"""A scripted stand-in for the cluster and the objects of one rendered federation, shared by the
status tests (test_status.py, test_status_cache.py): a helper module, not a test module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from syncer.cluster.client import Kube
from syncer.identity import Unit

FED = Unit("federation", "flower", "fed")
REL = Unit("supernode", "flower", "pytorch")
UNIT_LABELS = {"app.kubernetes.io/managed-by": "flower-syncer", "flower-syncer.io/unit": "fed",
               "flower-syncer.io/unit-kind": "federation"}
REL_LABELS = {"app.kubernetes.io/managed-by": "flower-syncer", "flower-syncer.io/unit": "pytorch",
              "flower-syncer.io/unit-kind": "supernode"}


def sts(name: str, labels: dict[str, str], selector: dict[str, str], *, replicas: int = 2, ready: int = 2,
        gpus: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "kind": "StatefulSet", "apiVersion": "apps/v1",
        "metadata": {"name": name, "namespace": "flower", "generation": 1, "labels": {**labels, **UNIT_LABELS}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": {**selector, **UNIT_LABELS}},
                              "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}},
        "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready,
                   "updatedReplicas": replicas, "currentRevision": "r1", "updateRevision": "r1"},
    }


def pod(name: str, labels: dict[str, str], *, node: str | None = "gpu-nvidia-0", gpus: int = 0,
        problem: str = "", deleting: bool = False) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    meta: dict[str, Any] = {"name": name, "namespace": "flower", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T04:40:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if problem == "Unschedulable":
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/7 nodes are available: 2 Insufficient nvidia.com/gpu."}]
    elif problem:
        status["containerStatuses"] = [{"name": "c", "restartCount": 3,
                                        "state": {"waiting": {"reason": problem, "message": "m"}}}]
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}


SUPERLINK_SEL = {"app.kubernetes.io/component": "superlink", "app.kubernetes.io/instance": "fed"}
GPU_SEL = {"flower.flwr.ai/pool": "gpu", "app.kubernetes.io/instance": "fed"}


def fed_objects(*, ready: int = 2, pod_problem: str = "", deleting: bool = False) -> list[dict[str, Any]]:
    pods = [pod("fed-superlink-0", {**SUPERLINK_SEL, **UNIT_LABELS}, node="cpu-node-0"),
            pod("fed-supernode-gpu-0", {**GPU_SEL, **UNIT_LABELS}, gpus=1)]
    pods.append(pod("fed-supernode-gpu-1", {**GPU_SEL, **UNIT_LABELS}, gpus=1,
                    node=None if pod_problem == "Unschedulable" else "gpu-nvidia-1", problem=pod_problem))
    if deleting:
        pods.append(pod("fed-supernode-gpu-9", {**GPU_SEL, **UNIT_LABELS}, gpus=1, deleting=True))
    return [sts("fed-superlink", SUPERLINK_SEL, SUPERLINK_SEL, replicas=1, ready=1),
            sts("fed-supernode-gpu", GPU_SEL, GPU_SEL, ready=ready, gpus=1), *pods]


class FakeKube:
    """Answers LISTs from a script: `objects()` gives the namespace's objects at each call."""

    def __init__(self, objects: Callable[[], list[dict[str, Any]]], *,
                 inventories: list[dict[str, Any]] | None = None) -> None:
        self.objects = objects
        self.inventories = inventories or []
        self.calls: list[tuple[str, str | None]] = []
        self.fail: Exception | None = None

    def list(self, kind: str, namespace: str | None = None, *, labels: str | None = None,
             fields: str | None = None, each: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
             page_size: int = 5000) -> tuple[list[dict[str, Any]], str]:
        self.calls.append((kind, namespace))
        if self.fail is not None:
            raise self.fail
        if kind == "ConfigMap":
            items = list(self.inventories)
        elif kind == "Node":
            items = [{"metadata": {"name": "gpu-nvidia-0"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
                     {"metadata": {"name": "gpu-nvidia-1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}]
        else:
            items = [o for o in self.objects() if o["kind"] == kind]
        return [each(o) for o in items] if each else items, "1"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def as_kube(fake: FakeKube) -> Kube:
    return cast(Kube, fake)
