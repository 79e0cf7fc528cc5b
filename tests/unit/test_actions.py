"""Actions on the in-memory API server: suspend/resume by selector, status of a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.actions.suspend import set_suspended
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import UnknownUnit
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from syncer.source.git import head_revision
from tests.builders import NS, write
from tests.fakekube import FakeApiServer, FakeKube


@pytest.fixture
def kube(tmp_path: Path) -> FakeKube:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    for name in ("fed", "fed2"):
        state = load_repo(write(tmp_path / name, name=name, repo_name=f"repo-{name}"))
        assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    return kube


def test_suspend_and_resume_one_unit(kube: FakeKube) -> None:
    first = set_suspended(kube, "federation/fed", True)
    assert (first.unit.name, first.suspended, first.changed) == ("fed", True, True)
    again = set_suspended(kube, "fed", True)
    assert (again.suspended, again.changed) == (True, False)  # already suspended: no write
    back = set_suspended(kube, f"federation/{NS}/fed", False, namespaces=[NS])
    assert (back.suspended, back.changed) == (False, True)


def test_suspend_needs_exactly_one_match(kube: FakeKube) -> None:
    with pytest.raises(UnknownUnit, match="matches no unit"):
        set_suspended(kube, "nope", True)
    with pytest.raises(UnknownUnit) as err:
        set_suspended(kube, "supernode/fed", True)
    assert err.value.matches == []


def test_head_revision(tmp_path: Path) -> None:
    assert head_revision(tmp_path) == ""
    assert len(head_revision(Path(__file__).parent)) == 40


def test_history_keeps_the_last_revisions_applied(tmp_path: Path) -> None:
    """`history UNIT` (issue 13): what each revision changed, who applied it; bounded at 10; a
    resync that changes nothing adds nothing."""
    from syncer.actions.history import history
    from syncer.engine.inventory import HISTORY_LIMIT
    from tests.builders import pool

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = tmp_path / "repo"
    for i in range(1, HISTORY_LIMIT + 3):
        state = load_repo(write(root, pools=pool("a", replicas=i)))
        report = Engine(kube, identity="agent-0").sync(plan_repo(state, render_repo(state), revision=f"rev{i:02d}"),
                                                      SyncOptions())
        assert report.ok
    state = load_repo(root)
    # a commit that changes nothing: only the record that the repository was checked at it
    noop = Engine(kube).sync(plan_repo(state, render_repo(state), revision="no-op"), SyncOptions())
    assert noop.writes == 1 and {c.action.value for c in noop.units[0].changes} == {"unchanged"}
    assert Engine(kube).sync(plan_repo(state, render_repo(state), revision="no-op"), SyncOptions()).writes == 0
    result = history(kube, "fed")
    assert [e.revision for e in result.entries] == [f"rev{i:02d}" for i in range(HISTORY_LIMIT + 2, 2, -1)]
    newest = result.entries[0]
    assert newest.by == "agent-0" and dict(newest.counts) == {"configured": 1}
    assert dict(result.entries[-1].counts) == {"configured": 1}
    first_kube = FakeKube(FakeApiServer())
    first_kube.server.add_namespace(NS)
    state = load_repo(root)
    Engine(first_kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions())
    created = history(first_kube, "fed").entries[0]
    assert created.by == "cli" and dict(created.counts)["created"] >= 4


def test_diff_and_status_show_a_suspended_units_drift(tmp_path: Path) -> None:
    """`diff --unit` on a suspended unit shows what differs (and says it is suspended); `status`
    counts the same drift the agent's gauge does (issue 13, item 3)."""
    from syncer.actions.load import load
    from syncer.actions.status import repo_status
    from syncer.actions.sync import diff
    from tests.builders import pool

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = write(tmp_path / "repo")
    assert Engine(kube).sync(plan_repo(load_repo(root), render_repo(load_repo(root))), SyncOptions()).ok
    set_suspended(kube, "fed", True)
    write(root, pools=pool("a", replicas=4))  # Git moves on while the unit is suspended
    report = diff(kube, load(root, ("fed",)))
    (unit,) = report.units
    assert unit.suspended is not None and unit.skipped is None and unit.changed
    assert any("replicas: 4" in c.diff for c in unit.changes if c.diff)
    assert kube.get("StatefulSet", NS, "fed-supernode-a")["spec"]["replicas"] == 1  # a dry-run: nothing written
    loaded = load(root)
    result = repo_status(kube, loaded.plan(), loaded.errors)
    assert [u.drift for u in result.report.units if u.unit.endswith("/fed")] == [1]


def _flowerunit(kind: str, name: str, reason: str, message: str) -> dict[str, object]:
    return {"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
            "metadata": {"name": f"{kind}.{name}", "namespace": NS,
                         "labels": {"flower-syncer.io/unit-kind": kind, "flower-syncer.io/unit": name}},
            "status": {"conditions": [{"type": "Synced", "status": "False", "reason": reason, "message": message,
                                       "lastTransitionTime": "2026-11-26T08:00:00Z"}]}}


def test_status_without_a_repository_shows_a_unit_that_never_loaded_from_its_flowerunit(tmp_path: Path) -> None:
    """Issue 26: a new unit whose file cannot be decrypted has no inventory (it never synced); the
    leader's FlowerUnit carries its error, and plain `status` reports it, not ready (exit 1)."""
    from syncer.actions.status import cluster_status

    write(tmp_path, {"flower-syncer.yaml": f"name: r\ndefaultNamespace: {NS}\n"})
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    assert cluster_status(kube).report.units == []
    locked = _flowerunit("supernode", "locked", "Decryption",
                         "supernodes/locked/values.yaml: cannot be decrypted with the agent's keys")
    kube.create(locked)
    kube.request("PATCH", f"/apis/flower-syncer.io/v1alpha1/namespaces/{NS}/flowerunits/supernode.locked/status",
                 body={"status": locked["status"]}, content_type="application/merge-patch+json")
    kube.create(_flowerunit("federation", "fine", "SyncFailed", "a failed sync has an inventory: shown from it"))
    result = cluster_status(kube)
    (row,) = result.report.units
    assert row.unit == f"supernode/{NS}/locked"
    assert row.state.synced.reason == "Decryption" and "values.yaml: cannot be decrypted" in row.state.synced.message
    assert not result.report.settled and not result.clean  # `status` exits 1
    assert cluster_status(kube, selectors=["other"]).report.units == []
    assert [u.unit for u in cluster_status(kube, selectors=["locked"], namespaces=[NS]).report.units] == [row.unit]
    server.absent.add("FlowerUnit")  # without the CRD: the units it can find, no error
    assert cluster_status(kube).report.units == []


def test_status_without_a_repository_shows_a_federations_superlink_health(tmp_path: Path) -> None:
    """Plain `status` reads each federation's Flower-level health from the FlowerUnit the agent
    writes (CONNECTED, `flower` in -o json), as `status DIR` does (the merge of the never-loaded
    units into this path once dropped it: both e2e tests of Flower health saw `flower` missing)."""
    from syncer.actions.status import cluster_status
    from tests.builders import federation, pool, repo_at, sync

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    sync(kube, repo_at(tmp_path, {"federations/fed.yaml": federation("fed", pool("a", 2))}))
    flower = {"reachable": True, "error": "", "code": "", "address": "fed-superlink.x.svc:9093",
              "checkedAt": "2026-11-26T09:00:00Z", "runs": {},
              "supernodes": {"expected": 2, "online": 1, "pools": [
                  {"unit": f"federation/{NS}/fed", "pool": "a", "cluster": "", "expected": 2, "online": 1}]}}
    unit = {"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
            "metadata": {"name": "federation.fed", "namespace": NS,
                         "labels": {"flower-syncer.io/unit-kind": "federation", "flower-syncer.io/unit": "fed"}}}
    kube.create(unit)
    kube.request("PATCH", f"/apis/flower-syncer.io/v1alpha1/namespaces/{NS}/flowerunits/federation.fed/status",
                 body={"status": {"flower": flower}}, content_type="application/merge-patch+json")
    (row,) = cluster_status(kube).report.units
    assert row.connected == "1/2" and (row.to_dict()["flower"] or {})["supernodes"]["online"] == 1
