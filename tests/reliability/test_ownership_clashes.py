"""Ownership clashes within and across repositories, on the local control plane: a config mistake or
a second repository never takes over, recreates or deletes another unit's objects, and a unit that
is still in Git is never pruned."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.engine.prune import prune_blocker
from syncer.identity import LABEL_REPOSITORY, LABEL_UNIT, Unit
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos
from tests.reliability.clashes import changes, make_repo, sync, write

pytestmark = pytest.mark.cluster

# A SuperNode release whose Service is named like the federation's SuperLink Service (fed-superlink).
CLASHING_RELEASE = "fullnameOverride: fed\nsupernode:\n  name: superlink\n"
PLAIN_RELEASE = "fullnameOverride: {name}\n"


def fed(name: str = "fed") -> str:
    return FED.format(image="flwr/supernode:1.25.0", replicas=1).replace("name: fed\n", f"name: {name}\n", 1)



def identity(kube: Kube, kind: str, namespace: str, name: str) -> tuple[str, str, str]:
    obj = kube.get(kind, namespace, name) or {}
    meta = obj.get("metadata", {})
    labels = meta.get("labels", {})
    return meta.get("uid", ""), labels.get(LABEL_UNIT, ""), labels.get(LABEL_REPOSITORY, "")


def test_another_repository_cannot_take_an_object_by_rendering_its_name(kube: Kube, tmp_path: Path,
                                                                        namespace: str) -> None:
    a = make_repo(tmp_path / "a", "team-a", namespace, {"federations/fed.yaml": fed()})
    assert sync(kube, a).ok
    before = identity(kube, "Service", namespace, "fed-superlink")
    assert before[1:] == ("fed", "team-a")
    b = make_repo(tmp_path / "b", "team-b", namespace, {"supernodes/x/values.yaml": CLASHING_RELEASE,
                                                        "supernodes/x/release.yaml": "policy:\n  allowRecreate: true\n"
                                                        "  forceConflicts: true\n"})
    report = sync(kube, b)
    assert not report.ok
    action, message = changes(report)[f"Service/{namespace}/fed-superlink"]
    assert action == "failed"
    assert f"federation/{namespace}/fed of the repository 'team-a'" in message
    assert identity(kube, "Service", namespace, "fed-superlink") == before  # not adopted, not recreated
    again = sync(kube, a)  # A is not disturbed: still its own, nothing to write
    assert again.ok, again.to_dict()
    assert again.writes == 0


def test_legacy_objects_without_a_repository_label_are_protected_through_the_inventory(
        kube: Kube, tmp_path: Path, namespace: str) -> None:
    a = make_repo(tmp_path / "a", "team-a", namespace, {"federations/fed.yaml": fed()})
    assert sync(kube, a).ok
    # an object applied by an older flower-syncer carries no repository label
    kube.request("PATCH", f"/api/v1/namespaces/{namespace}/services/fed-superlink",
                 body={"metadata": {"labels": {LABEL_REPOSITORY: None}}},
                 content_type="application/merge-patch+json")
    b = make_repo(tmp_path / "b", "team-b", namespace, {"supernodes/x/values.yaml": CLASHING_RELEASE})
    action, message = changes(sync(kube, b))[f"Service/{namespace}/fed-superlink"]
    assert action == "failed" and "repository 'team-a'" in message
    assert identity(kube, "Service", namespace, "fed-superlink")[1] == "fed"


def test_a_clash_within_a_repository_fails_both_units_and_applies_neither(kube: Kube, tmp_path: Path,
                                                                          namespace: str) -> None:
    repo = make_repo(tmp_path / "r", "team", namespace, {"federations/fed.yaml": fed()})
    assert sync(kube, repo).ok
    before = identity(kube, "Service", namespace, "fed-superlink")
    write(repo, {"supernodes/aaa/values.yaml": CLASHING_RELEASE})
    report = sync(kube, repo)
    errors = {u.unit.id: u.errors for u in report.units if u.errors}
    assert set(errors) == {f"federation/{namespace}/fed", f"supernode/{namespace}/aaa"}
    assert report.writes == 1  # no object: only fed's inventory, recording the clash (aaa has none yet)
    assert identity(kube, "Service", namespace, "fed-superlink") == before
    assert kube.get("Deployment", namespace, "fed-superlink") is None  # the newcomer applied nothing
    # --unit on one of them alone is refused as well (validate reports it; sync must not apply it)
    only = sync(kube, repo, selectors=["aaa"])
    assert not only.ok and only.writes == 0


def test_an_object_moved_between_units_is_handed_over_not_deleted(kube: Kube, tmp_path: Path,
                                                                  namespace: str) -> None:
    repo = make_repo(tmp_path / "r", "team", namespace, {"supernodes/old/values.yaml": PLAIN_RELEASE.format(
        name="shared")})
    assert sync(kube, repo).ok
    uid = identity(kube, "Service", namespace, "shared-supernode")[0]
    (repo / "supernodes" / "old" / "values.yaml").unlink()
    (repo / "supernodes" / "old").rmdir()
    # the Deployment's selector names the release, so the new owner must be allowed to recreate it
    write(repo, {"supernodes/new/values.yaml": PLAIN_RELEASE.format(name="shared"),
                 "supernodes/new/release.yaml": "policy:\n  allowRecreate: true\n"})
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    new = {str(c.ref): c.action.value for u in report.units if u.unit.name == "new" for c in u.changes}
    old = {str(c.ref): (c.action.value, c.message) for u in report.units if u.unit.name == "old" for c in u.changes}
    assert new[f"Service/{namespace}/shared-supernode"] == "configured"
    assert new[f"Deployment/{namespace}/shared-supernode"] == "recreated"
    assert old and all(a == "skipped" and "renders it now" in m for a, m in old.values()), old
    assert identity(kube, "Service", namespace, "shared-supernode") == (uid, "new", "team")
    assert kube.get("ConfigMap", namespace, "flower-syncer.supernode.old") is None
    assert sync(kube, repo).writes == 0


@pytest.mark.parametrize("how", ["server-side apply", "patch"])
def test_secret_data_written_with_string_data_by_another_manager_is_never_pruned(
        kube: Kube, kube_cluster: KubeCluster, namespace: str, how: str) -> None:
    unit = Unit("supernode", namespace, "x")
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": namespace,
                                                                   "labels": dict(unit.labels())}, "data": {}},
               force=True)
    if how == "patch":  # an Update: the server records it under f:data
        kube_cluster.kubectl("-n", namespace, "patch", "secret", "s", "--type", "merge", "-p",
                             '{"stringData": {"token": "written-by-hand"}}')
        manager = "kubectl-patch"
    else:  # an Apply: the server records the applied stringData as f:stringData
        kube_cluster.kubectl("apply", "--server-side", "--field-manager", "other-tool", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": namespace},
             "stringData": {"token": "written-by-another-tool"}}))
        manager = "other-tool"
    live = kube.get("Secret", namespace, "s")
    assert live is not None
    assert manager in prune_blocker(unit, live)


# -- the agent ------------------------------------------------------------------------------------


def test_agent_never_prunes_a_unit_still_in_git_when_a_newcomer_clashes(
        repos: Repos, start_agent: Callable[..., AgentProc], kube: Kube, namespace: str) -> None:
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: identity(kube, "Service", namespace, "fed-superlink")[1] == "fed", log=agent.log)
    before = identity(kube, "Service", namespace, "fed-superlink")
    # the newcomer sorts before the federation, so it used to win the object and the federation was pruned
    repos.commit({"supernodes/aaa/values.yaml": CLASHING_RELEASE}, "a clashing release")
    for unit in (f"federation/{namespace}/fed", f"supernode/{namespace}/aaa"):
        wait_until(f"config error on {unit}", lambda u=unit: (agent.metric("flower_syncer_config_errors", unit=u)
                                                            or 0) >= 1, log=agent.log)
    # a later, unrelated change is applied: by then everything queued with the clash has run
    repos.commit({"federations/other.yaml": fed("other")}, "unrelated")
    wait_until("unrelated change applied", lambda: kube.get("StatefulSet", namespace, "other-superlink") is not None,
             log=agent.log)
    assert identity(kube, "Service", namespace, "fed-superlink") == before
    assert kube.get("StatefulSet", namespace, "fed-supernode-a") is not None
    assert kube.get("ConfigMap", namespace, "flower-syncer.federation.fed") is not None
    assert kube.get("Deployment", namespace, "fed-superlink") is None


def test_validate_names_both_sides_of_a_clash(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", "team", "flower", {"federations/fed.yaml": fed(),
                                                        "supernodes/aaa/values.yaml": CLASHING_RELEASE})
    proc = subprocess.run([sys.executable, "-m", "syncer", "validate", str(repo)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1
    assert "supernodes/aaa/values.yaml" in proc.stdout + proc.stderr
    assert "federations/fed.yaml" in proc.stdout + proc.stderr
