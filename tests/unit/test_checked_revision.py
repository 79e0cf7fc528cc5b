"""The revision a unit was last *checked* at (issue 13: status's REVISION column), apart from the
revision that last changed it: one record per namespace and repository, written once per commit."""

from __future__ import annotations

from pathlib import Path

from syncer.actions.suspend import set_suspended
from syncer.agent.progress import RevisionProgress
from syncer.engine.checked_revision import Checked, decode, record_name
from syncer.engine.live import LiveState
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.identity import Unit
from syncer.observe.status import status
from syncer.observe.status_tables import format_units
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, pool, write
from tests.fakekube import FakeApiServer, FakeKube


def sync_at(kube: FakeKube, repo: Path, revision: str) -> SyncReport:
    state = load_repo(repo)
    return Engine(kube).sync(plan_repo(state, render_repo(state), revision=revision), SyncOptions())


def test_a_commit_that_leaves_a_unit_alone_still_shows_it_checked_at_that_commit(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    repo = write(tmp_path / "repo", pools=pool("a"))
    assert sync_at(kube, repo, "aaaa1111").ok
    report = sync_at(kube, repo, "bbbb2222")  # a commit elsewhere in the repository
    assert report.writes == 1  # the record only; the unit's objects and inventory are left alone
    assert sync_at(kube, repo, "bbbb2222").writes == 0  # the same commit again: nothing at all
    unit = status(kube, None, nodes=False).units[0]
    assert (unit.revision, unit.checked) == ("aaaa1111", "bbbb2222")
    assert unit.to_dict()["revision"] == "aaaa1111" and unit.to_dict()["checkedRevision"] == "bbbb2222"
    table = format_units(status(kube, None, nodes=False))
    assert "bbbb2222" in table and "aaaa1111" not in table
    # a suspended unit is not looked at: it shows the revision it is at
    set_suspended(kube, "fed", True)
    assert sync_at(kube, repo, "cccc3333").ok
    unit = status(kube, None, nodes=False).units[0]
    assert unit.suspended and unit.checked != "cccc3333"


def test_a_sync_of_some_units_or_a_dry_run_records_nothing(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    repo = write(tmp_path / "repo", pools=pool("a"))
    state = load_repo(repo)
    Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1", selectors=("fed",)), SyncOptions())
    Engine(kube).sync(plan_repo(state, render_repo(state), revision="r2"), SyncOptions(dry_run=True))
    assert kube.get("ConfigMap", NS, record_name("team")) is None


def test_the_record_reads_with_the_inventories_and_is_no_unit() -> None:
    record = Checked("team_B", "abc", "2026-11-24T10:00:00Z")
    cm = record.manifest(NS)
    name = cm["metadata"]["name"]
    assert name.startswith("flower-syncer.checked.team-b-") and name == record_name("team_B")
    assert decode(cm) == record
    live = LiveState()
    assert live.note(cm) is None and live.checked == {(NS, "team_B"): record} and not live.inventories
    assert decode({"metadata": {"labels": {}}, "data": cm["data"]}) is None  # unlabelled: not ours


def test_progress_reports_each_unit_and_the_revision_and_when_all_were_checked() -> None:
    a, b, c = (Unit("federation", NS, n) for n in "abc")
    applied: list[float] = []
    per_unit: list[tuple[str, float]] = []
    checked: list[str] = []
    progress = RevisionProgress(applied=applied.append, unit_applied=lambda u, s: per_unit.append((u.name, s)),
                                checked=checked.append)
    # c failed to render: it is synced at its last good revision r0
    progress.installed("r1", 10.0, {a: "r1", b: "r1", c: "r0"})
    progress.synced(a, "r1", True, 10.5)
    progress.synced(b, "r1", False, 11.0)  # failed: checked, not applied
    assert per_unit == [("a", 0.5)] and not applied and not checked
    progress.synced(c, "r0", True, 11.5)
    assert checked == ["r1"] and not applied
    progress.synced(b, "r1", True, 12.0)  # the retry succeeds
    assert applied == [2.0] and per_unit[-1] == ("b", 2.0) and checked == ["r1"]
    # a newer revision replaces one still in progress; a sync reporting another revision is not it
    progress.installed("r2", 20.0, {a: "r2"})
    progress.installed("r3", 21.0, {b: "r3"})
    progress.synced(a, "r2", True, 22.0)
    assert checked == ["r1"]
    progress.synced(b, "r2", True, 22.5)
    assert checked == ["r1"]
    progress.synced(b, "r3", True, 23.0)
    assert checked == ["r1", "r3"]
    progress.installed("r4", 30.0, {})  # changed nothing: checked at once
    assert checked[-1] == "r4"


def test_a_units_condition_is_observed_at_the_repositorys_revision(tmp_path: Path) -> None:
    """The agent keeps a unit's manifests with the revision that last changed them; a sync at a
    later commit observed it at that commit (found in a newcomer's tour: after `resume`, the unit's
    REVISION fell back to its older commit)."""
    import dataclasses

    from syncer.engine.inventory import decode as decode_inventory
    from syncer.engine.inventory import inventory_name

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    state = load_repo(write(tmp_path / "repo", pools=pool("a")))
    plan = plan_repo(state, render_repo(state), revision="newer")
    plan = dataclasses.replace(plan, units={u: dataclasses.replace(p, revision="older") for u, p in plan.units.items()})
    assert Engine(kube).sync(plan, SyncOptions()).ok
    unit = next(iter(plan.units))
    inv = decode_inventory(kube.get("ConfigMap", NS, inventory_name(unit)) or {})
    assert inv is not None and inv.condition is not None
    assert (inv.condition.revision, inv.revision) == ("newer", "older")
