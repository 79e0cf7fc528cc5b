"""Status assembly, tables and wait_healthy's stop rules, with a scripted stand-in for the cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from syncer.cli import main
from syncer.cluster.client import ApiError, ClusterUnreachable
from syncer.engine.inventory import Condition, Entry, Inventory
from syncer.identity import ANN_SUSPENDED, ObjectRef
from syncer.observe.status import (
    ClusterGPUs,
    StatusReport,
    Target,
    pool_name,
    status,
    unit_from_id,
    unit_status,
)
from syncer.observe.status_tables import format_report
from syncer.observe.wait import wait_healthy
from tests.unit.helpers import render_federation_text
from tests.unit.statuskit import FED, GPU_SEL, REL, REL_LABELS, UNIT_LABELS, Clock, FakeKube, as_kube, fed_objects, sts

# ---------------------------------------------------------------------------------------------
# Assembly


def test_unit_status_names_pools_and_assigns_pods_by_selector() -> None:
    objects = fed_objects(ready=1, pod_problem="CrashLoopBackOff")
    workloads = [o for o in objects if o["kind"] != "Pod"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    st = unit_status(Target(FED, None, "abc", True), workloads, pods)
    assert [p.pool for p in st.pools] == ["superlink", "gpu"]
    superlink, gpu = st.pools
    assert superlink.healthy and superlink.gpus == {} and superlink.problem is None
    assert (gpu.ready, gpu.desired, gpu.healthy) == (1, 2, False)
    assert gpu.problem is not None and gpu.problem.reason == "CrashLoopBackOff"
    assert gpu.problem.example == "fed-supernode-gpu-1" and gpu.problem.total == 2
    assert gpu.gpus["nvidia.com/gpu"].to_dict() == {"requested": 2, "allocated": 2}
    assert not st.ready and st.revision == "abc"
    assert st.gpus["nvidia.com/gpu"].requested == 2
    doc = st.to_dict()
    assert (doc["kind"], doc["namespace"], doc["name"], doc["ready"]) == ("federation", "flower", "fed", False)
    json.dumps(doc)


def test_objects_of_other_units_are_ignored() -> None:
    other = {**UNIT_LABELS, "flower-syncer.io/unit": "other"}
    workloads = [sts("other-supernode-gpu", {**GPU_SEL, **other}, GPU_SEL)]
    workloads[0]["metadata"]["labels"] = {**GPU_SEL, **other}
    st = unit_status(Target(FED), workloads, [])
    assert st.pools == [] and not st.found and not st.ready


def test_expected_workloads_missing_from_the_cluster() -> None:
    rendered = render_federation_text("""\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata: {name: fed}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink: {image: "flwr/superlink:1.25.0"}
  supernodes:
    image: flwr/supernode:1.25.0
    pools:
      - name: gpu
        replicas: 3
        images: {}
        gpu: {enabled: true, vendor: nvidia, count: 2}
""")
    manifests = list(rendered.values())
    workloads = {(m["kind"], m["metadata"]["name"]): m for m in manifests if m["kind"] == "StatefulSet"}
    st = unit_status(Target(FED, dict(workloads)), [], [])
    assert [(p.pool, p.found, p.desired, p.healthy) for p in st.pools] == \
        [("superlink", False, 1, False), ("gpu", False, 3, False)]
    assert st.pools[1].gpus["nvidia.com/gpu"].to_dict() == {"requested": 6, "allocated": 0}
    assert "not in the cluster" in st.pools[1].reason
    assert not st.ready
    # a unit that renders no workload at all has nothing to wait for
    assert unit_status(Target(FED, {}), [], []).ready


def test_pool_names() -> None:
    assert pool_name("federation", {"metadata": {"name": "x", "labels": {
        "app.kubernetes.io/component": "superlink"}}}) == "superlink"
    assert pool_name("federation", {"metadata": {"name": "x", "labels": {
        "app.kubernetes.io/component": "pool-gpu", "flower.flwr.ai/pool": "gpu"}}}) == "gpu"
    assert pool_name("supernode", {"metadata": {"name": "pytorch-flower-client-superexec-clientapp", "labels": {
        "app.kubernetes.io/component": "superexec-clientapp"}}}) == "superexec-clientapp"
    assert pool_name("supernode", {"metadata": {"name": "bare"}}) == "bare"


def test_unit_from_id() -> None:
    assert unit_from_id("supernode/flower/pytorch") == REL
    with pytest.raises(ValueError):
        unit_from_id("job/flower/x")


def test_status_uses_inventories_and_few_requests() -> None:
    inv = Inventory(FED, {ObjectRef("StatefulSet", "flower", "fed-superlink"): Entry("a", "b"),
                          ObjectRef("StatefulSet", "flower", "fed-supernode-gpu"): Entry("a", "b"),
                          ObjectRef("Service", "flower", "fed-superlink"): Entry("a", "b")}, revision="deadbeef")
    fake = FakeKube(fed_objects, inventories=[inv.manifest()])
    report = status(as_kube(fake), None)
    assert [u.unit for u in report.units] == ["federation/flower/fed"]
    assert report.units[0].revision == "deadbeef" and report.ready
    assert fake.calls == [("ConfigMap", None), ("DaemonSet", "flower"), ("StatefulSet", "flower"),
                          ("Pod", "flower"), ("Node", None), ("Pod", None),
                          ("FlowerUnit", "flower")]  # a federation's Flower-level health, as the agent recorded it
    assert report.gpus is not None
    assert [(n.node, n.used) for n in report.gpus.nodes] == [("gpu-nvidia-0", 1), ("gpu-nvidia-1", 1)]
    assert status(as_kube(fake), None, selectors=["nope"]).units == []


# ---------------------------------------------------------------------------------------------
# Tables


def test_table() -> None:
    objects = fed_objects(ready=1, pod_problem="Unschedulable")
    st = unit_status(Target(FED, None, "0123456789abcdef", True), [o for o in objects if o["kind"] != "Pod"],
                     [o for o in objects if o["kind"] == "Pod"])
    st.drift = 2
    report = StatusReport([st], ClusterGPUs(error="cannot read nodes: forbidden"))
    lines = format_report(report).splitlines()
    assert lines[0].split() == ["UNIT", "SYNCED", "HEALTH", "POOL", "KIND", "READY", "CONNECTED", "GPUS", "DRIFT",
                                 "SUSPENDED", "REVISION", "MESSAGE"]
    gpu = lines[2]
    assert gpu.startswith("federation/flower/fed")
    assert "nvidia.com/gpu 1/2" in gpu and "0123456789ab " in gpu and " 2 " in gpu
    assert "Unschedulable (1/2 pods, e.g. fed-supernode-gpu-1): 0/7 nodes are available" in gpu
    assert lines[1].split()[1:6] == ["Pending", "Degraded", "superlink", "StatefulSet", "1/1"]
    assert lines[1].endswith("Pending: no sync recorded yet")  # its inventory records no sync
    assert lines[-1] == "GPUs: cannot read nodes: forbidden"
    assert format_report(StatusReport()).startswith("no units")


def test_table_says_why_the_last_sync_failed_and_whether_suspended() -> None:
    objects = fed_objects(ready=2)
    failing = Condition(False, "ConfigError", "federations/fed.yaml:12:5: error: spec.mode: ...")
    st = unit_status(Target(FED, None, "0123456789abcdef", True, True, failing),
                     [o for o in objects if o["kind"] != "Pod"], [o for o in objects if o["kind"] == "Pod"])
    lines = format_report(StatusReport([st])).splitlines()
    first = lines[1].split()
    assert first[9] == "yes"  # SUSPENDED
    assert first[1:3] == ["ConfigError", "Healthy"]
    assert lines[1].endswith("ConfigError: federations/fed.yaml:12:5: error: spec.mode: ...")
    assert st.to_dict()["suspended"] is True
    # the pods are fine, the unit is not: the JSON's `ready` says what its conditions say
    assert st.to_dict()["ready"] is False and StatusReport([st]).to_dict()["ready"] is False
    assert st.to_dict()["conditions"] == [
        {"type": "Synced", "status": "False", "reason": "ConfigError", "message": failing.message},
        {"type": "Healthy", "status": "True", "reason": "Healthy", "message": "2 workload(s) ready"}]
    assert st.to_dict()["inventoryCondition"]["reason"] == "ConfigError"
    assert format_report(StatusReport([st]), headers=False).splitlines()[0].startswith("federation/flower/fed ")


def test_a_federations_superlink_health_as_the_agent_recorded_it() -> None:
    """CONNECTED and `flower` in `-o json` come from the FlowerUnit the agent writes; with pods
    ready, the Flower-level condition it recorded makes the unit Degraded, with its reason first."""
    objects = fed_objects(ready=2)
    synced = Condition(True, "Synced", "applied")
    st = unit_status(Target(FED, None, "0123456789abcdef", True, False, synced),
                     [o for o in objects if o["kind"] != "Pod"], [o for o in objects if o["kind"] == "Pod"])
    assert st.ready and st.connected == "-" and st.to_dict()["flower"] is None
    pools = [{"unit": FED.id, "pool": "gpu", "cluster": "", "expected": 2, "online": 1, "offline": 1,
              "registered": 0, "matchedBy": "count"}]
    st.flower = {"reachable": True, "error": "", "code": "", "address": "fed-superlink.flower.svc:9093",
                 "checkedAt": "2026-11-26T09:00:00Z", "supernodes": {"expected": 2, "online": 1, "pools": pools},
                 "runs": {}, "condition": {"reason": "Degraded", "message": "pods ready but SuperNodes not connected"}}
    assert st.connected == "1/2"
    state = st.to_dict()
    assert state["health"] == "Degraded" and state["ready"] is False and "condition" not in state["flower"]
    row = format_report(StatusReport([st])).splitlines()[1]
    assert row.split()[6] == "1/2" and "Degraded: pods ready but SuperNodes not connected" in row
    st.flower = {**st.flower, "reachable": False, "condition": {"reason": "Bogus", "message": "x"}}
    assert st.connected == "-" and st.to_dict()["health"] == "Healthy"  # a reason outside the fixed set: ignored


# ---------------------------------------------------------------------------------------------
# wait_healthy


def test_wait_returns_when_ready() -> None:
    polls = iter([fed_objects(ready=0), fed_objects(ready=1), fed_objects(ready=2)])
    current: list[list[dict[str, Any]]] = [next(polls)]

    def objects() -> list[dict[str, Any]]:
        return current[0]

    clock = Clock()
    messages: list[str] = []

    def sleep(s: float) -> None:
        clock.sleep(s)
        current[0] = next(polls, current[0])

    result = wait_healthy(as_kube(FakeKube(objects)), [FED], 60, messages.append, clock=clock, sleep=sleep)
    assert result.healthy and result.reason == ""
    assert clock.now == 2.0
    assert messages[0].startswith("waiting for 1/1 unit(s) [0s]: federation/flower/fed gpu 0/2")


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "CrashLoopBackOff", "Unschedulable"])
def test_wait_gives_up_when_a_terminal_problem_persists(reason: str) -> None:
    clock = Clock()
    fake = FakeKube(lambda: fed_objects(ready=1, pod_problem=reason))
    result = wait_healthy(as_kube(fake), [FED], 300, clock=clock, sleep=clock.sleep)
    assert not result.healthy
    assert reason in result.reason and "federation/flower/fed gpu" in result.reason
    assert 10 < clock.now <= 12
    assert result.statuses[0].pools[1].problem is not None


def test_wait_restarts_the_clock_when_a_problem_clears() -> None:
    clock = Clock()

    def objects() -> list[dict[str, Any]]:
        # ImagePullBackOff for 8 s, gone for a second, back: gives up 10 s after it came back
        flaky = clock.now < 8 or clock.now >= 9
        return fed_objects(ready=1, pod_problem="ImagePullBackOff" if flaky else "")

    result = wait_healthy(as_kube(FakeKube(objects)), [FED], 300, clock=clock, sleep=clock.sleep)
    assert not result.healthy and 19 < clock.now <= 21


def test_wait_keeps_waiting_on_unschedulable_while_pods_terminate() -> None:
    clock = Clock()
    fake = FakeKube(lambda: fed_objects(ready=1, pod_problem="Unschedulable", deleting=True))
    result = wait_healthy(as_kube(fake), [FED], 30, clock=clock, sleep=clock.sleep)
    assert not result.healthy and result.reason.startswith("timed out after 30s")
    assert "gpu 1/2: Unschedulable" in result.reason


def test_wait_retries_an_unreachable_cluster_until_the_timeout() -> None:
    clock = Clock()
    fake = FakeKube(fed_objects)
    fake.fail = ClusterUnreachable("connection refused")
    result = wait_healthy(as_kube(fake), [FED], 5, clock=clock, sleep=clock.sleep)
    assert not result.healthy and "connection refused" in result.reason and clock.now == 5
    assert len(fake.calls) == 6


def test_wait_stops_at_once_when_the_server_refuses() -> None:
    clock = Clock()
    fake = FakeKube(fed_objects)
    fake.fail = ApiError(403, "Forbidden", "pods is forbidden")
    result = wait_healthy(as_kube(fake), [FED], 60, clock=clock, sleep=clock.sleep)
    assert not result.healthy and "forbidden" in result.reason and clock.now == 0


def test_wait_stops_on_progress_deadline_exceeded() -> None:
    dep = {"kind": "Deployment", "metadata": {"name": "pytorch-flower-client-supernode", "namespace": "flower",
                                              "generation": 3, "labels": {
                                                  **REL_LABELS, "app.kubernetes.io/component": "supernode"}},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/component": "supernode"}}},
           "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1,
                      "availableReplicas": 1, "conditions": [{"type": "Progressing", "status": "False",
                                                              "reason": "ProgressDeadlineExceeded",
                                                              "message": "timed out progressing"}]}}
    clock = Clock()
    result = wait_healthy(as_kube(FakeKube(lambda: [dep])), [REL], 60, clock=clock, sleep=clock.sleep)
    assert not result.healthy and "progress deadline exceeded" in result.reason and clock.now == 0
    assert result.statuses[0].pools[0].pool == "supernode"


# ---------------------------------------------------------------------------------------------
# CLI without a cluster


def test_status_command_cluster_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1",
                                                     "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "u"}}],
    }))
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 3
    assert "cannot reach" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "missing"), "--kubeconfig", str(kubeconfig)]) == 2


# ---------------------------------------------------------------------------------------------
# `status`'s exit code follows the units' state (the README's exit-code table)


SYNCED = Condition(True, "Synced", "in sync with Git")


@pytest.mark.parametrize(("ready", "condition", "suspended", "state", "code"), [
    (2, SYNCED, False, ("Synced", "Healthy"), 0),
    (2, Condition(False, "ConfigError", "federations/fed.yaml:12:5: error: spec.mode: ..."), False,
     ("ConfigError", "Healthy"), 1),
    (2, Condition(False, "SyncFailed", "1 object(s) failed: StatefulSet/flower/fed-superlink"), False,
     ("SyncFailed", "Healthy"), 1),
    (2, Condition(False, "Conflict", "1 object(s) have fields another manager owns"), False,
     ("Conflict", "Healthy"), 1),
    (2, SYNCED, True, ("Suspended", "Healthy"), 1),
    (2, None, False, ("Pending", "Healthy"), 1),  # never synced
    (1, SYNCED, False, ("Synced", "Progressing"), 1),  # a pod not ready yet
])
def test_status_exit_code_follows_synced_and_healthy(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], ready: int,
                                                     condition: Condition | None, suspended: bool,
                                                     state: tuple[str, str], code: int) -> None:
    import syncer.cli

    inv = Inventory(FED, {ObjectRef("StatefulSet", "flower", "fed-superlink"): Entry("a", "b"),
                          ObjectRef("StatefulSet", "flower", "fed-supernode-gpu"): Entry("a", "b")},
                    revision="deadbeef", condition=condition)
    manifest = inv.manifest()
    if suspended:  # as `flower-syncer suspend` marks it (the engine never writes it)
        manifest["metadata"].setdefault("annotations", {})[ANN_SUSPENDED] = "true"
    fake = FakeKube(lambda: fed_objects(ready=ready), inventories=[manifest])
    monkeypatch.setattr(syncer.cli, "_connect", lambda _args: as_kube(fake))
    assert main(["status", "--kubeconfig", "/nonexistent"]) == code
    header, first = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[:3] == ["UNIT", "SYNCED", "HEALTH"] and first.split()[1:3] == list(state)
    assert main(["status", "--kubeconfig", "/nonexistent", "-o", "json"]) == code
    doc = json.loads(capsys.readouterr().out)
    [unit] = doc["units"]
    assert (unit["synced"], unit["health"]) == state
    assert [c["reason"] for c in unit["conditions"]] == list(state)
    assert doc["ready"] is unit["ready"] is (code == 0)  # the JSON never contradicts the conditions
    assert main(["status", "--kubeconfig", "/nonexistent", "--no-headers"]) == code
    rows = capsys.readouterr().out.splitlines()
    assert rows and all(row.startswith("federation/flower/fed ") for row in rows)  # rows only
