"""A DaemonSet pool's canary against a real API server and DaemonSet controller (kwok nodes run its
pods and make them Ready): a change reaches exactly the canary node's pod (`OnDelete`, the pod
deleted), the rest keep the old `controller-revision-hash`; a canary that never becomes Ready (a
CPU request no node has room for: Pending) fails at its deadline while the rest stays old and
Ready; the fixing commit replaces the broken canary pod, passes the gate and the controller rolls
the rest (`RollingUpdate`); then an unchanged repository writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.client import Kube
from syncer.engine.canary import Step
from syncer.engine.changeset import Cause, UnitResult
from syncer.engine.sync import Engine
from syncer.identity import ANN_CANARY_NODES
from tests import builders
from tests.conftest import pod_ready, wait_until
from tests.integration.canaries import sync_unit, until_canary_failed

pytestmark = pytest.mark.cluster

DS = "fed-supernode-a"
ANNOTATIONS = ('"flower-syncer.io/canary": "1", "flower-syncer.io/canary-gate": "3s", '
               '"flower-syncer.io/canary-deadline": "25s"')
CLASS = "devcluster.flower-syncer.dev/node-class"


def _write(repo: Path, namespace: str, *, image: str = "1.25.0", cpu: str = "") -> None:
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    extra = f"        podTemplate:\n          spec:\n            nodeSelector: {{{CLASS}: cpu}}\n"
    if cpu:
        extra += f"        supernodeResources:\n          requests:\n            cpu: \"{cpu}\"\n"
    pool = f"      - name: a\n        images: {{}}\n{extra}"
    text = builders.federation("fed", pool, ANNOTATIONS, mode="DaemonSet")
    (repo / "federations" / "fed.yaml").write_text(text.replace("supernode:1.25.0", f"supernode:{image}"))


def _pods(kube: Kube, namespace: str) -> dict[str, tuple[str, bool]]:
    """Each node's pod of the pool: (its controller-revision-hash, Ready)."""
    items, _ = kube.list("Pod", namespace, labels="flower.flwr.ai/pool=a")
    out = {}
    for p in items:
        if p["metadata"].get("deletionTimestamp"):
            continue
        node = p["spec"].get("nodeName") or next(
            f["values"][0] for t in p["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            for f in t.get("matchFields") or [] if f["key"] == "metadata.name")
        ready = pod_ready(p)
        out[node] = (p["metadata"]["labels"]["controller-revision-hash"], ready)
    return out


def _ds(kube: Kube, namespace: str) -> Any:
    return kube.get("DaemonSet", namespace, DS)


def test_a_daemonset_canary_fails_leaving_the_rest_old_and_the_fix_rolls_the_pool(kube: Kube, namespace: str,
                                                                                  tmp_path: Path) -> None:
    nodes, _ = kube.list("Node", None, labels=f"{CLASS}=cpu")
    if len(nodes) < 2:
        pytest.skip("needs 2 or more kwok CPU nodes (the default devcluster has 4)")
    names = sorted(n["metadata"]["name"] for n in nodes)
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        before = wait_until("the pool Ready on every CPU node", lambda: (pods := _pods(kube, namespace))
                            and sorted(pods) == names and all(r for _, r in pods.values()) and pods, timeout=60)
        old = before[names[0]][0]
        assert {rev for rev, _ in before.values()} == {old}

        _write(repo, namespace, image="1.26.0", cpu="1000")  # no node has room: the canary stays Pending
        started = sync_unit(engine, repo)
        assert started.ok and [n.step for n in started.canaries] == [Step.STARTED], started.to_dict()
        ds = _ds(kube, namespace)
        assert ds["spec"]["updateStrategy"]["type"] == "OnDelete"
        assert ds["metadata"]["annotations"][ANN_CANARY_NODES] == names[0]

        result = until_canary_failed(engine, repo)
        [change] = result.failures()
        assert change.cause is Cause.CANARY_FAILED and "not Ready within its deadline" in change.message
        pods = _pods(kube, namespace)
        assert pods[names[0]][0] != old and not pods[names[0]][1]  # exactly the canary took the bad change
        assert all(pods[n] == (old, True) for n in names[1:]), pods  # the rest: the old revision, Ready
        assert _ds(kube, namespace)["spec"]["updateStrategy"]["type"] == "OnDelete"

        _write(repo, namespace, image="1.26.0")  # the fix
        fixed = sync_unit(engine, repo)
        assert fixed.ok and [n.step for n in fixed.canaries] == [Step.STARTED], fixed.to_dict()

        def passed() -> UnitResult | None:
            result = sync_unit(engine, repo)
            assert result.ok, result.to_dict()
            pods = _pods(kube, namespace)
            assert all(pods[n][0] == old for n in names[1:] if n in pods) or any(
                n.step is Step.PASSED for n in result.canaries), pods  # the rest waits for the gate
            return result if any(n.step is Step.PASSED for n in result.canaries) else None
        wait_until("the fixed canary to pass its gate", passed, timeout=90, interval=1)
        assert _ds(kube, namespace)["spec"]["updateStrategy"]["type"] == "RollingUpdate"

        def rolled() -> bool:
            pods = _pods(kube, namespace)
            revisions = {rev for rev, _ in pods.values()}
            return (sorted(pods) == names and len(revisions) == 1 and old not in revisions
                    and all(ready for _, ready in pods.values()))
        wait_until("the whole pool on the new revision", rolled, timeout=120, interval=0.5)
        writes = kube.writes
        done = sync_unit(engine, repo)
        assert done.ok and not done.canaries and kube.writes == writes, done.to_dict()  # zero writes
    finally:
        engine.close()


def test_removing_the_canary_rolls_the_rest_of_the_daemonset_at_once(kube: Kube, namespace: str,
                                                                    tmp_path: Path) -> None:
    nodes, _ = kube.list("Node", None, labels=f"{CLASS}=cpu")
    if len(nodes) < 2:
        pytest.skip("needs 2 or more kwok CPU nodes (the default devcluster has 4)")
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        wait_until("the pool Ready", lambda: (pods := _pods(kube, namespace)) and len(pods) == len(nodes)
                   and all(r for _, r in pods.values()), timeout=60)
        _write(repo, namespace, image="1.26.0")
        assert [n.step for n in sync_unit(engine, repo).canaries] == [Step.STARTED]
        assert _ds(kube, namespace)["spec"]["updateStrategy"]["type"] == "OnDelete"
        text = (repo / "federations" / "fed.yaml").read_text()
        (repo / "federations" / "fed.yaml").write_text(text.replace(ANNOTATIONS, ""))
        assert sync_unit(engine, repo).ok
        ds = _ds(kube, namespace)  # the field is no longer Git's: it falls back to the default, RollingUpdate
        assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
        assert ANN_CANARY_NODES not in ds["metadata"].get("annotations", {})

        def rolled() -> bool:
            pods = _pods(kube, namespace)
            return len(pods) == len(nodes) and len({rev for rev, _ in pods.values()}) == 1
        wait_until("the whole pool on one revision", rolled, timeout=120, interval=0.5)
    finally:
        engine.close()
