"""Health, readiness and GPU accounting from live objects. Pure functions, no I/O.

Everything here reads the JSON dicts the API server returns (a StatefulSet, a Pod, a Node...) and
answers one question each:

- `workload_health`: is a StatefulSet / DaemonSet / Deployment ready, or still rolling out, with
  the semantics `kubectl rollout status` uses (observed generation, updated and ready counts, the
  StatefulSet revisions, the Deployment's progress deadline);
- `pod_problems` / `summarize_problems`: what is visibly wrong with pods (image pulls, crash loops,
  OOM kills, unschedulable), seconds after it happens and long before a rollout times out;
- `pod_gpu_requests`, `pool_gpus`, `node_gpus`: GPUs requested, allocated and free, with the
  effective-request rule the scheduler uses.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = Mapping[str, Any]

# ---------------------------------------------------------------------------------------------
# Workload readiness


@dataclass(frozen=True)
class WorkloadHealth:
    """Rollout state of one workload. `ready` is a pod count; `healthy` says whether the workload
    reached its goal (every desired pod updated and ready, nothing left of an old revision)."""

    kind: str
    desired: int
    ready: int
    updated: int
    rolling_out: bool
    healthy: bool
    reason: str = ""
    stalled: bool = False  # the controller gave up (Deployment ProgressDeadlineExceeded)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "desired": self.desired, "ready": self.ready,
                               "updated": self.updated, "rollingOut": self.rolling_out,
                               "healthy": self.healthy}
        if self.reason:
            out["reason"] = self.reason
        if self.stalled:
            out["stalled"] = True
        return out


NO_NODE_REASON = "matches no node (check nodeSelector/tolerations)"


def workload_health(obj: Obj) -> WorkloadHealth:
    """The readiness of a StatefulSet, DaemonSet or Deployment."""
    kind = obj.get("kind", "")
    if kind == "StatefulSet":
        return statefulset_health(obj)
    if kind == "DaemonSet":
        return daemonset_health(obj)
    if kind == "Deployment":
        return deployment_health(obj)
    raise ValueError(f"not a workload kind: {kind!r}")


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _unobserved(obj: Obj, kind: str) -> str:
    """A reason when the controller has not yet seen the latest spec, else ''."""
    generation = _int(obj.get("metadata", {}).get("generation"), 0)
    observed = _int(obj.get("status", {}).get("observedGeneration"), 0)
    if observed < generation:
        return f"waiting for the {kind} controller to observe generation {generation}"
    return ""


def statefulset_health(obj: Obj) -> WorkloadHealth:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired = _int(spec.get("replicas"), 1)
    ready = _int(status.get("readyReplicas"))
    updated = _int(status.get("updatedReplicas"))
    replicas = _int(status.get("replicas"))
    strategy = spec.get("updateStrategy") or {}
    on_delete = strategy.get("type") == "OnDelete"
    partition = _int((strategy.get("rollingUpdate") or {}).get("partition"))
    current_rev, update_rev = status.get("currentRevision"), status.get("updateRevision")
    revisions_differ = bool(current_rev and update_rev and current_rev != update_rev)

    def result(healthy: bool, rolling: bool, reason: str) -> WorkloadHealth:
        return WorkloadHealth("StatefulSet", desired, ready, updated, rolling, healthy, reason)

    unobserved = _unobserved(obj, "StatefulSet")
    if unobserved:
        return result(False, True, unobserved)
    if on_delete:
        # pods move to a new revision only when someone deletes them: readiness is all we can wait for
        if ready < desired:
            return result(False, revisions_differ, f"{ready}/{desired} ready")
        note = "update pending: pods are replaced only when deleted (OnDelete)" if revisions_differ else ""
        return result(True, revisions_differ, note)
    want_updated = max(desired - partition, 0)
    if updated < want_updated:
        return result(False, True, f"rollout in progress: {updated}/{desired} updated")
    if replicas > desired:
        return result(False, True, f"scaling down: {replicas - desired} extra pod(s) terminating")
    if partition == 0 and revisions_differ:
        return result(False, True, "rollout in progress: waiting for the revision to complete")
    if ready < desired:
        return result(False, False, f"{ready}/{desired} ready")
    return result(True, False, "")


def daemonset_health(obj: Obj) -> WorkloadHealth:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired = _int(status.get("desiredNumberScheduled"))
    ready = _int(status.get("numberReady"))
    updated = _int(status.get("updatedNumberScheduled"))
    on_delete = (spec.get("updateStrategy") or {}).get("type") == "OnDelete"

    def result(healthy: bool, rolling: bool, reason: str) -> WorkloadHealth:
        return WorkloadHealth("DaemonSet", desired, ready, updated, rolling, healthy, reason)

    unobserved = _unobserved(obj, "DaemonSet")
    if unobserved:
        return result(False, True, unobserved)
    if desired == 0:
        return result(False, False, NO_NODE_REASON)
    if not on_delete and updated < desired:
        return result(False, True, f"rollout in progress: {updated}/{desired} updated")
    if ready < desired:
        return result(False, False, f"{ready}/{desired} ready")
    return result(True, False, "")


def deployment_health(obj: Obj) -> WorkloadHealth:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired = _int(spec.get("replicas"), 1)
    ready = _int(status.get("readyReplicas"))
    updated = _int(status.get("updatedReplicas"))
    available = _int(status.get("availableReplicas"))
    replicas = _int(status.get("replicas"))

    def result(healthy: bool, rolling: bool, reason: str, stalled: bool = False) -> WorkloadHealth:
        return WorkloadHealth("Deployment", desired, ready, updated, rolling, healthy, reason, stalled)

    unobserved = _unobserved(obj, "Deployment")
    if unobserved:
        return result(False, True, unobserved)
    progressing = next((c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), None)
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        message = progressing.get("message") or "the rollout made no progress"
        rolling = updated < desired or replicas > updated
        return result(False, rolling, f"progress deadline exceeded: {message}", stalled=True)
    if updated < desired:
        return result(False, True, f"rollout in progress: {updated}/{desired} updated")
    if replicas > updated:
        old = replicas - updated
        return result(False, True, f"rollout in progress: {old} old pod(s) pending termination")
    if available < updated:
        return result(False, True, f"rollout in progress: {available}/{desired} available")
    if ready < desired:
        return result(False, False, f"{ready}/{desired} ready")
    return result(True, False, "")


# ---------------------------------------------------------------------------------------------
# Label selectors


def selector_matches(selector: Obj | None, labels: Mapping[str, str] | None) -> bool:
    """Whether labels match a metav1.LabelSelector (matchLabels and matchExpressions).
    An empty or missing selector matches nothing, as for workloads."""
    if not selector:
        return False
    labels = labels or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in expressions:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Pod problems

# Worst first. A pod in one of these states will not become ready by itself (or not soon).
PROBLEM_SEVERITY: dict[str, int] = {
    "InvalidImageName": 90,
    "ImagePullBackOff": 85,
    "ErrImagePull": 80,
    "CreateContainerConfigError": 75,
    "CreateContainerError": 70,
    "RunContainerError": 65,
    "OOMKilled": 60,
    "CrashLoopBackOff": 55,
    "Unschedulable": 50,
}
WAITING_PROBLEMS = frozenset(PROBLEM_SEVERITY) - {"OOMKilled", "Unschedulable"}
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodProblem:
    pod: str
    reason: str  # a key of PROBLEM_SEVERITY
    message: str
    container: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"pod": self.pod, "reason": self.reason, "message": self.message}
        if self.container:
            out["container"] = self.container
        return out


def is_terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_problems(pod: Obj) -> list[PodProblem]:
    """Everything visibly wrong with a pod, worst first. Finished and terminating pods have none."""
    if is_terminated(pod) or is_terminating(pod):
        return []
    name = (pod.get("metadata") or {}).get("name", "")
    status = pod.get("status") or {}
    found: list[PodProblem] = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                and cond.get("reason") == "Unschedulable":
            found.append(PodProblem(name, "Unschedulable", cond.get("message") or "no node fits the pod"))
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for cs in statuses:
        problem = _container_problem(name, cs)
        if problem is not None:
            found.append(problem)
    found.sort(key=lambda p: -PROBLEM_SEVERITY.get(p.reason, 0))
    return found


def _container_problem(pod: str, cs: Obj) -> PodProblem | None:
    container = cs.get("name", "")
    waiting = (cs.get("state") or {}).get("waiting") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    restarts = _int(cs.get("restartCount"))
    reason = waiting.get("reason", "")
    oom = last.get("reason") == "OOMKilled"
    if reason == "CrashLoopBackOff":
        if oom:
            return PodProblem(pod, "OOMKilled", f"container {container} was OOMKilled (out of memory; "
                                                f"restarted {restarts} times, now in CrashLoopBackOff)",
                              container)
        exit_info = ""
        if last:
            exit_info = f" exited with code {last.get('exitCode', '?')}"
            if last.get("reason"):
                exit_info += f" ({last['reason']})"
        what = exit_info or " keeps crashing"
        return PodProblem(pod, "CrashLoopBackOff", f"container {container}{what}, restarted {restarts} times",
                          container)
    if reason in WAITING_PROBLEMS:
        message = waiting.get("message") or reason
        return PodProblem(pod, reason, f"container {container}: {message}", container)
    if oom:
        return PodProblem(pod, "OOMKilled", f"container {container} was OOMKilled (out of memory; "
                                            f"restarted {restarts} times)", container)
    return None


def pod_problem(pod: Obj) -> PodProblem | None:
    """The worst problem of a pod, if any."""
    problems = pod_problems(pod)
    return problems[0] if problems else None


@dataclass(frozen=True)
class ProblemSummary:
    """The main problem of a group of pods (a pool): the reason most pods share (the worst one on a
    tie), how many pods have it, and one of them as an example."""

    reason: str
    message: str
    pods: int  # pods with this reason
    total: int  # pods looked at
    example: str  # one affected pod
    others: int = 0  # pods with some other problem

    def __str__(self) -> str:
        text = f"{self.reason} ({self.pods}/{self.total} pods, e.g. {self.example}): {self.message}"
        if self.others:
            text += f" (+{self.others} pod(s) with other problems)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message, "pods": self.pods, "total": self.total,
                "example": self.example, "others": self.others}


def summarize_problems(pods: Sequence[Obj]) -> ProblemSummary | None:
    """The main problem among pods (see ProblemSummary), or None when none has a problem."""
    worst: dict[str, PodProblem] = {}
    for pod in pods:
        problem = pod_problem(pod)
        if problem is not None:
            worst[problem.pod] = problem
    if not worst:
        return None
    counts = Counter(p.reason for p in worst.values())
    reason = max(counts, key=lambda r: (counts[r], PROBLEM_SEVERITY.get(r, 0), r))
    example = min((p for p in worst.values() if p.reason == reason), key=lambda p: p.pod)
    live = sum(1 for p in pods if not is_terminated(p) and not is_terminating(p))
    return ProblemSummary(reason, example.message, counts[reason], live, example.pod,
                          len(worst) - counts[reason])


# ---------------------------------------------------------------------------------------------
# GPU accounting

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")

_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))"
                       r"(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?\Z")


def is_gpu_resource(name: str) -> bool:
    """GPU resources: the vendors' device-plugin resources, or any extended resource named */gpu."""
    return name in GPU_RESOURCES or name.endswith("/gpu")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("2", "500m", "1Gi", "1e3") as a number. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex only lets numbers through
        raise ValueError(f"not a quantity: {value!r}") from exc
    if exponent:
        return base * (Decimal(10) ** int(exponent[1:]))
    return base * _SUFFIXES[suffix or ""]


def _quantities(resources: Obj | None) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, value in (resources or {}).items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            continue
    return out


def container_requests(container: Obj) -> dict[str, Decimal]:
    """A container's requests; a resource with a limit but no request is requested at its limit
    (the API server's defaulting, and the only form extended resources such as GPUs allow)."""
    resources = container.get("resources") or {}
    effective = _quantities(resources.get("limits"))
    effective.update(_quantities(resources.get("requests")))
    return effective


def _add(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Decimal(0)) + v


def _max(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for k, v in other.items():
        if v > into.get(k, Decimal(0)):
            into[k] = v


def pod_requests(pod_spec: Obj) -> dict[str, Decimal]:
    """The effective requests of a pod spec, as the scheduler computes them: the sum over the
    containers (plus restartable init containers, i.e. sidecars), or the largest init container
    step when that is more, plus the pod overhead."""
    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        _add(total, container_requests(c))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in pod_spec.get("initContainers") or []:
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":  # a sidecar: runs alongside everything after it
            _add(total, req)
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    _add(total, _quantities(pod_spec.get("overhead")))
    return total


def _count(value: Decimal) -> int:
    """GPU counts are integers; round a fractional value (never valid for a device) up."""
    integral = value.to_integral_value()
    return int(integral if integral >= value else integral + 1)


def pod_gpu_requests(pod_spec: Obj) -> dict[str, int]:
    """GPUs one pod of this spec requests, by resource name (resources with 0 left out)."""
    return {name: _count(q) for name, q in sorted(pod_requests(pod_spec).items())
            if is_gpu_resource(name) and q > 0}


def holds_resources(pod: Obj) -> bool:
    """Bound to a node and not finished: the pod counts against the node's allocatable."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not is_terminated(pod)


@dataclass
class GPUCount:
    requested: int = 0
    allocated: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"requested": self.requested, "allocated": self.allocated}


def pool_gpus(template_spec: Obj | None, desired: int, pods: Iterable[Obj]) -> dict[str, GPUCount]:
    """GPUs of one pool, by resource: requested = one pod's GPUs x the desired pod count (for a
    DaemonSet, the nodes it is scheduled to); allocated = what the pool's pods bound to a node
    and not finished hold."""
    out: dict[str, GPUCount] = {}
    for name, n in pod_gpu_requests(template_spec or {}).items():
        out.setdefault(name, GPUCount()).requested = n * max(desired, 0)
    for pod in pods:
        if not holds_resources(pod):
            continue
        for name, n in pod_gpu_requests(pod.get("spec") or {}).items():
            out.setdefault(name, GPUCount()).allocated += n
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class NodeGPU:
    node: str
    resource: str
    allocatable: int
    used: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.used, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "resource": self.resource, "allocatable": self.allocatable,
                "used": self.used, "free": self.free}


GPUUsage = dict[tuple[str, str], int]
"""GPUs in use by (node, resource)."""


def node_allocatable_gpus(node: Obj) -> dict[str, int]:
    """The GPUs a node offers, by resource (none: {})."""
    return {res: int(q) for res, q in _quantities((node.get("status") or {}).get("allocatable")).items()
            if is_gpu_resource(res)}


def pod_gpu_usage(pod: Obj) -> GPUUsage:
    """The GPUs a pod holds on its node, by (node, resource): none unless it is bound and not
    finished."""
    if not holds_resources(pod):
        return {}
    node = pod["spec"]["nodeName"]
    return {(node, res): n for res, n in pod_gpu_requests(pod.get("spec") or {}).items()}


def node_gpus(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[NodeGPU]:
    """GPUs per node and resource: allocatable, and used by every pod bound there that has not
    finished (any namespace). Nodes without GPUs are left out; a GPU resource pods use on a node
    that no longer advertises it shows allocatable 0."""
    allocatable = {((node.get("metadata") or {}).get("name", ""), res): n
                   for node in nodes for res, n in node_allocatable_gpus(node).items()}
    used: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        used.update(pod_gpu_usage(pod))
    return gpu_table(allocatable, used)


def gpu_table(allocatable: Mapping[tuple[str, str], int], used: Mapping[tuple[str, str], int]) -> list[NodeGPU]:
    """The per-node GPU rows from allocatable and used counts by (node, resource)."""
    keys = sorted(set(allocatable) | {k for k, n in used.items() if n})
    return [NodeGPU(node, res, allocatable.get((node, res), 0), used.get((node, res), 0)) for node, res in keys]
