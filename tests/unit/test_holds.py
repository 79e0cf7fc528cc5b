"""Rollouts that wait for training: the pure hold/go decision (engine.holds), the engine applying
it (a held workload keeps its live spec, the rest applies), and the agent around it (the gate from
Flower-level health, Events, status, re-queueing when the runs end). On FakeKube, no threads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from syncer.agent.agent import Agent
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.events import Event, EventRecorder
from syncer.cluster.flower_control import RunInfo
from syncer.engine.changeset import Action
from syncer.engine.disruption import Disruption, Effect
from syncer.engine.holds import ActiveRun, HoldSettings, Runs, Why, decide
from syncer.engine.live import LiveState
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import ObjectRef, Unit
from syncer.observe.conditions import synced_condition
from syncer.observe.flower_health import ControlAnswer, FlowerHealth
from syncer.observe.metrics import Metrics
from syncer.observe.status import StatusReport, status
from syncer.observe.status_tables import format_report
from syncer.plan import Policy
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, federation, install, pool, repo_at, write
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

FED_UNIT = Unit("federation", NS, "fed")
SUPERLINK = Disruption(ObjectRef("StatefulSet", NS, "fed-superlink"), Effect.RESTARTS, "superlink", "superlink", 1)
SERVICE_ONLY = Disruption(ObjectRef("Secret", NS, "x"), Effect.NEXT_RESTART, "x", "config", mounted_by=("a",))
RUNNING = Runs(True, (ActiveRun(7, "running", "2026-11-28T18:00:00Z"), ActiveRun(9, "starting")))
HOUR = HoldSettings(3600.0)
NOW = 1_800_000_000.0


# -- the decision --------------------------------------------------------------------------------

def test_a_restart_during_runs_is_held_with_the_run_ids_since_and_until() -> None:
    d = decide([SUPERLINK], RUNNING, HOUR, now=NOW)
    assert d.hold and d.why is Why.RUNS_ACTIVE and d.runs == (7, 9)
    assert (d.since, d.deadline) == (NOW, NOW + 3600)
    assert "the SuperLink held while runs 7 running and 9 starting in progress" in d.message
    # the hold goes on from when it began, not from each sync
    later = decide([SUPERLINK], RUNNING, HOUR, now=NOW + 600, held_since=NOW)
    assert later.hold and later.deadline == NOW + 3600


@pytest.mark.parametrize(("disruptions", "runs", "settings", "kw", "why"), [
    ([SERVICE_ONLY], RUNNING, HOUR, {}, Why.NO_RESTART),
    ([SUPERLINK], Runs(True, ()), HOUR, {}, Why.NO_RUNS),
    ([SUPERLINK], RUNNING, HoldSettings(0.0), {}, Why.HOLDS_OFF),
    ([SUPERLINK], RUNNING, HOUR, {"held_since": NOW - 3600}, Why.DEADLINE),
    ([SUPERLINK], RUNNING, HOUR, {"held_since": NOW - 60, "released_at": NOW - 30}, Why.RELEASED),
    ([SUPERLINK], Runs(False, why="the SuperLink does not answer"), HOUR, {}, Why.RUNS_UNKNOWN),
    ([SUPERLINK], None, HOUR, {}, Why.RUNS_UNKNOWN),
])
def test_when_a_restart_goes_ahead(disruptions: list[Disruption], runs: Runs | None, settings: HoldSettings,
                                   kw: dict[str, Any], why: Why) -> None:
    d = decide(disruptions, runs, settings, now=NOW, **kw)
    assert not d.hold and d.why is why, d


def test_a_release_from_before_the_hold_does_not_release_it_and_strict_holds_unknown_runs() -> None:
    assert decide([SUPERLINK], RUNNING, HOUR, now=NOW, held_since=NOW - 60, released_at=NOW - 120).hold
    unknown = Runs(False, why="the SuperLink does not answer")
    strict = decide([SUPERLINK], unknown, HoldSettings(3600.0, strict=True), now=NOW)
    assert strict.hold and strict.why is Why.UNKNOWN_STRICT and "does not answer" in strict.message
    assert "not held" in decide([SUPERLINK], unknown, HOUR, now=NOW).message  # says so


def test_git_asks_within_the_admins_bounds() -> None:
    assert HoldSettings.of(Policy(), 3600.0, 86400.0).timeout == 3600.0
    assert HoldSettings.of(Policy(hold_for_runs=7 * 86400.0), 3600.0, 86400.0).timeout == 86400.0
    assert HoldSettings.of(Policy(hold_for_runs=0.0, hold_strict=True), 3600.0, 86400.0) == HoldSettings(0.0, True)
    assert HoldSettings.of(Policy(hold_for_runs=600.0), 3600.0, 0.0).timeout == 0.0  # the admin turned holds off


def test_a_deadline_that_does_not_parse_names_file_line_and_field(tmp_path: Path) -> None:
    repo = write(tmp_path, annotations='"flower-syncer.io/hold-for-runs": "soon"')
    state = load_repo(repo)
    [d] = [d for d in state.diagnostics if "hold-for-runs" in d.path]
    assert (d.file, d.line) == ("federations/fed.yaml", 5)
    assert d.path == "metadata.annotations['flower-syncer.io/hold-for-runs']"
    assert "'soon' is not a duration" in d.message and FED_UNIT in state.failed
    good = load_repo(write(tmp_path, annotations='"flower-syncer.io/hold-for-runs": "2h30m"'))
    plan = plan_repo(good, render_repo(good))
    assert plan.units[FED_UNIT].policy.hold_for_runs == 9000.0


# -- the engine applies a decision ---------------------------------------------------------------

@pytest.fixture
def kube() -> FakeKube:
    api = FakeApiServer()
    api.add_namespace(NS)
    return FakeKube(api)


def _plan(repo: Path, revision: str = "r1") -> Any:
    state = load_repo(repo)
    return plan_repo(state, render_repo(state), revision=revision)


def _restart_and_scale(repo: Path) -> None:
    """The SuperLink gets a new flag (a restart); pool a goes from 1 to 3 SuperNodes (no restart)."""
    (repo / "federations" / "fed.yaml").write_text(
        federation("fed", pools=pool("a", 3), superlink="    extraArgs: [--fab-state-dir=/tmp]\n"))


def test_a_held_restart_keeps_the_live_spec_and_the_rest_applies(kube: FakeKube, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    repo = write(tmp_path)
    engine = Engine(kube)
    assert engine.sync(_plan(repo), SyncOptions()).ok
    _restart_and_scale(repo)
    asked: list[Disruption] = []
    runs = ["run 7 running"]

    def gate(d: Disruption) -> str:
        asked.append(d)
        return f"the SuperLink held while {runs[0]} in progress"

    monkeypatch.setattr("syncer.engine.outcome.utc_now", lambda: "2026-11-28T18:00:00Z")
    plan = _plan(repo, "r2")
    report = engine.sync(plan, SyncOptions(gate=gate))
    [res] = report.units
    assert res.ok and res.is_held() and [d.target for d in res.held] == ["superlink"]
    assert [d.target for d in asked] == ["superlink"]  # the gate is asked only for what stops pods
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "--fab-state-dir=/tmp" not in str(superlink["spec"]["template"])
    scaled = kube.get("StatefulSet", NS, "fed-supernode-a")
    assert scaled is not None and scaled["spec"]["replicas"] == 3  # applied at once
    inv = LiveState.load(kube, None).inventories[FED_UNIT]
    assert inv.condition is not None and inv.condition.reason == "Held"
    assert inv.condition.message == "the SuperLink held while run 7 running in progress"
    cond = synced_condition(result=res)
    assert (cond.reason, cond.message) == ("Held", "the SuperLink held while run 7 running in progress")
    assert res.to_dict()["held"] == cond.message
    # `flower-syncer status` (no agent: the inventory's record) shows it in its SYNCED column and in JSON
    [st] = status(kube, nodes=False).units
    assert st.to_dict()["synced"] == "Held" and "Held" in format_report(StatusReport([st])).splitlines()[1]
    # held again: no write (the record stays)
    again = engine.sync(plan, SyncOptions(gate=gate))
    assert again.units[0].is_held() and again.writes == 0
    # other runs now: the record says so, and keeps the time the hold began
    runs[0], writes = "run 8 running", kube.writes
    monkeypatch.setattr("syncer.engine.outcome.utc_now", lambda: "2026-11-28T18:30:00Z")
    assert engine.sync(plan, SyncOptions(gate=gate)).units[0].is_held() and kube.writes == writes + 1
    inv = LiveState.load(kube, None).inventories[FED_UNIT]
    assert inv.condition is not None and "run 8 running" in inv.condition.message
    assert inv.condition.since == "2026-11-28T18:00:00Z"
    # the runs ended: the restart goes ahead
    done = engine.sync(plan, SyncOptions(gate=lambda d: None))
    assert done.ok and not done.units[0].is_held()
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "--fab-state-dir=/tmp" in str(superlink["spec"]["template"])
    inv = LiveState.load(kube, None).inventories[FED_UNIT]
    assert inv.condition is not None and (inv.condition.reason, inv.condition.since) == ("Synced",
                                                                                          "2026-11-28T18:30:00Z")


def test_a_held_flower_upgrade_keeps_the_superlink_services_ports_until_the_superlink_restarts(
        kube: FakeKube, tmp_path: Path) -> None:
    """1.26 -> 1.42 moves the SuperLink's ports (9092/9093 -> 8000 behind the same Service ports):
    while its restart is held, the old pod listens on the old ones, so its Service keeps them
    (SuperNodes reconnecting, and the agent reading the runs, still reach it); both go together."""
    repo = write(tmp_path)
    fed = repo / "federations" / "fed.yaml"
    fed.write_text(federation("fed", version="1.26.0"))
    engine = Engine(kube)
    assert engine.sync(_plan(repo), SyncOptions()).ok

    def ports() -> list[object]:
        svc = kube.get("Service", NS, "fed-superlink")
        assert svc is not None
        return [p["targetPort"] for p in svc["spec"]["ports"]]

    assert ports() == [9092, 9093]
    fed.write_text(federation("fed", version="1.42.0"))
    asked: list[Disruption] = []
    [res] = engine.sync(_plan(repo, "r2"), SyncOptions(gate=_holding(asked))).units
    assert res.ok and res.is_held()
    assert ports() == [9092, 9093]
    svc = next(c for c in res.changes if c.ref.kind == "Service" and c.ref.name == "fed-superlink")
    assert svc.action is Action.SKIPPED and "held with StatefulSet fed-superlink" in svc.message
    supernodes = next(c for c in res.changes if c.ref.kind == "Service" and c.ref.name == "fed-supernode-a")
    assert supernodes.action is not Action.SKIPPED  # its target ports stay: not held
    done = engine.sync(_plan(repo, "r2"), SyncOptions(gate=lambda d: None))
    assert done.ok and not done.units[0].is_held()
    assert ports() == [8000, 8000]
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "superlink:1.42.0" in str(superlink["spec"]["template"])
    assert engine.sync(_plan(repo, "r2"), SyncOptions(gate=_holding(asked))).writes == 0


def _holding(asked: list[Disruption]) -> Any:
    def gate(d: Disruption) -> str:
        asked.append(d)
        return f"{d.subject()} held while run 7 running in progress"
    return gate


def test_a_pool_removed_or_scaled_down_during_runs_is_held_and_goes_ahead_after(kube: FakeKube,
                                                                               tmp_path: Path) -> None:
    """Fewer replicas stop SuperNodes and a pool removed from a Federation that stays stops all of
    its own: both wait for the runs like a restart; the rest of the unit applies at once."""
    repo = write(tmp_path, pools=pool("a", 3) + pool("b", 1))
    engine = Engine(kube)
    assert engine.sync(_plan(repo), SyncOptions()).ok
    write(tmp_path, pools=pool("a", 1))
    asked: list[Disruption] = []
    plan = _plan(repo, "r2")
    [res] = engine.sync(plan, SyncOptions(gate=_holding(asked))).units
    assert res.ok and res.is_held(), res.to_dict()
    assert sorted((d.target, d.effect) for d in res.held) == [("a", Effect.SCALES_DOWN), ("b", Effect.REMOVES)]
    assert [d.describe() for d in res.held if d.effect is Effect.SCALES_DOWN] == [
        "scales down pool a (1 SuperNode): 2 of 3 stop"]
    a = kube.get("StatefulSet", NS, "fed-supernode-a")
    assert a is not None and a["spec"]["replicas"] == 3
    assert kube.get("StatefulSet", NS, "fed-supernode-b") is not None
    inv = LiveState.load(kube, None).inventories[FED_UNIT]
    assert ObjectRef("StatefulSet", NS, "fed-supernode-b") in inv.entries  # still ours, pruned later
    assert inv.condition is not None and inv.condition.reason == "Held"
    # the runs ended: both go ahead
    done = engine.sync(plan, SyncOptions(gate=lambda d: None))
    assert done.ok and not done.units[0].is_held()
    a = kube.get("StatefulSet", NS, "fed-supernode-a")
    assert a is not None and a["spec"]["replicas"] == 1
    assert kube.get("StatefulSet", NS, "fed-supernode-b") is None
    # more replicas stop nothing: never asked
    write(tmp_path, pools=pool("a", 4))
    asked.clear()
    assert not engine.sync(_plan(repo, "r3"), SyncOptions(gate=_holding(asked))).units[0].is_held()
    assert asked == []


def test_moving_the_superlinks_state_during_runs_is_held(kube: FakeKube, tmp_path: Path) -> None:
    """`superlink-state` memory -> persistent recreates the SuperLink: the runs in progress would
    end, so it waits for them like any restart of the SuperLink."""
    repo = write(tmp_path, annotations='"flower-syncer.io/superlink-state": memory')
    engine = Engine(kube)
    assert engine.sync(_plan(repo), SyncOptions()).ok
    uid = (kube.get("StatefulSet", NS, "fed-superlink") or {})["metadata"]["uid"]
    write(tmp_path, annotations='"flower-syncer.io/superlink-state": persistent')
    asked: list[Disruption] = []
    plan = _plan(repo, "r2")
    [res] = engine.sync(plan, SyncOptions(gate=_holding(asked))).units
    assert res.is_held() and [(d.target, d.effect) for d in res.held] == [("superlink", Effect.RECREATES)]
    live = kube.get("StatefulSet", NS, "fed-superlink") or {}
    assert live["metadata"]["uid"] == uid and "volumeClaimTemplates" not in live["spec"]
    [done] = engine.sync(plan, SyncOptions(gate=lambda d: None)).units
    assert done.ok and not done.is_held()
    live = kube.get("StatefulSet", NS, "fed-superlink") or {}
    assert live["metadata"]["uid"] != uid and "volumeClaimTemplates" in live["spec"]


# -- the agent -----------------------------------------------------------------------------------

def test_a_hold_going_on_survives_a_failed_read_of_the_runs_until_its_deadline() -> None:
    """One failed read of a busy SuperLink (a timeout) in the middle of a hold: the restart stays
    held (it would kill the run the hold protects), up to the hold's deadline."""
    unknown = Runs(False, why="the SuperLink does not answer")
    mid = decide([SUPERLINK], unknown, HOUR, now=NOW + 600, held_since=NOW, holding_for=(7,))
    assert mid.hold and mid.why is Why.UNKNOWN_STRICT and mid.deadline == NOW + 3600 and mid.runs == (7,), mid
    assert "holding for runs in progress" in mid.message
    again = decide([SUPERLINK], unknown, HOUR, now=NOW + 700, held_since=NOW, holding_for=mid.runs)
    assert again.hold  # a second failed read too
    assert not decide([SUPERLINK], unknown, HOUR, now=NOW + 3600, held_since=NOW, holding_for=(7,)).hold  # deadline
    # a hold that only waited for the first read (after a start) is not one for runs: unknown runs go ahead
    assert not decide([SUPERLINK], unknown, HOUR, now=NOW + 600, held_since=NOW).hold


def test_a_cut_run_list_is_not_read_as_no_run(kube: FakeKube, tmp_path: Path) -> None:
    """A SuperLink that lists more runs than the agent reads (truncated): the runs in progress may
    be among those not read, so they are unknown, never "no run in progress"."""
    from dataclasses import replace

    agent, _ = _agent(kube, tmp_path, {FED_UNIT: replace(_health(), truncated=True)}, [NOW])
    runs = agent.holds.runs(FED_UNIT, agent.installed.plan)
    assert not runs.known and "more runs than the agent reads" in runs.why


def _health(*runs: RunInfo, reachable: bool = True) -> FlowerHealth:
    return FlowerHealth(reachable, "fed-superlink.flower.svc:9093", "2026-11-28T18:00:00Z",
                        error="" if reachable else "connection refused", active=runs)


class _Probe:
    """Flower-level health's probe as the holds see it: the answers checks got since the last
    round (`answers`), and the checks asked for now (`asked`: unit and what to call once answered)."""

    enabled = True

    def __init__(self, outside: bool) -> None:
        self.outside = outside
        self.answers: dict[Unit, ControlAnswer] = {}
        self.asked: list[tuple[Unit, Callable[[], None]]] = []

    def unreachable_from_here(self, address: str) -> bool:
        return self.outside

    def answer_for(self, unit: Unit, target: object) -> ControlAnswer | None:
        return self.answers.get(unit)

    def ask_now(self, unit: Unit, target: object, then: Callable[[], None]) -> None:
        self.asked.append((unit, then))


def _agent(kube: FakeKube, tmp_path: Path, health: dict[Unit, FlowerHealth],
           clock: list[float], *, outside: bool = False, probe: _Probe | None = None) -> tuple[Agent, list[Event]]:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": federation()})
    return _agent_at(kube, root, {"federations/fed.yaml": federation(
        "fed", pools=pool("a", 3), superlink="    extraArgs: [--fab-state-dir=/tmp]\n")}, health, clock,
        probe or _Probe(outside))


def _agent_at(kube: FakeKube, root: Path, change: dict[str, str], health: dict[Unit, FlowerHealth],
              clock: list[float], probe: _Probe) -> tuple[Agent, list[Event]]:
    """An agent leading over the repository `root`, applied as it is, with `change` (files and their
    new text) installed as the next revision, not synced yet."""
    state = load_repo(root)
    assert not state.failed, state.diagnostics
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    flower = cast(FlowerWatch, SimpleNamespace(probe=probe, health=health, to_dict=lambda u: None,
                                               recorded=lambda u: None))
    events: list[Event] = []  # what the agent reports (the leader's, once it leads)
    recorder = cast(EventRecorder, SimpleNamespace(record=events.append))
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(), recorder, flower=lambda report, rekey: flower)
    agent.cache.state = LiveState.load(kube, None)
    agent.holds.clock = lambda: clock[0]
    for name, text in change.items():
        (root / name).write_text(text)
    install(agent, root, "r2")
    agent.cache.synced.set()
    agent.leading.set()
    return agent, events


def _sync(agent: Agent) -> None:
    """As a worker and then the dispatcher do: sync the unit, handle its UnitSynced."""
    agent.syncs.sync(FED_UNIT)
    agent.dispatch_pending()


RUN7 = RunInfo(7, "app", "1.0", "running", "", running_at="2026-11-28T18:00:00Z")


def test_the_agent_holds_while_its_federation_trains_and_goes_ahead_when_the_run_ends(
        kube: FakeKube, tmp_path: Path) -> None:
    health = {FED_UNIT: _health(RUN7)}
    clock = [NOW]
    agent, events = _agent(kube, tmp_path, health, clock)
    _sync(agent)
    state = agent.unit_conditions()[FED_UNIT]
    assert state["synced"] == "Held" and "run 7 running" in state["conditions"][0]["message"]
    report = next(u for u in agent.status()["units"] if u["unit"] == FED_UNIT.id)
    assert report["hold"]["runs"] == [7] and report["hold"]["since"] == "2027-01-15T08:00:00Z"
    assert report["hold"]["deadline"] == "2027-01-15T09:00:00Z"
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld"]
    assert agent.metrics.registry.get_sample_value("flower_syncer_unit_state", {
        "unit": FED_UNIT.id, "synced": "Held", "health": "Unknown"}) == 1
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "--fab-state-dir" not in str(superlink["spec"]["template"])
    assert agent.holds.due(agent.installed.plan) == []  # still running
    health[FED_UNIT] = _health()  # the run completed (the next Flower-level health round says so)
    assert agent.holds.due(agent.installed.plan) == [FED_UNIT]
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "--fab-state-dir=/tmp" in str(superlink["spec"]["template"])
    resumed = [e for e in events if e.reason == "RolloutResumed"]
    assert len(resumed) == 1 and resumed[0].note.startswith("the runs ended")


def test_a_hold_goes_ahead_at_its_deadline_or_when_a_person_releases_it(kube: FakeKube, tmp_path: Path) -> None:
    clock = [NOW]
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(RUN7)}, clock)
    _sync(agent)
    assert agent.holds.status(FED_UNIT) is not None
    flowerunit = {"metadata": {"annotations": {"flower-syncer.io/release-hold": "2027-01-15T07:59:00Z"}}}
    assert not agent.holds.release_seen(FED_UNIT, flowerunit)  # before the hold began: not this one
    clock[0] = NOW + 3600
    assert agent.holds.due(agent.installed.plan) == [FED_UNIT]
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld", "RolloutResumed"]
    resumed = [e for e in events if e.action == "Hold"][-1]
    assert resumed.note.startswith("the deadline passed") and "run 7 running still in progress" in resumed.note


def test_a_person_releases_a_hold_by_annotating_the_flowerunit(kube: FakeKube, tmp_path: Path) -> None:
    clock = [NOW]
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(RUN7)}, clock)
    _sync(agent)
    assert not agent.work.busy()  # only its deadline is queued
    flowerunit = {"metadata": {"annotations": {"flower-syncer.io/release-hold": "2027-01-15T08:05:00Z"}}}
    assert agent.holds.release_seen(FED_UNIT, flowerunit) and agent.work.busy()  # queued at once
    assert not agent.holds.release_seen(FED_UNIT, flowerunit)  # the same value again: nothing new
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    resumed = [e for e in events if e.action == "Hold"][-1]
    assert resumed.reason == "RolloutResumed" and resumed.note.startswith("a person released it")


def test_a_person_releases_a_hold_through_the_web_view(kube: FakeKube, tmp_path: Path) -> None:
    """The web view's action (behind the API token): the agent's own clock says when, so a hold
    begun before it goes ahead at once; a unit that holds nothing is left alone."""
    from syncer.agent.runner import _View

    clock = [NOW]
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(RUN7)}, clock)
    _sync(agent)
    assert not agent.work.busy()
    clock[0] = NOW + 60
    assert _View(agent, kube, None).release_hold(FED_UNIT.id) and agent.work.busy()  # queued at once
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    assert [e for e in events if e.action == "Hold"][-1].note.startswith("a person released it")
    assert not _View(agent, kube, None).release_hold(FED_UNIT.id)  # nothing held any more


def test_a_superlink_the_agent_cannot_ask_holds_nothing_and_says_so(kube: FakeKube, tmp_path: Path) -> None:
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(reachable=False)}, [NOW])
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    [said] = [e for e in events if e.action == "Hold"]
    assert (said.type, said.reason) == ("Warning", "RestartNotHeld") and "connection refused" in said.note
    assert agent.holds.held == {}


def test_resync_release_hold_annotates_the_units_flowerunit(kube: FakeKube, tmp_path: Path) -> None:
    from syncer.actions.holds import release_hold
    from syncer.identity import UnknownUnit

    assert Engine(kube).sync(_plan(write(tmp_path)), SyncOptions()).ok
    kube.apply({"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
                "metadata": {"name": "federation.fed", "namespace": NS}}, force=True)
    unit, at = release_hold(kube, "fed", now=NOW)
    assert (unit, at) == (FED_UNIT, "2027-01-15T08:00:00Z")
    flowerunit = kube.get("FlowerUnit", NS, "federation.fed")
    assert flowerunit is not None
    assert flowerunit["metadata"]["annotations"] == {"flower-syncer.io/release-hold": at,
                                                     "flower-syncer.io/requestedAt": at}
    with pytest.raises(UnknownUnit):
        release_hold(kube, "nope")


def test_every_restart_of_a_unit_is_held_and_named(kube: FakeKube, tmp_path: Path) -> None:
    clock = [NOW]
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(RUN7)}, clock)
    (tmp_path / "r" / "federations" / "fed.yaml").write_text(federation(
        "fed", pools=pool("a", 3, extra="        env: [{name: X, value: '1'}]\n"),
        superlink="    extraArgs: [--fab-state-dir=/tmp]\n"))
    install(agent, tmp_path / "r", "r3")
    _sync(agent)
    result = agent.units[FED_UNIT].last_result
    assert result is not None and sorted(d.subject() for d in result.held) == ["pool a (3 SuperNodes)", "the SuperLink"]
    held = [c for c in result.changes if c.message.startswith("held: ")]
    assert sorted(c.message.split(" held while")[0] for c in held) == ["held: pool a (3 SuperNodes)",
                                                                       "held: the SuperLink"]
    [note] = [e.note for e in events if e.reason == "RolloutHeld"]
    assert note.startswith("pool a (3 SuperNodes), the SuperLink held while run 7 running") or note.startswith(
        "the SuperLink, pool a (3 SuperNodes) held while run 7 running"), note
    assert "also held: " in agent.unit_conditions()[FED_UNIT]["conditions"][0]["message"]


def test_the_flowerunit_says_held_and_its_annotation_releases_the_hold(kube: FakeKube, tmp_path: Path) -> None:
    from syncer.agent.flowerunits import KIND, FlowerUnits, object_name
    from tests.doubles import Clock

    clock = [NOW]
    agent, events = _agent(kube, tmp_path, {FED_UNIT: _health(RUN7)}, clock)
    _sync(agent)
    view = FlowerUnits(agent, kube, clock=Clock(NOW))
    view.replace(None, [])
    view._listed()
    assert view.write_round() == 2  # created, then its status
    obj = kube.server.get(KIND, NS, object_name(FED_UNIT))
    assert obj is not None
    synced = next(c for c in obj["status"]["conditions"] if c["type"] == "Synced")
    assert (synced["status"], synced["reason"]) == ("False", "Held") and "run 7 running" in synced["message"]
    obj["metadata"].setdefault("annotations", {})["flower-syncer.io/release-hold"] = "2027-01-15T08:01:00Z"
    assert not agent.work.busy()
    view.event("MODIFIED", obj)  # `kubectl annotate`, as the watch delivers it
    assert agent.work.busy()  # queued at once
    assert agent.drain() == 1
    agent.dispatch_pending()
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld", "RolloutResumed"]


def test_a_restarted_agent_holds_until_it_has_read_the_runs(kube: FakeKube, tmp_path: Path) -> None:
    """Before the first Flower-level health round the runs are not known yet: a held change must
    not go ahead just because the agent restarted."""
    assert decide([SUPERLINK], Runs(False, why="not asked yet", pending=True), HOUR, now=NOW).why is Why.RUNS_PENDING
    health: dict[Unit, FlowerHealth] = {}  # no round yet
    agent, _ = _agent(kube, tmp_path, health, [NOW])
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Held"
    assert agent.holds.due(agent.installed.plan) == []
    health[FED_UNIT] = _health(RUN7)  # the first round: training
    assert agent.holds.due(agent.installed.plan) == [FED_UNIT]
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Held"
    assert agent.holds.status(FED_UNIT)["runs"] == [7]  # type: ignore[index]
    assert agent.holds.due(agent.installed.plan) == []  # now it waits for run 7


def test_a_restart_waiting_for_unread_runs_asks_the_superlink_now_and_goes_ahead_on_its_answer(
        kube: FakeKube, tmp_path: Path) -> None:
    """The first commit after the agent started restarts a pool: held until the runs are read, but
    the SuperLink is asked at once (not at its turn in a status round: 10 s to minutes), once
    however often the unit syncs meanwhile; its answer (no run) syncs the unit again, which goes ahead."""
    probe = _Probe(outside=False)
    agent, events = _agent(kube, tmp_path, {}, [NOW], probe=probe)
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Held"
    _sync(agent)  # synced again meanwhile (an event of its pods): not asked twice
    assert [u for u, _ in probe.asked] == [FED_UNIT]
    assert agent.drain() == 0  # nothing queued until the SuperLink answered
    probe.answers[FED_UNIT] = ControlAnswer("fed-superlink.flower.svc:9093", "2027-01-15T08:00:01Z", (), ())
    probe.asked[0][1]()  # the check answered
    assert agent.drain() == 1
    agent.dispatch_pending()
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"
    superlink = kube.get("StatefulSet", NS, "fed-superlink")
    assert superlink is not None and "--fab-state-dir=/tmp" in str(superlink["spec"]["template"])
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld", "RolloutResumed"]


def test_a_superlink_asked_now_that_answers_with_a_run_keeps_the_hold(kube: FakeKube, tmp_path: Path) -> None:
    probe = _Probe(outside=False)
    agent, _ = _agent(kube, tmp_path, {}, [NOW], probe=probe)
    _sync(agent)
    probe.answers[FED_UNIT] = ControlAnswer("fed-superlink.flower.svc:9093", "2027-01-15T08:00:01Z", (), (RUN7,))
    probe.asked[0][1]()
    assert agent.drain() == 1
    agent.dispatch_pending()
    assert agent.holds.status(FED_UNIT)["runs"] == [7]  # type: ignore[index]


def test_an_agent_outside_the_cluster_does_not_wait_for_runs_it_can_never_read(kube: FakeKube,
                                                                              tmp_path: Path) -> None:
    """A host agent never asks a SuperLink by its Service name (flower_probe: outside-cluster): its
    first commit after a start is not held "until the runs are read", which would never happen."""
    agent, _ = _agent(kube, tmp_path, {}, [NOW], outside=True)
    runs = agent.holds.runs(FED_UNIT, agent.installed.plan)
    assert not runs.known and not runs.pending and "outside the cluster" in runs.why
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"


def test_a_hold_for_a_run_outlasts_the_superlinks_silence(kube: FakeKube, tmp_path: Path) -> None:
    """Held while run 7 trains; then the SuperLink does not answer (busy) at two syncs in a row: the
    restart stays held, for run 7, until the runs are read again or the deadline passes."""
    clock = [NOW]
    health = {FED_UNIT: _health(RUN7)}
    agent, _ = _agent(kube, tmp_path, health, clock)
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Held"
    health[FED_UNIT] = _health(reachable=False)
    for minutes in (1, 2):
        clock[0] = NOW + 60 * minutes
        _sync(agent)
        assert agent.unit_conditions()[FED_UNIT]["synced"] == "Held", minutes
    clock[0] = NOW + 3600
    _sync(agent)
    assert agent.unit_conditions()[FED_UNIT]["synced"] == "Synced"


REL_UNIT = Unit("supernode", NS, "site")


def _release(tag: str) -> str:
    return (f"tls:\n  enabled: false\nsupernode:\n  replicas: 2\n  image:\n    tag: {tag}\n"
            "  superlink:\n    address: fed-superlink\n    port: 9092\n")


def test_a_supernode_release_is_held_while_the_federation_it_dials_trains(kube: FakeKube, tmp_path: Path) -> None:
    """A release's SuperNodes train in the runs of the Federation whose SuperLink they dial: a
    change that restarts them waits for those runs, as the Federation's own pools do."""
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": federation(insecure=True),
                                    "supernodes/site/values.yaml": _release("1.25.0")})
    health = {FED_UNIT: _health(RUN7)}
    agent, events = _agent_at(kube, root, {"supernodes/site/values.yaml": _release("1.26.0")}, health, [NOW],
                              _Probe(False))  # a new image: restarts its pods

    def image() -> str:
        [dep] = [o for o in kube.list("Deployment", NS)[0] if o["metadata"]["name"].startswith("site-")]
        return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])

    agent.syncs.sync(REL_UNIT)
    agent.dispatch_pending()
    state_now = agent.unit_conditions()[REL_UNIT]
    assert state_now["synced"] == "Held", state_now
    assert "run 7 running" in state_now["conditions"][0]["message"]
    assert image().endswith(":1.25.0")
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld"]
    health[FED_UNIT] = _health()  # the run completed
    assert agent.holds.due(agent.installed.plan) == [REL_UNIT]
    agent.syncs.sync(REL_UNIT)
    agent.dispatch_pending()
    assert agent.unit_conditions()[REL_UNIT]["synced"] == "Synced"
    assert image().endswith(":1.26.0")
    assert [e.reason for e in events if e.action == "Hold"] == ["RolloutHeld", "RolloutResumed"]
