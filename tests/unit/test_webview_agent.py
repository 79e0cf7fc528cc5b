"""The web view's data from a real agent's tables (syncer.agent.view), in-process with FakeKube:
states, drift per object, errors, history; no thread started."""

from __future__ import annotations

from pathlib import Path

from syncer.agent.agent import Agent
from syncer.agent.messages import DriftCheckDue
from syncer.agent.state import AgentOptions
from syncer.agent.view import unit_rows, unit_view
from syncer.agent.wiring import build_agent
from syncer.engine.live import LiveState
from syncer.engine.sync import Engine, SyncOptions
from syncer.observe.metrics import Metrics
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import FED, NS, install, pool, repo_at
from tests.builders import federation as fed
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

FED_ID = f"federation/{NS}/fed"


def synced_agent(tmp_path: Path) -> tuple[Agent, FakeKube, Path]:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    state = load_repo(root)
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(repository="config"))
    agent.cache.state = LiveState.load(kube, None)
    agent.cache.synced.set()
    agent.leading.set()
    return agent, kube, root


def test_a_suspended_units_drift_is_listed_per_object(tmp_path: Path) -> None:
    agent, _, root = synced_agent(tmp_path)
    suspended = FED.format(name="fed", pools=pool("a", replicas=3), annotations='"flower-syncer.io/suspend": "true"')
    repo_at(root, {"federations/fed.yaml": suspended})  # Git moved on while the unit is suspended
    install(agent, root, "r2")
    agent.handle(DriftCheckDue())
    agent.drain()
    [row] = unit_rows(agent)
    assert (row.unit, row.synced, row.drift, row.suspended, row.repository) == (FED_ID, "Suspended", 1, True, "config")
    assert row.attention
    view = unit_view(agent, FED_ID)
    assert view is not None
    drifted = [o.ref for o in view.objects if o.drift]
    assert drifted == [f"StatefulSet/{NS}/fed-supernode-a"]
    assert len(view.objects) > 1 and view.history  # every object it owns; the revision applied
    assert unit_view(agent, "federation/nope/x") is None and unit_view(agent, "not a unit") is None


def test_a_config_error_says_where_and_keeps_the_unit(tmp_path: Path) -> None:
    agent, _, root = synced_agent(tmp_path)
    install(agent, root, "r1")
    agent.drain()
    repo_at(root, {"federations/fed.yaml": fed(pools=pool("a", replicas="<b>two</b>"))})
    install(agent, root, "r2")
    [row] = unit_rows(agent)
    assert row.synced == "ConfigError" and not row.synced_ok
    assert "federations/fed.yaml" in row.message and "<b>two</b>" in row.message
    view = unit_view(agent, FED_ID)
    assert view is not None and any("federations/fed.yaml" in e for e in view.errors)


def test_the_views_suspend_touches_only_this_repositorys_units(tmp_path: Path) -> None:
    """A Suspend from the web view writes only an inventory this repository owns: another
    repository's unit of the same id (here: one this repository's Git also names, whose claim the
    other repository won) is not this agent's to suspend, whatever the view lists."""
    from syncer.actions.history import find_inventory
    from syncer.agent.runner import _View
    from syncer.identity import UnknownUnit

    agent, kube, root = synced_agent(tmp_path)
    other = repo_at(tmp_path / "other", {"federations/lab.yaml": fed("lab")})
    (other / "flower-syncer.yaml").write_text(f"name: other\ndefaultNamespace: {NS}\n")
    state = load_repo(other)
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    repo_at(root, {"federations/lab.yaml": fed("lab")})  # this repository's Git names it too
    install(agent, root, "r2")
    view = _View(agent, kube, None)
    try:
        view.suspend(f"federation/{NS}/lab", True)
        raise AssertionError("suspended another repository's unit")
    except UnknownUnit:
        pass
    assert not find_inventory(kube, f"federation/{NS}/lab").suspended
    assert view.suspend(FED_ID, True) and find_inventory(kube, FED_ID).suspended
