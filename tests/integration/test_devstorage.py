"""The devcluster's volumes (tools/devstorage.py): a default StorageClass `standard` that binds a
claim once its pod is scheduled, a directory per volume, deleted with the claim."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kubernetes import client

from tests.conftest import wait_until

if TYPE_CHECKING:
    from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


def test_a_claim_is_bound_to_a_directory_on_its_pods_node_and_deleted_with_it(kube_cluster: KubeCluster,
                                                                             namespace: str) -> None:
    storage = client.StorageV1Api(kube_cluster.api)
    klass = storage.read_storage_class("standard")
    assert klass.volume_binding_mode == "WaitForFirstConsumer"
    assert (klass.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    core = kube_cluster.core
    core.create_namespaced_persistent_volume_claim(namespace, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="data"),
        spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                                resources=client.V1VolumeResourceRequirements(
                                                    requests={"storage": "64Mi"}))))
    claim = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert claim.spec.storage_class_name == "standard"  # the default class
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="user"),
        spec=client.V1PodSpec(termination_grace_period_seconds=0, containers=[client.V1Container(
            name="main", image="registry.k8s.io/pause:3.10",
            volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")])],
            volumes=[client.V1Volume(name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name="data"))])))
    wait_until("the claim bound", lambda: core.read_namespaced_persistent_volume_claim(
        "data", namespace).status.phase == "Bound", timeout=60)
    claim = core.read_namespaced_persistent_volume_claim("data", namespace)
    volume = core.read_persistent_volume(claim.spec.volume_name)
    path = Path(volume.spec.host_path.path)
    assert path.parent == Path(kube_cluster.kubeconfig).parent / "volumes" and path.is_dir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o777  # writable by the Flower images' uid 49999
    wait_until("the pod scheduled", lambda: bool(core.read_namespaced_pod("user", namespace).spec.node_name),
               timeout=60)
    node = core.read_namespaced_pod("user", namespace).spec.node_name
    term = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0]
    assert (term.key, term.values) == ("kubernetes.io/hostname", [node])
    core.delete_namespaced_pod("user", namespace, grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", namespace)

    def gone() -> bool:
        try:
            core.read_persistent_volume(volume.metadata.name)
        except client.exceptions.ApiException as exc:
            return exc.status == 404 and not path.exists()
        return False

    wait_until("the volume and its directory deleted", gone, timeout=60)
