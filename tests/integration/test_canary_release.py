"""A SuperNode release's canary against a real API server and Deployment controller (kwok nodes
make pods Ready): the braked Deployment (`maxSurge: 0, maxUnavailable: 1`, `minReadySeconds` of 68
years) runs exactly one pod on the new template; a canary that never becomes Ready (a CPU request
no node has room for) fails at its deadline with the other two on the old `pod-template-hash` and
Ready; the fix replaces the broken pod (the controller scales its ReplicaSet down), passes the
gate, and the controller rolls the rest; then an unchanged repository writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.client import Kube
from syncer.engine.canary import BRAKE, Step
from syncer.engine.changeset import Cause, UnitResult
from syncer.engine.sync import Engine
from tests.conftest import pod_ready, wait_until
from tests.integration.canaries import sync_unit, until_canary_failed

pytestmark = pytest.mark.cluster

DEP = "r-flower-client-supernode"
SELECTOR = "app.kubernetes.io/instance=r,app.kubernetes.io/component=supernode"


def _write(repo: Path, namespace: str, *, tag: str = "1.25.0", cpu: str = "") -> None:
    (repo / "supernodes" / "r").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    resources = f"  resources:\n    requests:\n      cpu: \"{cpu}\"\n" if cpu else ""
    (repo / "supernodes" / "r" / "values.yaml").write_text(
        f"tls:\n  enabled: false\nsupernode:\n  replicas: 3\n  image:\n    tag: {tag}\n"
        f"  nodeSelector:\n    devcluster.flower-syncer.dev/node-class: cpu\n{resources}")
    (repo / "supernodes" / "r" / "release.yaml").write_text("canary: 1\ncanaryGate: 3s\ncanaryDeadline: 25s\n")


def _pods(kube: Kube, namespace: str) -> list[tuple[str, bool]]:
    """The release's pods: (pod-template-hash, Ready), not terminating."""
    items, _ = kube.list("Pod", namespace, labels=SELECTOR)
    out = []
    for p in items:
        if p["metadata"].get("deletionTimestamp"):
            continue
        ready = pod_ready(p)
        out.append((p["metadata"]["labels"]["pod-template-hash"], ready))
    return sorted(out)


def _dep(kube: Kube, namespace: str) -> Any:
    return kube.get("Deployment", namespace, DEP)


def test_a_release_canary_fails_leaving_the_rest_old_and_the_fix_rolls_the_release(kube: Kube, namespace: str,
                                                                                   tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        before = wait_until("3 SuperNodes Ready", lambda: (pods := _pods(kube, namespace)) and len(pods) == 3
                            and all(r for _, r in pods) and pods, timeout=60)
        old = before[0][0]

        _write(repo, namespace, tag="1.26.0", cpu="1000")  # no node has room: the canary stays Pending
        started = sync_unit(engine, repo)
        assert started.ok and [n.step for n in started.canaries] == [Step.STARTED], started.to_dict()
        assert _dep(kube, namespace)["spec"]["minReadySeconds"] == BRAKE

        result = until_canary_failed(engine, repo)
        [change] = result.failures()
        assert change.cause is Cause.CANARY_FAILED and "not Ready within its deadline" in change.message
        pods = _pods(kube, namespace)
        assert [p for p in pods if p[0] == old] == [(old, True), (old, True)], pods  # the rest: old, Ready
        assert [ready for h, ready in pods if h != old] == [False], pods  # exactly one took the bad change

        _write(repo, namespace, tag="1.26.0")  # the fix
        fixed = sync_unit(engine, repo)
        assert fixed.ok and [n.step for n in fixed.canaries] == [Step.STARTED], fixed.to_dict()

        def passed() -> UnitResult | None:
            result = sync_unit(engine, repo)
            assert result.ok, result.to_dict()
            done = any(n.step is Step.PASSED for n in result.canaries)
            assert done or len([p for p in _pods(kube, namespace) if p[0] == old]) == 2  # the rest waits
            return result if done else None
        wait_until("the fixed canary to pass its gate", passed, timeout=90, interval=1)
        assert "minReadySeconds" not in _dep(kube, namespace)["spec"]

        def rolled() -> bool:
            pods = _pods(kube, namespace)
            return len(pods) == 3 and len({h for h, _ in pods}) == 1 and pods[0][0] != old and all(r for _, r in pods)
        wait_until("every SuperNode on the new template", rolled, timeout=120, interval=0.5)
        writes = kube.writes
        done = sync_unit(engine, repo)
        assert done.ok and not done.canaries and kube.writes == writes, done.to_dict()  # zero writes
    finally:
        engine.close()


def test_removing_a_release_canary_rolls_the_rest_at_once(kube: Kube, namespace: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        wait_until("3 SuperNodes Ready", lambda: (pods := _pods(kube, namespace)) and len(pods) == 3
                   and all(r for _, r in pods), timeout=60)
        _write(repo, namespace, tag="1.26.0")
        assert [n.step for n in sync_unit(engine, repo).canaries] == [Step.STARTED]
        assert _dep(kube, namespace)["spec"]["minReadySeconds"] == BRAKE
        (repo / "supernodes" / "r" / "release.yaml").write_text("")
        assert sync_unit(engine, repo).ok
        spec = _dep(kube, namespace)["spec"]  # the brake is no longer Git's: the API server's defaults
        assert spec.get("minReadySeconds", 0) == 0 and spec["progressDeadlineSeconds"] == 600

        def rolled() -> bool:
            pods = _pods(kube, namespace)
            return len(pods) == 3 and len({h for h, _ in pods}) == 1 and all(r for _, r in pods)
        wait_until("every SuperNode on one template", rolled, timeout=120, interval=0.5)
    finally:
        engine.close()
