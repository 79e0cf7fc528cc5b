"""Inventory loss and corruption, on the local control plane: a deleted inventory is rebuilt from the
objects' labels (so nothing becomes an orphan), and an inventory that names something unexpected
never crashes a sync nor stops another unit's prune."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.engine.inventory import INVENTORY_KEY
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos
from tests.reliability.clashes import changes, make_repo, sync, write

pytestmark = pytest.mark.cluster

TWO_POOLS = FED.format(image="flwr/supernode:1.25.0", replicas=1) + "      - name: b\n        replicas: 1\n" \
                                                                    "        images: {}\n"
ONE_POOL = FED.format(image="flwr/supernode:1.25.0", replicas=1)
INVENTORY = "flower-syncer.federation.fed"



def entries(kube: Kube, namespace: str, name: str = INVENTORY) -> list[str]:
    cm = kube.get("ConfigMap", namespace, name)
    if cm is None:
        return []
    return sorted(f"{o['kind']}/{o['name']}" for o in json.loads(cm["data"][INVENTORY_KEY])["objects"])


def test_sync_rebuilds_a_deleted_inventory_and_prunes_the_orphans(kube: Kube, tmp_path: Path,
                                                                  namespace: str) -> None:
    repo = make_repo(tmp_path / "r", "team", namespace, {"federations/fed.yaml": TWO_POOLS})
    assert sync(kube, repo).ok
    full = entries(kube, namespace)
    assert "StatefulSet/fed-supernode-b" in full
    kube.delete("ConfigMap", namespace, INVENTORY)
    write(repo, {"federations/fed.yaml": ONE_POOL})  # pool b leaves Git while the inventory is gone
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    got = changes(report)
    assert got[f"StatefulSet/{namespace}/fed-supernode-b"][0] == "deleted"
    assert "rebuilt from" in got[f"ConfigMap/{namespace}/{INVENTORY}"][1]
    assert kube.get("StatefulSet", namespace, "fed-supernode-b") is None
    assert kube.get("Service", namespace, "fed-supernode-b") is None
    assert entries(kube, namespace) == [e for e in full if not e.endswith("fed-supernode-b")]
    assert sync(kube, repo).writes == 0


def test_a_unit_that_left_git_while_its_inventory_was_gone_is_still_pruned(kube: Kube, tmp_path: Path,
                                                                           namespace: str) -> None:
    repo = make_repo(tmp_path / "r", "team", namespace, {"federations/fed.yaml": ONE_POOL,
                                                         "federations/keep.yaml": ONE_POOL.replace(
                                                             "name: fed\n", "name: keep\n", 1)})
    assert sync(kube, repo).ok
    kube.delete("ConfigMap", namespace, INVENTORY)
    (repo / "federations" / "fed.yaml").unlink()
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    assert kube.get("StatefulSet", namespace, "fed-supernode-a") is None
    assert kube.get("StatefulSet", namespace, "keep-supernode-a") is not None


def test_an_unexpected_inventory_entry_neither_crashes_nor_stops_other_prunes(
        kube: Kube, kube_cluster: KubeCluster, tmp_path: Path, namespace: str) -> None:
    repo = make_repo(tmp_path / "r", "team", namespace, {
        "federations/fed.yaml": ONE_POOL,
        "federations/gone.yaml": ONE_POOL.replace("name: fed\n", "name: gone\n", 1)})
    assert sync(kube, repo).ok
    cm = kube.get("ConfigMap", namespace, INVENTORY)
    assert cm is not None
    payload = json.loads(cm["data"][INVENTORY_KEY])
    payload["objects"] += [{"kind": "ClusterRoleBinding", "namespace": "", "name": "cluster-admin"},
                           {"kind": "Widget", "namespace": namespace, "name": "w"},
                           {"kind": "Service", "namespace": 7, "name": ["x"]}]
    kube.request("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{INVENTORY}",
                 body={"data": {INVENTORY_KEY: json.dumps(payload)}}, content_type="application/merge-patch+json")
    (repo / "federations" / "gone.yaml").unlink()
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    assert kube.get("StatefulSet", namespace, "gone-supernode-a") is None  # the other unit was pruned
    notes = [m for ref, (_, m) in changes(report).items() if ref == f"ConfigMap/{namespace}/{INVENTORY}"]
    assert notes and "not understood" in notes[0]
    assert all("ClusterRoleBinding" not in e and "Widget" not in e for e in entries(kube, namespace))
    assert kube_cluster.kubectl("get", "clusterrolebinding", "cluster-admin").returncode == 0


def test_agent_restores_a_deleted_inventory(repos: Repos, start_agent: Callable[..., AgentProc], kube: Kube,
                                            namespace: str) -> None:
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: len(entries(kube, namespace)) > 3, log=agent.log)
    full = entries(kube, namespace)
    kube.delete("ConfigMap", namespace, INVENTORY)
    wait_until("inventory restored", lambda: entries(kube, namespace) == full, timeout=20, log=agent.log)
    # and it still prunes with it: a pool that leaves Git is deleted
    repos.commit({"federations/fed.yaml": ONE_POOL.replace("- name: a", "- name: c")}, "rename the pool")
    wait_until("old pool pruned", lambda: kube.get("StatefulSet", namespace, "fed-supernode-a") is None,
             log=agent.log)
