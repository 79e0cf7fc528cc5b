"""Status, readiness and GPU accounting against the local control plane (kwok nodes: 4 CPU nodes,
gpu-nvidia-0/1 with 4 nvidia.com/gpu each, gpu-amd-0 with 2 amd.com/gpu).

Federations are rendered with the real renderer and applied with `Kube.apply`. Other tests may
place GPU pods at the same time, so node figures are checked against what this test's namespace
placed, never as absolute numbers.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TypeVar

import pytest

from syncer.cli import main
from syncer.cluster.client import Kube
from syncer.identity import Manifest, Unit
from syncer.models.base import validate_document
from syncer.models.federation import Federation
from syncer.observe.health import NO_NODE_REASON, node_gpus
from syncer.observe.status import PoolStatus, StatusReport, UnitStatus, status
from syncer.observe.wait import wait_healthy
from syncer.render.common import RenderContext, sort_manifests
from syncer.render.federation import render_federation
from syncer.yamldoc import load_documents
from tests.builders import federation
from tests.conftest import KubeCluster, wait_until

pytestmark = pytest.mark.cluster

T = TypeVar("T")
NVIDIA_NODES = {"gpu-nvidia-0", "gpu-nvidia-1"}



def gpu_pool(name: str, replicas: int, count: int, vendor: str = "nvidia") -> str:
    return (f"      - name: {name}\n        replicas: {replicas}\n        images: {{}}\n"
            f"        gpu: {{enabled: true, vendor: {vendor}, resourceName: {vendor}.com/gpu, count: {count}}}\n"
            f"        podTemplate:\n          spec:\n            nodeSelector:\n"
            f"              {vendor}.com/gpu.present: \"true\"\n")


def plain_pool(name: str, replicas: int | None = None, node_selector: str = "") -> str:
    text = f"      - name: {name}\n        images: {{}}\n"
    if replicas is not None:
        text += f"        replicas: {replicas}\n"
    if node_selector:
        text += f"        podTemplate:\n          spec:\n            nodeSelector: {node_selector}\n"
    return text


def render(namespace: str, name: str, pools: str, mode: str = "StatefulSet") -> tuple[Unit, list[Manifest]]:
    docs, diags = load_documents(federation(name, pools, mode=mode), f"federations/{name}.yaml")
    assert docs, diags
    model, problems = validate_document(Federation, docs[0])
    assert model is not None, [p.render() for p in problems]
    unit = Unit("federation", namespace, name)
    return unit, sort_manifests(render_federation(model, RenderContext(unit, f"federations/{name}.yaml")))


def apply_all(kube: Kube, manifests: list[Manifest]) -> None:
    for m in manifests:
        kube.apply(m)



def pool_of(report: StatusReport, pool: str) -> PoolStatus:
    assert len(report.units) == 1, report.to_dict()
    return next(p for p in report.units[0].pools if p.pool == pool)



def test_gpu_pool_lands_on_nvidia_nodes_and_is_accounted(kube: Kube, namespace: str) -> None:
    unit, manifests = render(namespace, "gpufed", gpu_pool("gpu", 2, 1))
    apply_all(kube, manifests)
    result = wait_healthy(kube, {unit: manifests}, timeout=60)
    assert result.healthy, result.reason

    report = status(kube, {unit: manifests})
    unit_status = report.units[0]
    assert unit_status.ready and unit_status.unit == f"federation/{namespace}/gpufed"
    assert [p.pool for p in unit_status.pools] == ["superlink", "gpu"]
    gpu = pool_of(report, "gpu")
    assert (gpu.kind, gpu.name, gpu.ready, gpu.desired, gpu.healthy) == \
        ("StatefulSet", "gpufed-supernode-gpu", 2, 2, True)
    assert gpu.gpus["nvidia.com/gpu"].to_dict() == {"requested": 2, "allocated": 2}
    assert gpu.problem is None
    assert pool_of(report, "superlink").gpus == {}

    pods, _ = kube.list("Pod", namespace, labels="flower.flwr.ai/pool=gpu")
    mine = Counter(p["spec"]["nodeName"] for p in pods)
    assert sum(mine.values()) == 2 and set(mine) <= NVIDIA_NODES
    # the cluster table counts at least our pods on each node (others may add their own)
    assert report.gpus is not None and not report.gpus.error
    table = {(n.node, n.resource): n for n in report.gpus.nodes}
    for node, n in mine.items():
        row = table[(node, "nvidia.com/gpu")]
        assert row.allocatable == 4
        assert n <= row.used <= row.allocatable
        assert row.free == row.allocatable - row.used
    # and exactly our pods when only our namespace's pods are counted
    nodes, _ = kube.list("Node")
    ours = {(n.node, n.resource): n.used for n in node_gpus(nodes, pods) if n.used}
    assert ours == {(node, "nvidia.com/gpu"): n for node, n in mine.items()}
    assert json.loads(json.dumps(report.to_dict()))["units"][0]["pools"][1]["gpus"] == \
        {"nvidia.com/gpu": {"requested": 2, "allocated": 2}}


def test_the_agents_watch_fed_status_reports_what_a_listing_does(kube: Kube, namespace: str) -> None:
    """The agent's StatusCache (watches, real API server) against `status` (LISTs): the same unit
    report once the pods settle, changes seen by the watches alone, and the GPU table the same
    whenever nothing else moves in between."""
    import threading

    from syncer.engine.live import LiveState
    from syncer.observe.status import targets_from
    from syncer.observe.status_cache import StatusCache

    unit, manifests = render(namespace, "watched", gpu_pool("gpu", 2, 1) + plain_pool("cpu", 1))
    apply_all(kube, manifests)
    assert wait_healthy(kube, {unit: manifests}, timeout=60).healthy
    stop = threading.Event()
    cache = StatusCache(kube, namespaces=[namespace])
    cache.start(stop)
    try:
        assert cache.synced.wait(30)
        targets = targets_from({unit: manifests}, LiveState())

        def same() -> bool:
            listed, watched = status(kube, {unit: manifests}), cache.report(targets)
            return listed.units[0].to_dict() == watched.units[0].to_dict() and \
                listed.gpus is not None and watched.gpus is not None and listed.gpus.nodes == watched.gpus.nodes

        wait_until("the watched report to equal the listed one", same, timeout=30)
        lists = kube.counts["GET"]
        watches = kube.counts["WATCH"]
        scaled = next(m for m in manifests if m["kind"] == "StatefulSet"
                      and m["metadata"]["name"] == "watched-supernode-gpu")
        kube.apply({**scaled, "spec": {**scaled["spec"], "replicas": 3}})
        wait_until("the third GPU pod seen by the watches", lambda: (
            pool_of(cache.report(targets), "gpu").gpus["nvidia.com/gpu"].allocated == 3), timeout=60)
        assert kube.counts["GET"] == lists, "the cache followed the change without a LIST"
        assert kube.counts["WATCH"] >= watches
        wait_until("the watched report to equal the listed one after scaling", same, timeout=30)
    finally:
        stop.set()


def test_status_reads_with_one_list_per_kind_and_namespace(kube: Kube, namespace: str) -> None:
    unit, manifests = render(namespace, "fed", plain_pool("a", 2) + plain_pool("b", 2) + plain_pool("c", 1))
    apply_all(kube, manifests)
    before = kube.counts["GET"]
    report = status(kube, [unit], nodes=False)
    # the inventory ConfigMaps, StatefulSets, DaemonSets and Pods of the namespace, and its
    # FlowerUnits (a federation's Flower-level health, as the agent records it): 5 LISTs, 4 pools
    assert kube.counts["GET"] - before == 5
    assert [p.pool for p in report.units[0].pools] == ["superlink", "a", "b", "c"]
    before = kube.counts["GET"]
    status(kube, [unit], nodes=True)
    assert kube.counts["GET"] - before == 7  # + the nodes and the bound pods, once each


def test_pool_asking_for_more_gpus_than_exist_is_unschedulable(kube: Kube, namespace: str) -> None:
    # 3 pods x 4 GPUs, only two nodes with 4 each: at least one pod cannot be placed
    unit, manifests = render(namespace, "greedy", gpu_pool("big", 3, 4))
    try:
        apply_all(kube, manifests)

        def unschedulable() -> PoolStatus | None:
            p = pool_of(status(kube, {unit: manifests}, nodes=False), "big")
            return p if p.problem is not None and p.problem.reason == "Unschedulable" else None

        start = time.monotonic()
        big = wait_until("the Unschedulable problem", unschedulable, timeout=60)
        seen_after = time.monotonic() - start
        assert big.problem is not None
        assert "Insufficient nvidia.com/gpu" in big.problem.message
        assert big.problem.pods >= 1 and big.problem.example.startswith("greedy-supernode-big-")
        assert not big.healthy and big.ready < 3
        assert big.gpus["nvidia.com/gpu"].requested == 12
        assert big.gpus["nvidia.com/gpu"].allocated <= 8
        assert "Unschedulable" in str(big.problem)
        assert seen_after < 30

        # waiting gives up once the problem persisted, long before the timeout
        messages: list[str] = []
        start = time.monotonic()
        result = wait_healthy(kube, {unit: manifests}, timeout=120, progress=messages.append, persist=2)
        assert not result.healthy
        assert "Unschedulable" in result.reason and "big" in result.reason
        assert time.monotonic() - start < 30
        assert not result.statuses[0].ready
    finally:
        kube.delete("StatefulSet", namespace, "greedy-supernode-big")  # give the GPUs back at once


def test_daemonset_matching_no_node_is_not_ready(kube: Kube, namespace: str) -> None:
    unit, manifests = render(namespace, "edge", plain_pool("nowhere", None, "{flower-syncer.dev/absent: \"yes\"}"),
                             mode="DaemonSet")
    apply_all(kube, manifests)

    def observed() -> PoolStatus | None:
        p = pool_of(status(kube, {unit: manifests}, nodes=False), "nowhere")
        return p if p.reason == NO_NODE_REASON else None

    pool = wait_until("the DaemonSet to be observed", observed, timeout=30)
    assert (pool.kind, pool.desired, pool.ready, pool.healthy) == ("DaemonSet", 0, 0, False)
    report = status(kube, {unit: manifests}, nodes=False)
    assert pool_of(report, "superlink").kind == "StatefulSet"
    assert not report.units[0].ready and not report.ready


def test_three_replica_statefulset_becomes_ready(kube: Kube, namespace: str) -> None:
    unit, manifests = render(namespace, "trio", plain_pool("a", 3))
    apply_all(kube, manifests)
    messages: list[str] = []
    result = wait_healthy(kube, {unit: manifests}, timeout=90, progress=messages.append)
    assert result.healthy, result.reason
    assert result.reason == ""
    st: UnitStatus = result.statuses[0]
    a = next(p for p in st.pools if p.pool == "a")
    assert (a.ready, a.desired, a.updated, a.rolling_out, a.healthy) == (3, 3, 3, False, True)
    sts = kube.get("StatefulSet", namespace, "trio-supernode-a")
    assert sts is not None and sts["status"]["readyReplicas"] == 3


def test_wait_for_a_unit_that_never_appears_times_out(kube: Kube, namespace: str) -> None:
    unit, manifests = render(namespace, "ghost", plain_pool("a", 1))
    start = time.monotonic()
    result = wait_healthy(kube, {unit: manifests}, timeout=2)
    assert not result.healthy
    assert result.reason.startswith("timed out after 2s")
    assert "not in the cluster" in result.reason
    assert time.monotonic() - start < 10


# ---------------------------------------------------------------------------------------------
# The CLI


@pytest.fixture
def repo(tmp_path: Path, namespace: str) -> Path:
    # the GPU pool asks for an AMD GPU: the NVIDIA tests above may hold every NVIDIA GPU for a moment
    root = tmp_path / "repo"
    (root / "federations").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"defaultNamespace: {namespace}\n")
    (root / "federations" / "clifed.yaml").write_text(
        federation("clifed", plain_pool("a", 2) + gpu_pool("gpu", 1, 1, vendor="amd")))
    return root


def test_status_command(kube_cluster: KubeCluster, kube: Kube, namespace: str, repo: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    unit_id = f"federation/{namespace}/clifed"
    # --unit everywhere: other tests' units in the shared cluster are not in this repository, and
    # an unselected sync would prune them (and status would count them as drift)
    kc = ["--kubeconfig", kube_cluster.kubeconfig, "--unit", unit_id]
    # before the sync: not ready, everything drifts
    assert main(["status", str(repo), *kc]) == 1
    out = capsys.readouterr().out
    assert "not in the cluster" in out

    assert main(["sync", str(repo), *kc, "--revision", "rev-1234", "--wait", "--timeout", "90s"]) == 0
    capsys.readouterr()

    assert main(["status", str(repo), *kc, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ready"] and not doc["drifted"]
    [unit] = doc["units"]
    assert (unit["ready"], unit["synced"], unit["health"]) == (True, "Synced", "Healthy")
    assert (unit["unit"], unit["revision"], unit["drift"]) == (unit_id, "rev-1234", 0)
    assert {p["pool"]: (p["ready"], p["desired"]) for p in unit["pools"]} == \
        {"superlink": (1, 1), "a": (2, 2), "gpu": (1, 1)}
    assert unit["gpus"] == {"amd.com/gpu": {"requested": 1, "allocated": 1}}
    assert {n["resource"] for n in doc["gpus"]["nodes"]} >= {"nvidia.com/gpu", "amd.com/gpu"}

    # without DIR: the units come from the inventories in the cluster
    assert main(["status", *kc]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["UNIT", "SYNCED", "HEALTH", "POOL", "KIND", "READY", "CONNECTED", "GPUS", "DRIFT",
                                 "SUSPENDED", "REVISION", "MESSAGE"]
    gpu_row = next(line for line in lines if line.startswith(unit_id) and " gpu " in line)
    assert gpu_row.split()[1:3] == ["Synced", "Healthy"]
    assert "amd.com/gpu 1/1" in gpu_row and "rev-1234" in gpu_row and "1/1" in gpu_row
    assert any(line.split()[:4] == ["NODE", "RESOURCE", "ALLOCATABLE", "USED"] for line in lines)
    assert any(line.startswith("gpu-nvidia-0") for line in lines)

    # someone deletes an object: drift, exit 1
    assert kube.delete("Service", namespace, "clifed-supernode-a")
    assert main(["status", str(repo), *kc, "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["drifted"] and doc["units"][0]["drift"] == 1

    assert main(["status", "--unit", f"federation/{namespace}/nope", "--kubeconfig", kube_cluster.kubeconfig]) == 1
    assert "no unit in the cluster matches" in capsys.readouterr().err

