"""Readiness, pod problems and GPU accounting from hand-written API objects (no cluster).

The dicts mirror what the API server returns (trimmed to the fields that matter): kwok never
produces CrashLoopBackOff or ImagePullBackOff, so those states are only testable this way.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from syncer.observe.health import (
    NO_NODE_REASON,
    GPUCount,
    NodeGPU,
    deployment_health,
    holds_resources,
    is_gpu_resource,
    is_terminated,
    is_terminating,
    node_gpus,
    parse_quantity,
    pod_gpu_requests,
    pod_problem,
    pod_problems,
    pod_requests,
    pool_gpus,
    selector_matches,
    statefulset_health,
    summarize_problems,
    workload_health,
)
from syncer.observe.slim_objects import slim_pod, slim_workload

UNSCHEDULABLE_GPU = ("0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match Pod's "
                     "node affinity/selector. preemption: 0/7 nodes are available: 2 No preemption victims "
                     "found for incoming pod, 5 Preemption is not helpful for scheduling.")


# ---------------------------------------------------------------------------------------------
# Object builders (realistic shapes, trimmed)


def statefulset(*, generation: int = 1, replicas: int = 3, status: dict[str, Any] | None = None,
                strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "serviceName": "fed-supernode-gpu",
                            "selector": {"matchLabels": {"flower.flwr.ai/pool": "gpu"}},
                            "podManagementPolicy": "OrderedReady"}
    spec["updateStrategy"] = strategy or {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "fed-supernode-gpu", "namespace": "flower", "generation": generation},
            "spec": spec, "status": status or {}}


def daemonset(status: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "fed-supernode-edge", "namespace": "flower", "generation": generation},
            "spec": {"selector": {"matchLabels": {"flower.flwr.ai/pool": "edge"}},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "template": {"spec": {"nodeSelector": {"accelerator": "tpu-v9"}, "containers": []}}},
            "status": status}


def deployment(status: dict[str, Any], *, replicas: int = 2, generation: int = 2) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "pytorch-flower-supernode", "namespace": "flower", "generation": generation},
            "spec": {"replicas": replicas, "progressDeadlineSeconds": 600,
                     "selector": {"matchLabels": {"app.kubernetes.io/component": "supernode"}}},
            "status": status}


def container(name: str = "supernode", *, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "flwr/supernode:1.20.0", "resources": resources, **extra}


def pod(name: str, *, node: str | None = "gpu-nvidia-0", phase: str = "Running",
        containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None,
        statuses: list[dict[str, Any]] | None = None, conditions: list[dict[str, Any]] | None = None,
        namespace: str = "flower", deleting: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [container()]}
    if init:
        spec["initContainers"] = init
    if node:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {"flower.flwr.ai/pool": "gpu"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T04:40:00Z"
    status: dict[str, Any] = {"phase": phase}
    if statuses is not None:
        status["containerStatuses"] = statuses
    if conditions is not None:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def waiting(reason: str, message: str, *, restarts: int = 0, last: dict[str, Any] | None = None,
            name: str = "supernode") -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name, "ready": False, "restartCount": restarts, "image": "flwr/supernode:1.20.0",
                          "state": {"waiting": {"reason": reason, "message": message}}}
    if last is not None:
        cs["lastState"] = {"terminated": last}
    return cs


def crashloop_pod(name: str, *, exit_code: int = 1, reason: str = "Error") -> dict[str, Any]:
    return pod(name, phase="Running", statuses=[waiting(
        "CrashLoopBackOff", f"back-off 5m0s restarting failed container=supernode pod={name}", restarts=7,
        last={"exitCode": exit_code, "reason": reason, "startedAt": "2026-11-22T04:30:00Z",
              "finishedAt": "2026-11-22T04:30:02Z"})])


def image_pull_pod(name: str) -> dict[str, Any]:
    return pod(name, phase="Pending", statuses=[waiting(
        "ImagePullBackOff", 'Back-off pulling image "flwr/supernode:9.9.9"')])


def unschedulable_pod(name: str, message: str = UNSCHEDULABLE_GPU) -> dict[str, Any]:
    return pod(name, node=None, phase="Pending", conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": None, "lastTransitionTime": "2026-11-22T04:31:00Z"}],
        containers=[container(limits={"nvidia.com/gpu": "4"})])


# ---------------------------------------------------------------------------------------------
# StatefulSet


def test_statefulset_mid_rollout_is_rolling_and_not_ready() -> None:
    sts = statefulset(generation=4, status={
        "observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "currentReplicas": 2, "updatedReplicas": 1,
        "currentRevision": "fed-supernode-gpu-6d9f7c8b5", "updateRevision": "fed-supernode-gpu-7f8c9d6c4",
        "availableReplicas": 3, "collisionCount": 0})
    h = statefulset_health(sts)
    assert (h.desired, h.ready, h.updated) == (3, 3, 1)
    assert h.rolling_out and not h.healthy
    assert "1/3 updated" in h.reason


def test_statefulset_updated_but_revision_not_yet_current_is_still_rolling() -> None:
    sts = statefulset(status={"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
                              "currentRevision": "a", "updateRevision": "b"})
    h = statefulset_health(sts)
    assert h.rolling_out and not h.healthy


def test_statefulset_unobserved_generation_is_not_ready_even_if_counts_match() -> None:
    sts = statefulset(generation=5, status={"observedGeneration": 4, "replicas": 3, "readyReplicas": 3,
                                            "updatedReplicas": 3, "currentRevision": "a", "updateRevision": "a"})
    h = statefulset_health(sts)
    assert not h.healthy and h.rolling_out
    assert "generation 5" in h.reason


def test_statefulset_complete_is_ready() -> None:
    sts = statefulset(generation=4, status={
        "observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3,
        "currentRevision": "fed-supernode-gpu-7f8c9d6c4", "updateRevision": "fed-supernode-gpu-7f8c9d6c4",
        "availableReplicas": 3})
    h = workload_health(sts)
    assert h.healthy and not h.rolling_out and h.reason == ""
    assert (h.desired, h.ready, h.updated) == (3, 3, 3)


def test_statefulset_new_without_status_is_not_ready() -> None:
    h = statefulset_health(statefulset(status={}))
    assert not h.healthy and (h.ready, h.desired) == (0, 3)


def test_statefulset_ready_count_short_is_not_rolling_but_not_ready() -> None:
    sts = statefulset(status={"observedGeneration": 1, "replicas": 3, "readyReplicas": 2, "updatedReplicas": 3,
                              "currentRevision": "a", "updateRevision": "a"})
    h = statefulset_health(sts)
    assert not h.healthy and not h.rolling_out and h.reason == "2/3 ready"


def test_statefulset_partition_rollout_is_done_when_the_pods_above_the_partition_are_updated() -> None:
    sts = statefulset(strategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}, status={
        "observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 1,
        "currentRevision": "a", "updateRevision": "b"})
    assert statefulset_health(sts).healthy


def test_statefulset_on_delete_waits_only_for_readiness() -> None:
    sts = statefulset(strategy={"type": "OnDelete"}, status={
        "observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 0,
        "currentRevision": "a", "updateRevision": "b"})
    h = statefulset_health(sts)
    assert h.healthy and h.rolling_out and "OnDelete" in h.reason


# ---------------------------------------------------------------------------------------------
# DaemonSet


def test_daemonset_matching_no_node_is_not_ready() -> None:
    ds = daemonset({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                    "numberReady": 0, "observedGeneration": 1})
    h = workload_health(ds)
    assert not h.healthy
    assert h.desired == 0 and not h.rolling_out
    assert h.reason == NO_NODE_REASON
    assert "nodeSelector" in h.reason


def test_daemonset_fresh_without_status_waits_for_the_controller() -> None:
    h = workload_health(daemonset({}))
    assert not h.healthy and "controller" in h.reason


def test_daemonset_rolling_and_ready() -> None:
    rolling = daemonset({"currentNumberScheduled": 4, "desiredNumberScheduled": 4, "numberReady": 4,
                         "numberAvailable": 4, "updatedNumberScheduled": 2, "observedGeneration": 2}, generation=2)
    h = workload_health(rolling)
    assert h.rolling_out and not h.healthy and "2/4 updated" in h.reason
    done = daemonset({"currentNumberScheduled": 4, "desiredNumberScheduled": 4, "numberReady": 4,
                      "numberAvailable": 4, "updatedNumberScheduled": 4, "observedGeneration": 2}, generation=2)
    assert workload_health(done).healthy


# ---------------------------------------------------------------------------------------------
# Deployment


def test_deployment_progress_deadline_exceeded_is_stalled() -> None:
    dep = deployment({
        "observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2,
        "unavailableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": 'ReplicaSet "pytorch-flower-supernode-7d4b9c6f5" has timed out progressing.'}]})
    h = deployment_health(dep)
    assert not h.healthy and h.stalled and h.rolling_out
    assert h.reason.startswith("progress deadline exceeded")
    assert "timed out progressing" in h.reason


def test_deployment_old_replicas_pending_termination_is_rolling() -> None:
    dep = deployment({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 3,
                      "availableReplicas": 3,
                      "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]})
    h = deployment_health(dep)
    assert h.rolling_out and not h.healthy and "old pod" in h.reason


def test_deployment_complete_is_ready() -> None:
    dep = deployment({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                      "availableReplicas": 2,
                      "conditions": [{"type": "Progressing", "status": "True",
                                      "reason": "NewReplicaSetAvailable"}]})
    h = deployment_health(dep)
    assert h.healthy and not h.rolling_out and not h.stalled
    assert (h.desired, h.ready, h.updated) == (2, 2, 2)


def test_deployment_unavailable_pods_are_not_ready() -> None:
    dep = deployment({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                      "availableReplicas": 1})
    assert not deployment_health(dep).healthy


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a workload"):
        workload_health({"kind": "Job"})


# ---------------------------------------------------------------------------------------------
# Pod problems


def test_crashloop_problem_has_exit_code_and_restarts() -> None:
    p = pod_problem(crashloop_pod("fed-supernode-cpu-0"))
    assert p is not None and p.reason == "CrashLoopBackOff"
    assert "exited with code 1 (Error)" in p.message and "restarted 7 times" in p.message
    assert p.container == "supernode"


def test_crashloop_after_oom_kill_is_reported_as_oom() -> None:
    p = pod_problem(crashloop_pod("fed-supernode-cpu-0", exit_code=137, reason="OOMKilled"))
    assert p is not None and p.reason == "OOMKilled"


def test_running_container_that_was_oom_killed_is_reported() -> None:
    cs = {"name": "superexec-clientapp", "ready": True, "restartCount": 1, "state": {"running": {}},
          "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
    p = pod_problem(pod("x-0", statuses=[cs]))
    assert p is not None and p.reason == "OOMKilled" and p.container == "superexec-clientapp"


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                                    "CreateContainerError", "InvalidImageName", "RunContainerError"])
def test_waiting_reasons_are_problems(reason: str) -> None:
    p = pod_problem(pod("x-0", phase="Pending", statuses=[waiting(reason, "details here")]))
    assert p is not None and p.reason == reason and "details here" in p.message


def test_init_container_problems_count() -> None:
    p = pod("x-0", phase="Pending")
    p["status"]["initContainerStatuses"] = [waiting("ImagePullBackOff", "Back-off pulling image", name="init")]
    problem = pod_problem(p)
    assert problem is not None and problem.container == "init"


def test_healthy_finished_and_terminating_pods_have_no_problems() -> None:
    ok = pod("x-0", statuses=[{"name": "supernode", "ready": True, "restartCount": 0,
                               "state": {"running": {"startedAt": "2026-11-22T04:30:00Z"}}}])
    assert pod_problems(ok) == []
    assert pod_problems({**crashloop_pod("x-1"), "status": {"phase": "Failed"}}) == []
    assert pod_problems(pod("x-2", deleting=True, statuses=[waiting("CrashLoopBackOff", "")])) == []
    # ContainerCreating is normal progress, not a problem
    assert pod_problems(pod("x-3", phase="Pending", statuses=[waiting("ContainerCreating", "")])) == []


def test_unschedulable_keeps_the_scheduler_message() -> None:
    p = pod_problem(unschedulable_pod("fed-supernode-gpu-2"))
    assert p is not None and p.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in p.message


def test_summary_picks_the_most_common_problem_with_a_count_and_an_example() -> None:
    pods = [
        crashloop_pod("fed-supernode-cpu-1"),
        crashloop_pod("fed-supernode-cpu-0"),
        image_pull_pod("fed-supernode-cpu-2"),
        pod("fed-supernode-cpu-3"),
    ]
    s = summarize_problems(pods)
    assert s is not None
    assert (s.reason, s.pods, s.total, s.example, s.others) == ("CrashLoopBackOff", 2, 4, "fed-supernode-cpu-0", 1)
    text = str(s)
    assert text.startswith("CrashLoopBackOff (2/4 pods, e.g. fed-supernode-cpu-0)")
    assert "+1 pod(s) with other problems" in text


def test_summary_tie_goes_to_the_worse_problem() -> None:
    s = summarize_problems([unschedulable_pod("p-2"), image_pull_pod("p-1")])
    assert s is not None and s.reason == "ImagePullBackOff" and s.pods == 1 and s.others == 1


def test_summary_of_unschedulable_gpu_pods() -> None:
    s = summarize_problems([pod("fed-supernode-gpu-0"), pod("fed-supernode-gpu-1", node="gpu-nvidia-1"),
                            unschedulable_pod("fed-supernode-gpu-2")])
    assert s is not None
    assert (s.reason, s.pods, s.total, s.example) == ("Unschedulable", 1, 3, "fed-supernode-gpu-2")
    assert "Insufficient nvidia.com/gpu" in s.message
    assert s.to_dict()["example"] == "fed-supernode-gpu-2"


def test_summary_of_healthy_pods_is_none() -> None:
    assert summarize_problems([pod("a"), pod("b")]) is None
    assert summarize_problems([]) is None


# ---------------------------------------------------------------------------------------------
# Selectors


def test_selector_matching() -> None:
    labels = {"app": "supernode", "tier": "gpu"}
    assert selector_matches({"matchLabels": {"app": "supernode"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "superlink"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "x"]}]},
                            labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]},
                                labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert not selector_matches({}, labels)
    assert not selector_matches(None, labels)


# ---------------------------------------------------------------------------------------------
# Quantities and GPU requests


@pytest.mark.parametrize(("text", "value"), [
    ("2", Decimal(2)), ("500m", Decimal("0.5")), ("1Gi", Decimal(2 ** 30)), ("1e3", Decimal(1000)),
    ("1.5k", Decimal(1500)), (4, Decimal(4)), ("0", Decimal(0)),
])
def test_parse_quantity(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "two", "1Xi", "1.2.3", True])
def test_parse_quantity_rejects_garbage(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_gpu_resource_names() -> None:
    assert is_gpu_resource("nvidia.com/gpu")
    assert is_gpu_resource("amd.com/gpu")
    assert is_gpu_resource("gpu.intel.com/i915")
    assert is_gpu_resource("example.com/gpu")
    assert not is_gpu_resource("cpu")
    assert not is_gpu_resource("nvidia.com/mig-1g.5gb")
    assert not is_gpu_resource("example.com/gpus")


def test_limits_count_as_requests_for_extended_resources() -> None:
    spec = {"containers": [container(limits={"nvidia.com/gpu": "2", "cpu": "1"}),
                           container("sidecar", requests={"cpu": "100m"})]}
    assert pod_gpu_requests(spec) == {"nvidia.com/gpu": 2}
    assert pod_requests(spec)["cpu"] == Decimal("1.1")


def test_requests_win_over_limits() -> None:
    spec = {"containers": [container(requests={"amd.com/gpu": "1"}, limits={"amd.com/gpu": "1", "cpu": "2"})]}
    assert pod_gpu_requests(spec) == {"amd.com/gpu": 1}


def test_containers_sum_and_init_containers_take_the_max() -> None:
    spec = {
        "containers": [container(limits={"nvidia.com/gpu": "1"}),
                       container("superexec-clientapp", limits={"nvidia.com/gpu": "1"})],
        "initContainers": [container("warmup", limits={"nvidia.com/gpu": "3"}),
                           container("fetch", limits={"nvidia.com/gpu": "1"})],
    }
    # containers sum to 2, the largest init step needs 3: the pod needs 3
    assert pod_gpu_requests(spec) == {"nvidia.com/gpu": 3}
    spec["initContainers"] = [container("warmup", limits={"nvidia.com/gpu": "1"})]
    assert pod_gpu_requests(spec) == {"nvidia.com/gpu": 2}


def test_sidecar_init_containers_add_to_the_sum() -> None:
    spec = {
        "initContainers": [container("gpu-monitor", limits={"nvidia.com/gpu": "1"}, restartPolicy="Always"),
                           container("warmup", limits={"nvidia.com/gpu": "2"})],
        "containers": [container(limits={"nvidia.com/gpu": "1"})],
    }
    # sidecar (1) + main (1) = 2; the warmup step runs next to the sidecar: 2 + 1 = 3
    assert pod_gpu_requests(spec) == {"nvidia.com/gpu": 3}


def test_pod_overhead_is_added_and_zero_gpus_are_left_out() -> None:
    spec = {"containers": [container(requests={"cpu": "1", "nvidia.com/gpu": "0"})], "overhead": {"cpu": "250m"}}
    assert pod_requests(spec)["cpu"] == Decimal("1.25")
    assert pod_gpu_requests(spec) == {}


def test_pool_gpus_requested_and_allocated() -> None:
    template = {"containers": [container(limits={"nvidia.com/gpu": "1"})]}
    pods = [
        pod("g-0", containers=[container(limits={"nvidia.com/gpu": "1"})]),
        pod("g-1", node="gpu-nvidia-1", containers=[container(limits={"nvidia.com/gpu": "1"})]),
        pod("g-2", node=None, phase="Pending", containers=[container(limits={"nvidia.com/gpu": "1"})]),
        pod("g-3", phase="Succeeded", containers=[container(limits={"nvidia.com/gpu": "1"})]),
    ]
    gpus = pool_gpus(template, 3, pods)
    assert gpus == {"nvidia.com/gpu": GPUCount(requested=3, allocated=2)}
    assert gpus["nvidia.com/gpu"].to_dict() == {"requested": 3, "allocated": 2}


def test_pool_gpus_for_a_daemonset_scale_with_the_scheduled_nodes() -> None:
    template = {"containers": [container(limits={"amd.com/gpu": "2"})]}
    assert pool_gpus(template, 1, []) == {"amd.com/gpu": GPUCount(2, 0)}
    assert pool_gpus(template, 0, []) == {"amd.com/gpu": GPUCount(0, 0)}
    assert pool_gpus({"containers": [container()]}, 5, []) == {}


def test_node_used_and_free() -> None:
    nodes = [
        {"metadata": {"name": "gpu-nvidia-0"},
         "status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": "4", "pods": "110"}}},
        {"metadata": {"name": "gpu-amd-0"}, "status": {"allocatable": {"cpu": "32", "amd.com/gpu": "2"}}},
        {"metadata": {"name": "cpu-node-0"}, "status": {"allocatable": {"cpu": "16"}}},
    ]
    pods = [
        pod("a", containers=[container(limits={"nvidia.com/gpu": "1"})]),
        pod("b", namespace="other-team", containers=[container(limits={"nvidia.com/gpu": "2"})]),
        pod("c", phase="Failed", containers=[container(limits={"nvidia.com/gpu": "4"})]),
        pod("d", node=None, phase="Pending", containers=[container(limits={"nvidia.com/gpu": "4"})]),
        pod("e", node="gpu-amd-0", containers=[container(limits={"amd.com/gpu": "2"})]),
        # a terminating pod still holds its device until it is gone
        pod("f", deleting=True, containers=[container(limits={"nvidia.com/gpu": "1"})]),
    ]
    got = node_gpus(nodes, pods)
    assert got == [NodeGPU("gpu-amd-0", "amd.com/gpu", 2, 2), NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 4)]
    assert [n.free for n in got] == [0, 0]
    assert got[1].to_dict() == {"node": "gpu-nvidia-0", "resource": "nvidia.com/gpu", "allocatable": 4,
                                "used": 4, "free": 0}


def test_node_over_committed_or_without_the_resource() -> None:
    nodes = [{"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}]
    pods = [pod("a", node="n", containers=[container(limits={"nvidia.com/gpu": "2"})]),
            pod("b", node="gone", containers=[container(limits={"nvidia.com/gpu": "1"})])]
    got = node_gpus(nodes, pods)
    assert got == [NodeGPU("gone", "nvidia.com/gpu", 0, 1), NodeGPU("n", "nvidia.com/gpu", 1, 2)]
    assert got[1].free == 0


def full_pod(**status: Any) -> dict[str, Any]:
    """A pod as the API server lists it: managedFields, volumes, env, probes and all."""
    container = {"name": "supernode", "image": "flwr/supernode:1.25.0", "args": ["--insecure"],
                 "env": [{"name": "A", "value": "x" * 200}], "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                 "readinessProbe": {"tcpSocket": {"port": 9094}},
                 "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    sidecar = {"name": "exec", "restartPolicy": "Always", "image": "flwr/superexec:1.25.0",
               "resources": {"requests": {"amd.com/gpu": "1"}}}
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "p-0", "namespace": "ns", "labels": {"app": "x"},
                     "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                        "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
        "spec": {"nodeName": "gpu-nvidia-0", "overhead": {"nvidia.com/gpu": "0"}, "containers": [container],
                 "initContainers": [sidecar], "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": []},
        "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                   "qosClass": "Burstable", **status},
    }


@pytest.mark.parametrize("status", [
    {},
    {"containerStatuses": [{"name": "supernode", "restartCount": 4, "state": {"waiting": {
        "reason": "CrashLoopBackOff", "message": "back-off"}}, "lastState": {"terminated": {"exitCode": 2}}}]},
    {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]},
    {"initContainerStatuses": [{"name": "exec", "state": {"waiting": {"reason": "ErrImagePull"}}}]},
], ids=["running", "crashloop", "unschedulable", "init-image-pull"])
def test_a_slim_pod_tells_health_and_gpus_what_the_whole_pod_does(status: dict[str, Any]) -> None:
    pod = full_pod(**status)
    slim = slim_pod(pod)
    assert pod_problems(slim) == pod_problems(pod) and pod_problem(slim) == pod_problem(pod)
    assert is_terminating(slim) and is_terminated(slim) == is_terminated(pod)
    assert holds_resources(slim) == holds_resources(pod)
    assert pod_requests(slim["spec"]) == pod_requests(pod["spec"]) == {
        "cpu": Decimal("0.1"), "nvidia.com/gpu": Decimal(1), "amd.com/gpu": Decimal(1)}
    assert pool_gpus(pod["spec"], 1, [slim]) == pool_gpus(pod["spec"], 1, [pod])
    node = {"metadata": {"name": "gpu-nvidia-0"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    assert node_gpus([node], [slim]) == node_gpus([node], [pod])
    assert "managedFields" not in slim["metadata"] and "volumes" not in slim["spec"]
    assert slim["spec"]["containers"] == [{"name": "supernode", "resources": pod["spec"]["containers"][0]["resources"]}]
    assert pod["metadata"]["managedFields"]  # the listing's own object is left as it was
    assert set(slim["status"]) <= {"phase", "conditions", "containerStatuses", "initContainerStatuses"}


@pytest.mark.parametrize("kind, status", [
    ("StatefulSet", {"observedGeneration": 2, "replicas": 3, "readyReplicas": 2, "updatedReplicas": 3,
                     "currentRevision": "a", "updateRevision": "a"}),
    ("StatefulSet", {"observedGeneration": 1}),
    ("DaemonSet", {"observedGeneration": 2, "desiredNumberScheduled": 2, "numberReady": 2,
                   "updatedNumberScheduled": 1}),
    ("Deployment", {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
                    "availableReplicas": 3, "conditions": [{"type": "Progressing", "status": "False",
                                                             "reason": "ProgressDeadlineExceeded"}]}),
], ids=["sts-not-ready", "sts-unobserved", "ds-rolling", "deploy-stalled"])
def test_a_slim_workload_tells_health_and_gpus_what_the_whole_one_does(kind: str, status: dict[str, Any]) -> None:
    template = {"metadata": {"labels": {"app": "x"}, "annotations": {"a": "b" * 300}},
                "spec": {**full_pod()["spec"], "nodeName": None}}
    workload = {
        "kind": kind, "apiVersion": "apps/v1",
        "metadata": {"name": "w", "namespace": "ns", "generation": 2, "labels": {"app": "x"},
                     "annotations": {"deployment.kubernetes.io/revision": "3"},
                     "managedFields": [{"manager": "flower-syncer", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}}, "serviceName": "w",
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
                 "template": template},
        "status": status,
    }
    slim = slim_workload(workload)
    assert workload_health(slim) == workload_health(workload)
    spec = workload["spec"]["template"]["spec"]
    assert pool_gpus(slim["spec"]["template"]["spec"], 3, []) == pool_gpus(spec, 3, [])
    assert slim["spec"]["selector"] == workload["spec"]["selector"]
    assert "managedFields" not in slim["metadata"] and "volumes" not in slim["spec"]["template"]["spec"]
