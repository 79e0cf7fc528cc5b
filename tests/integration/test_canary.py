"""Canary pools against a real API server and StatefulSet controller (kwok nodes make pods Ready):
a change reaches exactly the canary; a canary that never becomes Ready (a nodeSelector no node
has: Pending) fails at its deadline while the rest of the pool stays on the old revision and
Ready; the fixing commit replaces the broken canary pod (OrderedReady would wait for it forever),
passes the gate and rolls the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.client import Kube
from syncer.engine.canary import Step
from syncer.engine.changeset import Cause, UnitResult
from syncer.engine.sync import Engine
from tests import builders
from tests.conftest import pod_ready, wait_until
from tests.integration.canaries import sync_unit, until_canary_failed

pytestmark = pytest.mark.cluster

STS = "fed-supernode-a"
ANNOTATIONS = ('"flower-syncer.io/canary": "1", "flower-syncer.io/canary-gate": "3s", '
               '"flower-syncer.io/canary-deadline": "25s"')


def _write(repo: Path, namespace: str, *, image: str = "1.25.0", selector: str = "") -> None:
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    extra = f"        podTemplate:\n          spec:\n            nodeSelector: {selector}\n" if selector else ""
    text = builders.federation("fed", builders.pool("a", 3, extra), ANNOTATIONS)
    (repo / "federations" / "fed.yaml").write_text(text.replace("supernode:1.25.0", f"supernode:{image}"))


def _pods(kube: Kube, namespace: str) -> dict[int, tuple[str, bool]]:
    """Each pod of the pool: (its revision, Ready)."""
    items, _ = kube.list("Pod", namespace, labels="flower.flwr.ai/pool=a")
    out = {}
    for p in items:
        if p["metadata"].get("deletionTimestamp"):
            continue
        ready = pod_ready(p)
        out[int(p["metadata"]["name"].rsplit("-", 1)[1])] = (p["metadata"]["labels"]["controller-revision-hash"], ready)
    return out


def _revisions(kube: Kube, namespace: str) -> tuple[str, str]:
    sts: Any = kube.get("StatefulSet", namespace, STS)
    status = sts.get("status") or {}
    return status.get("currentRevision", ""), status.get("updateRevision", "")


def test_a_failed_canary_stops_the_rollout_and_the_fix_completes_it(kube: Kube, namespace: str,
                                                                     tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        old = wait_until("the pool Ready", lambda: (pods := _pods(kube, namespace)) and len(pods) == 3
                         and all(r for _, r in pods.values()) and pods[0][0], timeout=60)

        _write(repo, namespace, image="1.26.0", selector="{flower-syncer.io/no-such-node: \"true\"}")
        started = sync_unit(engine, repo)
        assert started.ok and [n.step for n in started.canaries] == [Step.STARTED]
        sts: Any = kube.get("StatefulSet", namespace, STS)
        assert sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 2

        result = until_canary_failed(engine, repo)
        [change] = result.failures()
        assert change.cause is Cause.CANARY_FAILED and "not Ready within its deadline" in change.message
        pods = _pods(kube, namespace)
        assert pods[0] == (old, True) and pods[1] == (old, True)  # the rest: the old revision, Ready
        assert pods[2][0] != old and not pods[2][1]  # exactly the canary took the bad change

        _write(repo, namespace, image="1.26.0")  # the fix
        fixed = sync_unit(engine, repo)
        assert fixed.ok and [n.step for n in fixed.canaries] == [Step.STARTED]

        def passed() -> UnitResult | None:
            result = sync_unit(engine, repo)
            assert result.ok, result.to_dict()
            return result if any(n.step is Step.PASSED for n in result.canaries) else None
        wait_until("the fixed canary to pass its gate", passed, timeout=90, interval=1)

        def rolled() -> bool:
            current, update = _revisions(kube, namespace)
            pods = _pods(kube, namespace)
            return (current == update != old and len(pods) == 3
                    and all(rev == update and ready for rev, ready in pods.values()))
        wait_until("the whole pool on the new revision", rolled, timeout=120, interval=0.5)
        writes = kube.writes
        done = sync_unit(engine, repo)
        assert done.ok and not done.canaries and kube.writes == writes  # an unchanged repo: zero writes
    finally:
        engine.close()


def test_removing_the_canary_rolls_the_rest_at_once(kube: Kube, namespace: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert sync_unit(engine, repo).ok
        wait_until("the pool Ready", lambda: (pods := _pods(kube, namespace)) and len(pods) == 3
                   and all(r for _, r in pods.values()), timeout=60)
        _write(repo, namespace, image="1.26.0")
        assert [n.step for n in sync_unit(engine, repo).canaries] == [Step.STARTED]
        text = (repo / "federations" / "fed.yaml").read_text()
        (repo / "federations" / "fed.yaml").write_text(text.replace(ANNOTATIONS, ""))
        assert sync_unit(engine, repo).ok
        sts: Any = kube.get("StatefulSet", namespace, STS)
        assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    finally:
        engine.close()
