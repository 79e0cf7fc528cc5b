"""The devcluster is a real control plane: controllers, scheduler, RBAC and server-side apply work.

Pods have no containers behind them; kwok plays the kubelet and marks them Running/Ready.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import wait_until

if TYPE_CHECKING:
    from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

T = TypeVar("T")
IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: there is no container runtime



def pod_template(
    labels: dict[str, str],
    resources: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> client.V1PodTemplateSpec:
    limits = resources or None
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(name="main", image=IMAGE, resources=client.V1ResourceRequirements(limits=limits))
            ],
            node_selector=node_selector,
            termination_grace_period_seconds=0,
        ),
    )


def make_pod(name: str, resources: dict[str, str]) -> client.V1Pod:
    template = pod_template({"app": name}, resources)
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels={"app": name}), spec=template.spec)


def gpu_capacity(node: Any, resource: str) -> int:
    return int((node.status.allocatable or {}).get(resource, "0"))


# ---------------------------------------------------------------------------------------------


def test_cluster_inventory(kube_cluster: KubeCluster) -> None:
    version = client.VersionApi(kube_cluster.api).get_code()
    if kube_cluster.versions:
        assert version.git_version == kube_cluster.versions["kubernetes"]
    nodes = kube_cluster.core.list_node().items
    nvidia = [n for n in nodes if gpu_capacity(n, "nvidia.com/gpu") > 0]
    amd = [n for n in nodes if gpu_capacity(n, "amd.com/gpu") > 0]
    assert len(nvidia) >= 1 and len(amd) >= 1, "expected NVIDIA and AMD GPU nodes"
    for node in nodes:
        labels = node.metadata.labels
        assert labels["kubernetes.io/hostname"] == node.metadata.name
        assert labels["kubernetes.io/os"] == "linux"
        assert "topology.kubernetes.io/zone" in labels
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", f"{node.metadata.name} is not Ready"
    for node in nvidia:
        assert node.metadata.labels["nvidia.com/gpu.count"] == node.status.allocatable["nvidia.com/gpu"]
        assert node.metadata.labels["nvidia.com/gpu.product"]
    if kube_cluster.bin_dir:  # the pinned kubectl talks to the same cluster
        out = kube_cluster.kubectl("get", "nodes", "-o", "name").stdout.split()
        assert sorted(out) == sorted(f"node/{n.metadata.name}" for n in nodes)


def test_namespace_gets_default_serviceaccount_and_root_ca(kube_cluster: KubeCluster, namespace: str) -> None:
    core = kube_cluster.core
    assert core.read_namespaced_service_account("default", namespace).metadata.name == "default"

    def root_ca() -> str | None:
        try:
            data: dict[str, str] = core.read_namespaced_config_map("kube-root-ca.crt", namespace).data
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return data.get("ca.crt")

    assert "BEGIN CERTIFICATE" in wait_until("kube-root-ca.crt configmap", root_ca)


def test_statefulset_becomes_ready_and_scales_down(kube_cluster: KubeCluster, namespace: str) -> None:
    apps, core = kube_cluster.apps, kube_cluster.core
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                cluster_ip="None", selector={"app": "web"}, ports=[client.V1ServicePort(port=80)]
            ),
        ),
    )
    apps.create_namespaced_stateful_set(
        namespace,
        client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1StatefulSetSpec(
                replicas=3,
                service_name="web",
                selector=client.V1LabelSelector(match_labels={"app": "web"}),
                template=pod_template({"app": "web"}, {"cpu": "100m", "memory": "64Mi"}),
            ),
        ),
    )

    def ready_replicas() -> int:
        return apps.read_namespaced_stateful_set_status("web", namespace).status.ready_replicas or 0

    wait_until("3 ready replicas", lambda: ready_replicas() == 3, timeout=45)
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert sorted(p.metadata.name for p in pods) == ["web-0", "web-1", "web-2"]
    assert all(p.spec.node_name and p.status.phase == "Running" for p in pods)

    apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": 1}})
    wait_until(
        "scale down to web-0 only",
        lambda: (
            [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector="app=web").items] == ["web-0"]
        ),
        timeout=45,
    )
    wait_until("1 ready replica", lambda: ready_replicas() == 1)


def test_daemonset_runs_one_pod_per_matching_node(kube_cluster: KubeCluster, namespace: str) -> None:
    apps, core = kube_cluster.apps, kube_cluster.core
    selector = {"nvidia.com/gpu.present": "true"}
    matching = {n.metadata.name for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items}
    assert matching, "no node carries nvidia.com/gpu.present=true"
    apps.create_namespaced_daemon_set(
        namespace,
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="gpu-agent"),
            spec=client.V1DaemonSetSpec(
                selector=client.V1LabelSelector(match_labels={"app": "gpu-agent"}),
                template=pod_template({"app": "gpu-agent"}, node_selector=selector),
            ),
        ),
    )

    def settled() -> bool:
        st = apps.read_namespaced_daemon_set_status("gpu-agent", namespace).status
        return bool(st.desired_number_scheduled == len(matching) and st.number_ready == len(matching))

    wait_until("DaemonSet ready on every GPU node", settled, timeout=45)
    pods = core.list_namespaced_pod(namespace, label_selector="app=gpu-agent").items
    assert sorted(p.spec.node_name for p in pods) == sorted(matching)


def test_gpu_pods_land_only_on_nodes_with_that_gpu(kube_cluster: KubeCluster, namespace: str) -> None:
    core = kube_cluster.core
    core.create_namespaced_pod(namespace, make_pod("nvidia-1", {"nvidia.com/gpu": "1"}))
    core.create_namespaced_pod(namespace, make_pod("amd-1", {"amd.com/gpu": "1"}))

    def running(name: str) -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == "Running" else None

    for pod_name, resource in (("nvidia-1", "nvidia.com/gpu"), ("amd-1", "amd.com/gpu")):
        pod = wait_until(f"{pod_name} Running", functools.partial(running, pod_name))
        node = core.read_node(pod.spec.node_name)
        assert gpu_capacity(node, resource) >= 1, f"{pod_name} landed on {node.metadata.name} without {resource}"


def test_gpu_request_beyond_any_node_stays_pending(kube_cluster: KubeCluster, namespace: str) -> None:
    core = kube_cluster.core
    most = max(gpu_capacity(n, "nvidia.com/gpu") for n in core.list_node().items)
    core.create_namespaced_pod(namespace, make_pod("too-big", {"nvidia.com/gpu": str(most + 1)}))

    def unschedulable() -> Any:
        pod = core.read_namespaced_pod("too-big", namespace)
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                return pod, cond
        return None

    pod, cond = wait_until("PodScheduled=False/Unschedulable", unschedulable)
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert "Insufficient nvidia.com/gpu" in cond.message


def test_server_side_apply_conflict_and_force(kube_cluster: KubeCluster, namespace: str) -> None:
    core = kube_cluster.core

    def apply(manager: str, data: dict[str, str], force: bool = False) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ssa", "namespace": namespace},
            "data": data,
        }
        return core.patch_namespaced_config_map(
            "ssa",
            namespace,
            body,
            field_manager=manager,
            force=force,
            _content_type="application/apply-patch+yaml",
        )

    apply("alice", {"owner": "alice", "shared": "from-alice"})
    with pytest.raises(ApiException) as conflict:
        apply("bob", {"shared": "from-bob"})
    assert conflict.value.status == 409
    assert "alice" in str(conflict.value.body) and ".data.shared" in str(conflict.value.body)

    cm = apply("bob", {"shared": "from-bob"}, force=True)
    assert cm.data == {"owner": "alice", "shared": "from-bob"}
    owned = {m.manager: m.fields_v1["f:data"] for m in cm.metadata.managed_fields if m.operation == "Apply"}
    assert set(owned["bob"]) == {"f:shared"}
    assert set(owned["alice"]) == {"f:owner"}


def test_serviceaccount_rbac_is_namespaced(kube_cluster: KubeCluster, namespace: str) -> None:
    core, rbac = kube_cluster.core, kube_cluster.rbac
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="limited"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="configmaps"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list", "create"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="limited-configmaps"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="configmaps"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="limited", namespace=namespace)],
        ),
    )
    token = core.create_namespaced_service_account_token(
        "limited",
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)),
    ).status.token

    admin_cfg = kube_cluster.api.configuration
    cfg = client.Configuration()
    cfg.host = admin_cfg.host
    cfg.ssl_ca_cert = admin_cfg.ssl_ca_cert
    cfg.verify_ssl = admin_cfg.verify_ssl
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    limited = client.CoreV1Api(client.ApiClient(cfg))

    def allowed_in_own_namespace() -> bool:
        try:
            limited.list_namespaced_config_map(namespace)
        except ApiException as err:
            if err.status == 403:  # the RoleBinding may take a moment to reach the authorizer cache
                return False
            raise
        return True

    wait_until("the RoleBinding to take effect", allowed_in_own_namespace)
    limited.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="mine"), data={"k": "v"})
    )
    for call in (
        lambda: limited.list_namespaced_config_map("default"),
        lambda: limited.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="not-mine"))
        ),
        lambda: limited.list_namespaced_secret(namespace),
    ):
        with pytest.raises(ApiException) as denied:
            call()
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:limited" in str(denied.value.body)
