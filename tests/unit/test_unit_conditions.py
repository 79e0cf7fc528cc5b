"""One truthful state per unit (issue 26): the agent's Synced and Healthy conditions follow every
transition (error -> fixed, failed -> succeeded, suspended -> resumed, unit removed, unit that
never loaded), and no path leaves a stale reason behind: not on the unit's inventory, not in
`/api/v1/status`, not in the metrics. The agent runs in-process on tests/fakekube.py; its workers
are not started: each test syncs the units an installed revision queued, as a worker would."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog.testing

from syncer.agent.agent import Agent
from syncer.agent.messages import UnitSynced
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.events import Event, EventRecorder
from syncer.engine.changeset import Action, Cause, Change, UnitResult
from syncer.identity import ObjectRef, Unit
from syncer.observe.conditions import HealthReason, SyncedReason, healthy_condition, synced_condition
from syncer.observe.health import ProblemSummary
from syncer.observe.metrics import Metrics
from syncer.observe.status import PoolStatus, UnitStatus
from syncer.source.git import GitSource, SourceSpec
from tests.builders import NS, git, install, repo_at
from tests.builders import federation as fed
from tests.conftest import wait_until
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

FED_UNIT = Unit("federation", NS, "fed")
EDGE = Unit("supernode", NS, "edge")
TYPO = ("        replicas: 1\n", "        replica: 3\n")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def record(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def make_agent(recorder: Recorder, **options: Any) -> Agent:
    server = FakeApiServer()
    server.add_namespace(NS)
    agent = build_agent(FakeKube(server), NoSource("git@example.org:team/config.git"), Metrics(),
                        AgentOptions(**options), recorder=cast(EventRecorder, recorder))
    agent.cache.synced.set()  # nothing to list: the fake cluster starts empty
    agent.leading.set()
    return agent


@pytest.fixture
def agent(recorder: Recorder) -> Agent:
    return make_agent(recorder)


def sync(agent: Agent, units: list[Unit]) -> None:
    """What the workers and the dispatcher do with the units a revision queued."""
    for unit in units:
        agent.syncs.sync(unit)
    while not agent.events.empty():
        event = agent.events.get_nowait()
        if isinstance(event, UnitSynced):
            agent.handle(event)


def synced(agent: Agent, unit: Unit = FED_UNIT) -> dict[str, Any]:
    return cast(dict[str, Any], agent.unit_conditions()[unit]["conditions"][0])


def recorded_reason(agent: Agent, unit: Unit = FED_UNIT) -> str:
    inv = agent.cache.state.inventories[unit]
    assert inv.condition is not None
    return inv.condition.reason


def state_series(agent: Agent, unit: Unit) -> list[tuple[str, str]]:
    """The (synced, health) labels of the unit's flower_syncer_unit_state series."""
    return [(s.labels["synced"], s.labels["health"]) for metric in agent.metrics.registry.collect()
            if metric.name == "flower_syncer_unit_state" for s in metric.samples if s.labels["unit"] == unit.id]


def config_errors(agent: Agent, unit: Unit) -> float | None:
    return agent.metrics.registry.get_sample_value("flower_syncer_config_errors", {"unit": unit.id})


def test_a_reverted_typo_clears_the_config_error_within_one_sync(agent: Agent, recorder: Recorder,
                                                                 tmp_path: Path) -> None:
    good = fed()
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": good})
    sync(agent, install(agent, root, "r1"))
    assert recorded_reason(agent) == "Synced" and synced(agent)["status"] == "True"

    repo_at(root, {"federations/fed.yaml": good.replace(*TYPO)})
    sync(agent, install(agent, root, "r2"))
    assert recorded_reason(agent) == "ConfigError"
    cond = synced(agent)
    assert (cond["status"], cond["reason"]) == ("False", "ConfigError")
    # the primary diagnostic first: the misspelt field, not the rule error it sets off
    assert cond["message"].startswith("federations/fed.yaml:15: spec.supernodes.pools[0].replica: "
                                      "unknown field 'replica' (did you mean 'replicas'?)")
    inv = agent.cache.state.inventories[FED_UNIT]
    assert inv.condition is not None and "unknown field 'replica'" in inv.condition.message
    assert any(e.reason == "ConfigError" and "unknown field 'replica'" in e.note for e in recorder.events)
    assert config_errors(agent, FED_UNIT) == 2
    assert state_series(agent, FED_UNIT) == [("ConfigError", "Unknown")]

    repo_at(root, {"federations/fed.yaml": good})  # git revert: the last good state again
    queued = install(agent, root, "r3")
    assert queued == [FED_UNIT]  # its inventory still says ConfigError: it must be synced
    sync(agent, queued)
    assert recorded_reason(agent) == "Synced"
    assert (synced(agent)["status"], synced(agent)["reason"]) == ("True", "Synced")
    assert config_errors(agent, FED_UNIT) == 0
    assert state_series(agent, FED_UNIT) == [("Synced", "Unknown")]  # the ConfigError series is gone
    # and the unit's Events do not end on the ConfigError: a later one says it is gone
    notes = [(e.reason, e.note) for e in recorder.events if e.regarding.kind == "ConfigMap"]
    warned = max(i for i, (reason, _) in enumerate(notes) if reason == "ConfigError")
    assert ("Synced", "revision r1 applied; no longer ConfigError") in notes[warned:]  # r3 renders as r1 did
    assert agent.status()["units"][0]["errors"] == []


def test_a_new_unit_that_cannot_be_decrypted_is_reported_everywhere(recorder: Recorder, tmp_path: Path) -> None:
    import pyrage

    from tests.sops_writer import encrypt

    mine, theirs = pyrage.x25519.Identity.generate(), pyrage.x25519.Identity.generate()
    key = tmp_path / "age.key"
    key.write_text(f"{mine}\n")
    agent = make_agent(recorder, decryption_key_files=(key,))
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    sync(agent, install(agent, root, "r1"))
    secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: edge-creds\nstringData:\n  password: sunshine\n"
    repo_at(root, {"supernodes/edge/values.yaml": "tls:\n  enabled: false\n",
                   "supernodes/edge/secrets.yaml": encrypt(secret, str(theirs.to_public()))})
    with structlog.testing.capture_logs() as logs:
        sync(agent, install(agent, root, "r2"))
    [logged] = [e for e in logs if e["event"] == "unit state" and e["unit"] == EDGE.id]
    assert logged["synced"] == "Decryption" and logged["why"].startswith("supernodes/edge/secrets.yaml:")
    assert "sunshine" not in repr(logs)
    assert state_series(agent, EDGE) == [("Decryption", "Unknown")]

    state = agent.unit_conditions()[EDGE]
    assert state["ready"] is False and state["synced"] == "Decryption"
    assert synced(agent, EDGE)["message"].startswith("supernodes/edge/secrets.yaml:")
    row = next(u for u in agent.status()["units"] if u["unit"] == EDGE.id)
    assert row["inGit"] is True and row["synced"] == "Decryption"
    assert any("secrets.yaml" in e and "cannot decrypt" in e for e in row["errors"])
    assert config_errors(agent, EDGE) == 1
    assert any(e.reason == "ConfigError" and "secrets.yaml" in e.note for e in recorder.events)
    # the log names the file and what is wrong, never a value
    lines = agent.installer.loader.load(root).error_lines()
    assert any(line.startswith("supernodes/edge/secrets.yaml:") and "cannot decrypt" in line for line in lines)
    assert not any("sunshine" in line for line in lines)
    assert synced(agent)["reason"] == "Synced"  # the other unit is untouched


def test_an_applied_unit_that_can_no_longer_be_decrypted_records_decryption(recorder: Recorder,
                                                                            tmp_path: Path) -> None:
    import pyrage

    from tests.sops_writer import encrypt

    mine, theirs = pyrage.x25519.Identity.generate(), pyrage.x25519.Identity.generate()
    key = tmp_path / "age.key"
    key.write_text(f"{mine}\n")
    agent = make_agent(recorder, decryption_key_files=(key,))
    secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: edge-creds\nstringData:\n  password: sunshine\n"
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(),
                                    "supernodes/edge/values.yaml": "tls:\n  enabled: false\n",
                                    "supernodes/edge/secrets.yaml": encrypt(secret, str(mine.to_public()))})
    sync(agent, install(agent, root, "r1"))
    assert recorded_reason(agent, EDGE) == "Synced"
    repo_at(root, {"supernodes/edge/secrets.yaml": encrypt(secret, str(theirs.to_public()))})  # re-encrypted
    sync(agent, install(agent, root, "r2"))
    assert synced(agent, EDGE)["reason"] == "Decryption"
    assert recorded_reason(agent, EDGE) == "Decryption"  # what `status` without the agent shows
    repo_at(root, {"supernodes/edge/secrets.yaml": encrypt(secret, str(mine.to_public()))})
    sync(agent, install(agent, root, "r3"))
    assert synced(agent, EDGE)["reason"] == "Synced" and recorded_reason(agent, EDGE) == "Synced"


def test_a_unit_that_never_loaded_shows_its_error_then_syncs_when_fixed(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed().replace(*TYPO)})
    queued = install(agent, root, "r1")
    sync(agent, queued)
    assert FED_UNIT not in agent.cache.state.inventories  # nothing was ever applied
    assert synced(agent)["reason"] == "ConfigError" and agent.status()["units"][0]["inGit"] is True
    repo_at(root, {"federations/fed.yaml": fed()})
    sync(agent, install(agent, root, "r2"))
    assert synced(agent)["reason"] == "Synced" and recorded_reason(agent) == "Synced"


def test_failed_then_succeeded(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    install(agent, root, "r1")
    failed = UnitResult(FED_UNIT, [Change(ObjectRef("Service", NS, "fed-superlink"), Action.FAILED, "forbidden",
                                          cause=Cause.FORBIDDEN)])
    agent.handle(UnitSynced(FED_UNIT, failed, 0.0, "r1"))
    assert synced(agent)["reason"] == "SyncFailed" and "fed-superlink" in synced(agent)["message"]
    conflict = UnitResult(FED_UNIT, [Change(ObjectRef("Service", NS, "fed-superlink"), Action.FAILED, "owned",
                                            cause=Cause.CONFLICT)])
    agent.handle(UnitSynced(FED_UNIT, conflict, 0.0, "r1"))
    assert synced(agent)["reason"] == "Conflict"
    agent.handle(UnitSynced(FED_UNIT, UnitResult(FED_UNIT), 0.0, "r1"))
    assert (synced(agent)["status"], synced(agent)["reason"]) == ("True", "Synced")
    assert agent.status()["units"][0]["errors"] == [] and agent.status()["units"][0]["failedObjects"] == []


def test_suspended_then_resumed(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    sync(agent, install(agent, root, "r1"))
    inv = agent.cache.state.inventories[FED_UNIT]
    agent.cache.state.inventories[FED_UNIT] = dataclasses.replace(inv, suspended=True)
    sync(agent, [FED_UNIT])
    assert synced(agent)["reason"] == "Suspended" and agent.status()["units"][0]["suspended"] is True
    agent.cache.state.inventories[FED_UNIT] = dataclasses.replace(inv, suspended=False)
    # resumed: not Suspended any more, even before its next sync
    assert synced(agent)["reason"] == "Pending"
    sync(agent, [FED_UNIT])
    assert synced(agent)["reason"] == "Synced" and agent.status()["units"][0]["suspended"] is False


def test_a_removed_unit_leaves_no_state_behind(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    sync(agent, install(agent, root, "r1"))
    b = Unit("federation", NS, "b")
    repo_at(root, {"federations/b.yaml": fed("b").replace(*TYPO)})
    sync(agent, install(agent, root, "r2"))
    assert synced(agent, b)["reason"] == "ConfigError"
    (root / "federations" / "b.yaml").unlink()
    sync(agent, install(agent, root, "r3"))
    assert b not in agent.unit_conditions() and config_errors(agent, b) is None
    assert [u["unit"] for u in agent.status()["units"]] == [FED_UNIT.id]


def test_health_follows_each_status_round(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    sync(agent, install(agent, root, "r1"))
    assert agent.unit_conditions()[FED_UNIT]["health"] == "Unknown"  # no status round yet
    broken = PoolStatus("a", "StatefulSet", "fed-supernode-a", 1, 0,
                        problem=ProblemSummary("ImagePullBackOff", "image not found", 1, 1, "fed-supernode-a-0"))
    agent.book.observe_health([UnitStatus(FED_UNIT.id, pools=[broken])])
    state = agent.unit_conditions()[FED_UNIT]
    assert (state["synced"], state["health"], state["ready"]) == ("Synced", "Degraded", False)
    good = PoolStatus("a", "StatefulSet", "fed-supernode-a", 1, 1, healthy=True)
    agent.book.observe_health([UnitStatus(FED_UNIT.id, pools=[good])])
    state = agent.unit_conditions()[FED_UNIT]
    assert (state["health"], state["ready"]) == ("Healthy", True)


# -- the pure state machine -------------------------------------------------------------------------


def test_synced_is_computed_from_the_current_inputs_only() -> None:
    ok = UnitResult(FED_UNIT)
    assert synced_condition(result=ok).reason == SyncedReason.SYNCED
    assert synced_condition(result=None).reason == SyncedReason.PENDING
    assert synced_condition(result=ok, suspended=True).reason == SyncedReason.SUSPENDED
    crashed = UnitResult(FED_UNIT)
    crashed.fail(Cause.UNREACHABLE, "sync failed: connection refused")
    assert synced_condition(result=crashed).reason == SyncedReason.UNREACHABLE
    assert synced_condition(result=ok, internal_error="boom").reason == SyncedReason.INTERNAL_ERROR
    gone = synced_condition(result=ok, in_git=False)  # removed from Git, not pruned (yet)
    assert (gone.reason, gone.message) == (SyncedReason.PENDING, "removed from Git; not pruned yet")


def test_health_reasons() -> None:
    rolling = PoolStatus("a", "StatefulSet", "x", 3, 1)
    assert healthy_condition([rolling]).reason == HealthReason.PROGRESSING
    stalled = PoolStatus("a", "StatefulSet", "x", 3, 1, stalled=True)
    assert healthy_condition([stalled]).reason == HealthReason.DEGRADED
    ok = PoolStatus("a", "StatefulSet", "x", 1, 1, healthy=True)
    assert healthy_condition([ok]).status is True
    assert healthy_condition(None).reason == HealthReason.UNKNOWN
    # a Flower-level check (SuperNodes connected) may only lower it
    from syncer.observe.conditions import UnitCondition

    def cut_off(_: object) -> UnitCondition:
        return UnitCondition("Healthy", False, HealthReason.DEGRADED, "0/1 SuperNodes connected")

    assert healthy_condition([ok], checks=[cut_off]).message == "0/1 SuperNodes connected"
    assert healthy_condition([stalled], checks=[lambda _: None]).reason == HealthReason.DEGRADED


# -- the running agent on a real Git repository ----------------------------------------------------


class QuietKube(FakeKube):
    """The fake API server has no watch: here a watch is a stream that stays quiet for a moment."""

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        threading.Event().wait(0.5)
        return iter(())


def test_git_revert_of_a_typo_clears_the_config_error_in_the_running_agent(tmp_path: Path) -> None:
    """Issue 26: commit a typo, then `git revert`: the running agent is Synced again after one
    sync, and so is the unit's inventory (what `status` reads), without a resync."""
    server = FakeApiServer()
    server.add_namespace(NS)
    repo = repo_at(tmp_path / "repo", {"federations/fed.yaml": fed()})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a federation")
    source = GitSource(SourceSpec(url=str(repo), cache_dir=tmp_path / "cache"))
    agent = build_agent(QuietKube(server), source, Metrics(),
                        AgentOptions(namespaces=[NS], workers=1, poll_interval=3600))
    agent.start()
    agent.set_leading(True)

    def reasons() -> tuple[str, str] | None:
        state = agent.unit_conditions().get(FED_UNIT)
        inv = agent.cache.state.inventories.get(FED_UNIT)
        if state is None or inv is None or inv.condition is None:
            return None
        return state["synced"], inv.condition.reason

    try:
        wait_until("the first sync", lambda: reasons() == ("Synced", "Synced"), timeout=30)
        (repo / "federations" / "fed.yaml").write_text(fed().replace(*TYPO))
        git(repo, "commit", "-q", "-am", "a typo")
        agent.request_fetch("test")
        wait_until("the ConfigError", lambda: reasons() == ("ConfigError", "ConfigError"), timeout=30)
        git(repo, "revert", "--no-edit", "HEAD")
        agent.request_fetch("test")
        wait_until("Synced again", lambda: reasons() == ("Synced", "Synced"), timeout=30)
        assert agent.status()["units"][0]["errors"] == []
    finally:
        agent.shutdown(timeout=10)


def test_every_status_round_recomputes_health(agent: Agent, tmp_path: Path) -> None:
    """The agent's status loop (runner._status_round) hands each round's figures to the units'
    Healthy condition and publishes the state."""
    from syncer.agent.runner import _status_round
    from syncer.observe.status import StatusReport
    from syncer.observe.status_cache import StatusCache

    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    sync(agent, install(agent, root, "r1"))
    pools = [PoolStatus("a", "StatefulSet", "fed-supernode-a", 1, 0, stalled=True)]

    class Cache:
        def report(self, _targets: object) -> StatusReport:
            return StatusReport([UnitStatus(FED_UNIT.id, pools=pools)])

    _status_round(agent, cast(StatusCache, Cache()), agent.metrics)
    assert agent.unit_conditions()[FED_UNIT]["health"] == "Degraded"
    assert state_series(agent, FED_UNIT) == [("Synced", "Degraded")]
    pools = [PoolStatus("a", "StatefulSet", "fed-supernode-a", 1, 1, healthy=True)]
    _status_round(agent, cast(StatusCache, Cache()), agent.metrics)
    assert state_series(agent, FED_UNIT) == [("Synced", "Healthy")]
    # what the rounds cost is exported (the checks' budget is measured against it)
    assert (agent.metrics.registry.get_sample_value("flower_syncer_status_round_cpu_seconds_total",
                                                    {"part": "round"}) or 0) > 0


def test_a_status_round_settles_the_heap_of_an_idle_agent_before_posting_its_drift_check(agent: Agent) -> None:
    """The round's own drift check is work in flight: asked after it, an idle agent would never
    look idle, and the heap would never be settled (agent.memory.Heap)."""
    from syncer.agent.memory import Heap, Settled
    from syncer.agent.runner import _status_round
    from syncer.observe.status import StatusReport
    from syncer.observe.status_cache import StatusCache

    class Recording(Heap):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[bool] = []

        def settle(self, idle: bool) -> Settled | None:
            self.asked.append(idle)
            return None

    class Cache:
        def report(self, _targets: object) -> StatusReport:
            return StatusReport([])

    heap = Recording()
    assert agent.idle()
    _status_round(agent, cast(StatusCache, Cache()), agent.metrics, heap=heap)
    assert heap.asked == [True]
    assert not agent.idle()  # the drift check the round posted


def test_an_equal_result_keeps_the_one_held(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    install(agent, root, "r1")
    first = UnitResult(FED_UNIT, [Change(ObjectRef("Service", NS, "fed-superlink"), Action.UNCHANGED)])
    agent.handle(UnitSynced(FED_UNIT, first, 0.0, "r1"))
    agent.handle(UnitSynced(FED_UNIT, dataclasses.replace(first, changes=list(first.changes)), 0.0, "r2"))
    assert agent.units[FED_UNIT].last_result is first and agent.units[FED_UNIT].last_revision == "r2"
    failed = UnitResult(FED_UNIT, [Change(ObjectRef("Service", NS, "fed-superlink"), Action.FAILED, "forbidden",
                                          cause=Cause.FORBIDDEN)])
    agent.handle(UnitSynced(FED_UNIT, failed, 0.0, "r3"))
    assert agent.units[FED_UNIT].last_result is failed and synced(agent)["reason"] == "SyncFailed"


def test_a_waiting_resync_answers_every_unit_in_one_shape(agent: Agent, tmp_path: Path) -> None:
    """A unit whose sync the dispatcher failed on is answered like a synced one: a failed result
    with the error and its cause."""
    from syncer.agent.messages import Waiter

    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    install(agent, root, "r1")
    b = Unit("federation", NS, "b")
    waiter = Waiter(units={FED_UNIT, b})
    agent.resyncs.waiters.append(waiter)
    agent.handle(UnitSynced(FED_UNIT, UnitResult(FED_UNIT), 0.0, "r1"))
    assert not waiter.done.is_set()
    agent.failures.event_failed(UnitSynced(b, UnitResult(b), 0.0, "r1"), KeyError("x"), "injected")
    assert waiter.done.is_set() and waiter not in agent.resyncs.waiters
    assert waiter.answer() == {
        FED_UNIT.id: {"unit": FED_UNIT.id, "ok": True, "changes": []},
        b.id: {"unit": b.id, "ok": False, "changes": [], "errors": ["injected"], "cause": "Crashed"}}
