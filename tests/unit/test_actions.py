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
from tests.fakekube import FakeApiServer, FakeKube
from tests.unit.test_engine_fake import NS, write


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
