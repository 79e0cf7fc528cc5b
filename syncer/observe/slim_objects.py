"""What the status keeps of live objects: the few fields health, readiness and GPU figures read
(see `syncer.observe.health`). A listing of thousands of pods, or the agent's watch cache of
them, holds a fraction of the memory of whole objects this way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from syncer.observe.health import Obj, is_gpu_resource

_POD_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")  # what pod_requests reads
_POD_SPEC_FIELDS = ("nodeName", "overhead")
_POD_META_FIELDS = ("name", "namespace", "labels", "deletionTimestamp")
_WORKLOAD_META_FIELDS = ("name", "namespace", "labels", "generation", "deletionTimestamp")
_WORKLOAD_SPEC_FIELDS = ("replicas", "selector", "updateStrategy")
_WORKLOAD_STATUS_FIELDS = (  # what statefulset_health, daemonset_health and deployment_health read
    "observedGeneration", "replicas", "readyReplicas", "updatedReplicas", "availableReplicas", "currentRevision",
    "updateRevision", "desiredNumberScheduled", "numberReady", "updatedNumberScheduled")


def _pick(obj: Obj | None, keys: Sequence[str]) -> dict[str, Any]:
    return {k: obj[k] for k in keys if k in obj} if obj else {}


def _slim_pod_spec(spec: Obj) -> dict[str, Any]:
    slim = _pick(spec, _POD_SPEC_FIELDS)
    for key in ("containers", "initContainers"):
        if key in spec:
            slim[key] = [_pick(c, _POD_CONTAINER_FIELDS) for c in spec[key] or []]
    return slim


def _slim_container_status(cs: Obj) -> dict[str, Any]:
    """What `_container_problem` reads: a waiting state and the last termination (a running
    container's details are not)."""
    out: dict[str, Any] = {"name": cs.get("name", ""), "restartCount": cs.get("restartCount", 0)}
    waiting = (cs.get("state") or {}).get("waiting")
    if waiting:
        out["state"] = {"waiting": _pick(waiting, ("reason", "message"))}
    terminated = (cs.get("lastState") or {}).get("terminated")
    if terminated:
        out["lastState"] = {"terminated": _pick(terminated, ("reason", "exitCode"))}
    return out


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the health and GPU figures read of a pod: its name, labels and deletion mark, of its
    status the phase, an unschedulable condition and the containers' waiting and last-terminated
    states, and of its spec the node and each container's name and resources. The agent keeps
    one per pod, compressed (syncer.observe.status_cache)."""
    status = pod.get("status") or {}
    slim_status: dict[str, Any] = _pick(status, ("phase",))
    unschedulable = [_pick(c, ("type", "status", "reason", "message")) for c in status.get("conditions") or []
                     if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    if unschedulable:
        slim_status["conditions"] = unschedulable
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            slim_status[key] = [_slim_container_status(c) for c in status[key]]
    return {"kind": pod.get("kind", "Pod"), "metadata": _pick(pod.get("metadata"), _POD_META_FIELDS),
            "spec": _slim_pod_spec(pod.get("spec") or {}), "status": slim_status}


def slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """What `workload_health`, the pools and their GPU figures read of a StatefulSet, DaemonSet or
    Deployment: its name, labels and generation, the status counts and revisions (and a
    Deployment's Progressing condition), and of its spec the replicas, selector, update strategy
    and the pod template's containers and resources."""
    spec = obj.get("spec") or {}
    slim_spec = _pick(spec, _WORKLOAD_SPEC_FIELDS)
    slim_spec["template"] = {"spec": _slim_pod_spec((spec.get("template") or {}).get("spec") or {})}
    status = obj.get("status") or {}
    slim_status = _pick(status, _WORKLOAD_STATUS_FIELDS)
    progressing = [_pick(c, ("type", "reason", "message")) for c in status.get("conditions") or []
                   if c.get("type") == "Progressing"]
    if progressing:
        slim_status["conditions"] = progressing
    return {"kind": obj.get("kind", ""), "metadata": _pick(obj.get("metadata"), _WORKLOAD_META_FIELDS),
            "spec": slim_spec, "status": slim_status}


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the GPU table reads of a node: its name and the GPUs it offers."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {"kind": "Node", "metadata": {"name": (node.get("metadata") or {}).get("name", "")},
            "status": {"allocatable": {k: v for k, v in allocatable.items() if is_gpu_resource(k)}}}
