"""A SuperLink's state on a real API server (docs/superlink-state.md): the volume is bound by the
devcluster's provisioner and the pod gets Ready; a SuperLink already in memory stays so when Git
leaves the choice (no write, no restart); Git asking for the volume recreates the StatefulSet once
(the API server refuses the claim template in place); a new size keeps the claim template."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from syncer.cluster.client import Kube
from syncer.engine.changeset import Action
from tests.builders import federation, pool, sync
from tests.conftest import wait_until

if TYPE_CHECKING:
    from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


def _repo(tmp_path: Path, namespace: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    return repo


def _write(repo: Path, annotations: str = "") -> None:
    (repo / "federations" / "fed.yaml").write_text(federation(pools=pool("a", 1), annotations=annotations,
                                                              version="1.42.0"))


def _superlink(kube: Kube, namespace: str) -> dict[str, Any]:
    sts = kube.get("StatefulSet", namespace, "fed-superlink")
    assert sts is not None
    return sts


def test_the_state_volume_is_bound_and_the_superlink_ready(kube: Kube, kube_cluster: KubeCluster, tmp_path: Path,
                                                          namespace: str) -> None:
    repo = _repo(tmp_path, namespace)
    _write(repo)
    assert sync(kube, repo).ok

    def bound() -> Any:
        claims = kube_cluster.core.list_namespaced_persistent_volume_claim(namespace).items
        return next((c for c in claims if c.metadata.name == "superlink-state-fed-superlink-0"
                     and c.status.phase == "Bound"), None)

    claim = wait_until("the state claim bound", bound, timeout=120)
    assert claim.spec.storage_class_name == "standard"
    wait_until("the SuperLink ready", lambda: _superlink(kube, namespace).get("status", {}).get("readyReplicas") == 1,
               timeout=120)


def test_in_memory_stays_until_git_asks_then_one_recreate(kube: Kube, tmp_path: Path, namespace: str) -> None:
    repo = _repo(tmp_path, namespace)
    _write(repo, '"flower-syncer.io/superlink-state": memory')
    assert sync(kube, repo).ok
    before = _superlink(kube, namespace)
    _write(repo)  # Git leaves the choice: an existing SuperLink in memory is not restarted
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    kept = _superlink(kube, namespace)
    assert kept["metadata"]["generation"] == before["metadata"]["generation"]  # its spec untouched
    assert "volumeClaimTemplates" not in kept["spec"]
    assert sync(kube, repo).writes == 0
    _write(repo, '"flower-syncer.io/superlink-state": persistent')
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    (change,) = [c for u in report.units for c in u.changes if str(c.ref).endswith("StatefulSet/" + namespace
                                                                                     + "/fed-superlink")]
    assert change.action is Action.RECREATED
    moved = _superlink(kube, namespace)
    assert moved["metadata"]["uid"] != before["metadata"]["uid"]
    assert [c["metadata"]["name"] for c in moved["spec"]["volumeClaimTemplates"]] == ["superlink-state"]
    assert sync(kube, repo).writes == 0
    _write(repo, '"flower-syncer.io/superlink-state": persistent, "flower-syncer.io/superlink-state-size": 3Gi')
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    (claim,) = _superlink(kube, namespace)["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert any("cannot change" in c.message for u in report.units for c in u.changes)
