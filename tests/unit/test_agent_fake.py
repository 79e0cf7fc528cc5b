"""The agent's decisions, in-process: installing revisions (what changed, what may be pruned, the
revision each unit carries) and which watch events mean work. No threads are started."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from syncer.agent.agent import Agent, AgentOptions, ObjectChanged
from syncer.identity import ObjectRef, Unit
from syncer.observe.metrics import Metrics
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from syncer.source.git import GitSource
from tests.fakekube import FakeKube
from tests.unit.test_engine_fake import FED, NS, pool

FED_UNIT = Unit("federation", NS, "fed")
CLASH = "fullnameOverride: fed\nsupernode:\n  name: superlink\n"  # renders Service fed-superlink


@pytest.fixture
def agent() -> Agent:
    return Agent(FakeKube(), cast(GitSource, object()), Metrics(), AgentOptions())


def repo_at(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def install(agent: Agent, root: Path, revision: str) -> list[Unit]:
    state = load_repo(root)
    changed = agent._install(state, render_repo(state), revision)
    agent.loaded.set()
    return changed


def fed(name: str = "fed", pools: str = "") -> str:
    return FED.format(name=name, pools=pools or pool("a"), annotations="")


def test_a_revision_installs_units_with_their_revision(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    assert install(agent, root, "r1") == [FED_UNIT]
    assert agent.desired[FED_UNIT].revision == "r1"
    other = repo_at(tmp_path / "r", {"federations/other.yaml": fed("other")})
    changed = install(agent, other, "r2")
    assert changed == [Unit("federation", NS, "other")]
    assert agent.desired[FED_UNIT].revision == "r1"  # unchanged units keep the revision that made them
    assert agent.installed.plan.revision == "r2"


def test_a_clash_never_removes_a_unit_still_in_git(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    install(agent, root, "r1")
    repo_at(root, {"supernodes/aaa/values.yaml": CLASH})
    changed = install(agent, root, "r2")
    assert FED_UNIT in agent.desired  # its last good state stays
    assert changed == []  # nothing to apply, nothing to prune
    assert not agent.installed.plan.prune_allowed
    assert {u.id for u in agent.installed.plan.failed} == {FED_UNIT.id, f"supernode/{NS}/aaa"}
    assert agent.units[FED_UNIT].config_errors  # and it says why


def test_a_unit_removed_from_a_clean_repo_is_queued_for_pruning(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    install(agent, root, "r1")
    (root / "federations" / "b.yaml").unlink()
    changed = install(agent, root, "r2")
    assert changed == [Unit("federation", NS, "b")]
    assert Unit("federation", NS, "b") not in agent.desired


def test_only_changes_to_what_we_own_mean_work(agent: Agent, tmp_path: Path) -> None:
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r1")
    ref = ObjectRef("StatefulSet", NS, "fed-supernode-a")
    assert agent._touched(ObjectChanged(FED_UNIT, ref, None))  # deleted: work
    obj = {"metadata": {"name": ref.name, "namespace": NS, "labels": FED_UNIT.labels()}}
    assert agent._touched(ObjectChanged(FED_UNIT, ref, obj))  # not in an inventory yet: work
    assert agent._unit_of(ref, FED_UNIT.labels()) == FED_UNIT
    assert agent._unit_of(ref, {}) is None
