"""FlowerUnits on the fake API server: created for each unit, status written only when the unit's
state changes (zero writes when nothing did), an annotation asks for exactly one resync, a unit
removed from Git and pruned loses its FlowerUnit, and a missing CRD is a clear error, not a crash."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from syncer.agent.agent import Agent
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.flowerunits import CRD_NAME, KIND, FlowerUnits, object_name, unit_status
from syncer.agent.messages import ResyncRequested
from syncer.agent.reconcile_request import ANN_REQUESTED_AT
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import FlowerFactory, build_agent
from syncer.engine.live import LiveState
from syncer.identity import LABEL_REPOSITORY, Unit
from syncer.observe.conditions import UnitCondition
from syncer.observe.metrics import Metrics
from tests.builders import NS, install, pool, repo_at
from tests.builders import federation as fed
from tests.conftest import wait_until
from tests.doubles import Clock, NoSource
from tests.fakekube import FakeKube

FED_UNIT = Unit("federation", NS, "fed")


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def agent(kube: FakeKube, tmp_path: Path) -> Agent:
    return make_agent(kube, tmp_path)


def make_agent(kube: FakeKube, tmp_path: Path, flower: FlowerFactory | None = None) -> Agent:
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(), flower=flower)
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r1")
    agent.cache.synced.set()
    agent.leading.set()
    agent.book.health[FED_UNIT] = HEALTHY  # as a status round finds it
    return agent


HEALTHY = UnitCondition("Healthy", True, "Healthy", "1 workload(s) ready")


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def view(agent: Agent, kube: FakeKube, clock: Clock) -> FlowerUnits:
    return make_view(agent, kube, clock)


def make_view(agent: Agent, kube: FakeKube, clock: Clock) -> FlowerUnits:
    view = FlowerUnits(agent, kube, clock=clock)
    view.replace(None, [])  # the first listing: none yet
    view._listed()
    return view


def sync(agent: Agent, unit: Unit = FED_UNIT) -> None:
    """As a worker and then the dispatcher do (the cache as the watches would have it)."""
    agent.cache.state = LiveState.load(agent.kube, None)
    agent.syncs.sync(unit)
    while not agent.events.empty():
        agent.handle(agent.events.get())


def stored(kube: FakeKube, unit: Unit = FED_UNIT) -> dict[str, Any] | None:
    return kube.server.get(KIND, unit.namespace, object_name(unit))


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], next(c for c in obj["status"]["conditions"] if c["type"] == "Ready"))


def test_a_synced_unit_gets_a_flowerunit_and_an_unchanged_one_no_writes(agent: Agent, kube: FakeKube,
                                                                         view: FlowerUnits) -> None:
    sync(agent)
    assert view.write_round() == 2  # create, then its status
    obj = stored(kube)
    assert obj is not None
    assert obj["metadata"]["labels"][LABEL_REPOSITORY] == agent.repository
    assert Unit.from_labels(NS, obj["metadata"]["labels"]) == FED_UNIT
    assert obj["status"]["lastAppliedRevision"] == "r1"
    assert ready(obj) == {"type": "Ready", "status": "True", "reason": "Healthy",
                          "message": "applied revision r1; 1 workload(s) ready",
                          "lastTransitionTime": "2027-01-15T08:00:00Z"}
    assert [(c["type"], c["status"], c["reason"]) for c in obj["status"]["conditions"]] == [
        ("Ready", "True", "Healthy"), ("Synced", "True", "Synced"), ("Healthy", "True", "Healthy")]
    writes = kube.writes
    assert view.write_round() == 0
    sync(agent)  # the same revision again: nothing about the unit changed
    view.event("MODIFIED", obj)  # the watch echoes our own write
    assert view.write_round() == 0
    assert kube.writes == writes


def test_status_is_written_when_the_state_changes_and_keeps_its_transition_time_otherwise(
        agent: Agent, kube: FakeKube, view: FlowerUnits, clock: Clock, tmp_path: Path) -> None:
    assert view.write_round() == 0  # its namespace is made by its first sync
    kube.server.add_namespace(NS)
    assert view.write_round() == 2  # created, not synced yet
    obj = stored(kube)
    assert obj is not None and ready(obj)["status"] == "Unknown" and ready(obj)["reason"] == "Pending"
    assert "lastAppliedRevision" not in obj["status"]
    clock.now += 60
    sync(agent)
    assert view.write_round() == 1
    first = stored(kube)
    assert first is not None and ready(first)["status"] == "True"
    assert ready(first)["lastTransitionTime"] == "2027-01-15T08:01:00Z"
    clock.now += 60
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed(pools=pool("a", replicas=2))}), "r2")
    sync(agent)
    assert view.write_round() == 1
    second = stored(kube)
    assert second is not None and second["status"]["lastAppliedRevision"] == "r2"
    assert ready(second)["lastTransitionTime"] == "2027-01-15T08:02:00Z"
    assert view.write_round() == 0


class Recorded:
    """What agent.flower_watch records of a federation for its FlowerUnit, as a test sets it."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None

    def recorded(self, unit: Unit) -> dict[str, Any] | None:
        return self.value


def test_flower_health_is_kept_written_when_it_changes_and_removed_when_no_longer_known(
        kube: FakeKube, tmp_path: Path, clock: Clock) -> None:
    flower = Recorded()
    agent = make_agent(kube, tmp_path, flower=lambda report, rekey: cast(FlowerWatch, flower))
    view = make_view(agent, kube, clock)
    sync(agent)
    view.write_round()
    flower.value = {"reachable": True, "supernodes": {"online": 2}}
    assert view.write_round() == 1
    obj = stored(kube)
    assert obj is not None and obj["status"]["flower"] == {**flower.value, "checkedAt": "2027-01-15T08:00:00Z"}
    clock.now += 60
    assert view.write_round() == 0  # the same answer: no write, and it stays "since" its first time
    flower.value = {"reachable": True, "supernodes": {"online": 1},
                    "condition": {"reason": "Degraded", "message": "not connected"}}
    assert view.write_round() == 1
    obj = stored(kube)
    assert obj is not None and obj["status"]["flower"]["checkedAt"] == "2027-01-15T08:01:00Z"
    flower.value = {"reachable": True, "supernodes": {"online": 2}}  # connected again: no condition
    assert view.write_round() == 1
    obj = stored(kube)
    assert obj is not None and "condition" not in obj["status"]["flower"]  # replaced, not merged in
    assert view.write_round() == 0
    flower.value = None  # e.g. --flower-health off
    assert view.write_round() == 1
    obj = stored(kube)
    assert obj is not None and "flower" not in obj["status"]
    assert view.write_round() == 0


def test_a_config_error_shows_its_diagnostic_and_the_fix_clears_it(agent: Agent, kube: FakeKube,
                                                                   view: FlowerUnits, tmp_path: Path) -> None:
    sync(agent)
    view.write_round()
    broken = fed(pools=pool("a").replace("replicas:", "replica:"))
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": broken}), "r2")
    sync(agent)  # its last good state stays applied
    assert view.write_round() == 1
    obj = stored(kube)
    assert obj is not None
    cond = ready(obj)
    assert (cond["status"], cond["reason"]) == ("False", "ConfigError")
    assert "federations/fed.yaml:" in cond["message"] and "replica" in cond["message"]
    assert obj["status"]["lastAppliedRevision"] == "r1"  # what is applied
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r3")  # the fix
    sync(agent)
    assert view.write_round() == 1
    fixed = stored(kube)
    assert fixed is not None and ready(fixed)["status"] == "True"
    assert fixed["status"]["lastAppliedRevision"] == "r1"  # r3 renders what r1 did: the unit keeps r1


def test_an_annotation_asks_for_exactly_one_resync_and_is_recorded_as_handled(agent: Agent, kube: FakeKube,
                                                                              view: FlowerUnits) -> None:
    sync(agent)
    view.write_round()
    obj = stored(kube)
    assert obj is not None
    kube.server.edit(KIND, NS, object_name(FED_UNIT), {"metadata": {"annotations": {ANN_REQUESTED_AT: "1700"}}},
                     manager="kubectl-annotate")
    annotated = stored(kube)
    assert annotated is not None
    view.event("MODIFIED", annotated)
    requests = [agent.events.get() for _ in range(agent.events.qsize())]
    assert [(type(e), getattr(e, "unit", None)) for e in requests] == [(ResyncRequested, FED_UNIT.id)]
    view.event("MODIFIED", annotated)  # seen again (a re-list, a status write's echo): not a new request
    assert view.write_round() == 0  # the resync has not finished: nothing to record yet
    assert agent.events.empty()
    request = cast(ResyncRequested, requests[0])
    assert request.waiter is not None and request.waiter.selector == FED_UNIT.id
    request.waiter.finish()  # the resync finished (the integration test runs the real one)
    assert view.write_round() == 1
    done = stored(kube)
    assert done is not None and done["status"]["lastHandledReconcileAt"] == "1700"
    assert view.write_round() == 0
    # the next leader (no memory of it) does not handle the same value again
    successor = FlowerUnits(agent, kube)
    successor.replace(None, [done])
    assert agent.events.empty() and successor.requests.requested == 0
    # a new value is a new request; a standby leaves it for the leader
    kube.server.edit(KIND, NS, object_name(FED_UNIT), {"metadata": {"annotations": {ANN_REQUESTED_AT: "1701"}}},
                     manager="kubectl-annotate")
    again = stored(kube)
    assert again is not None
    agent.leading.clear()
    successor.event("MODIFIED", again)
    assert agent.events.empty()
    agent.leading.set()
    successor.event("MODIFIED", again)
    assert agent.events.qsize() == 1


def test_a_unit_removed_from_git_loses_its_flowerunit_after_the_prune(agent: Agent, kube: FakeKube,
                                                                      view: FlowerUnits, tmp_path: Path) -> None:
    sync(agent)
    view.write_round()
    other = Unit("federation", NS, "foreign")
    foreign = {"apiVersion": "flower-syncer.io/v1alpha1", "kind": KIND,
               "metadata": {"name": object_name(other), "namespace": NS,
                            "labels": {**other.labels(), LABEL_REPOSITORY: "someone-else"}}}
    view.event("ADDED", kube.create(foreign))  # another repository's unit sharing the cluster
    agent.cache.state = LiveState.load(kube, None)
    install(agent, repo_at(tmp_path / "gone", {"federations/another.yaml": fed("another")}), "r2")  # fed left Git
    # "another" is new (created, its status); fed is not pruned yet: its status says it is Pending
    assert view.write_round() == 3
    left = stored(kube)
    assert left is not None  # its objects (and inventory) are still there
    assert "Pending" in str(left["status"])
    sync(agent)  # the prune
    assert FED_UNIT not in agent.cache.state.inventories
    assert view.write_round() == 1
    assert stored(kube) is None
    assert stored(kube, other) is not None  # not ours: left alone
    assert view.write_round() == 0


def test_a_missing_crd_is_one_clear_error_and_no_writes(agent: Agent, kube: FakeKube, view: FlowerUnits) -> None:
    kube.server.absent.add(KIND)
    stop = threading.Event()
    with capture_logs() as logs:
        reflector = view.reflector(None)
        thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
        thread.start()
        wait_until("the missing CRD noticed", lambda: view.missing, timeout=10)
        view.failed(RuntimeError("unrelated"))
        stop.set()
        thread.join(5)
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 1
    assert CRD_NAME in errors[0]["error"] and "kubectl apply -f charts/flower-syncer/crds/" in errors[0]["error"]
    sync(agent)
    writes = kube.writes
    assert view.write_round() == 0
    assert kube.writes == writes
    kube.server.absent.clear()  # installed later: the next listing turns it on
    view.replace(None, [])
    assert view.missing == ""
    assert view.write_round() == 2


def conditions(synced: tuple[str, str, str], healthy: tuple[str, str, str], revision: str = "abc") -> dict[str, Any]:
    """A value of Agent.unit_conditions()."""
    conds = [{"type": t, "status": st, "reason": r, "message": m}
             for t, (st, r, m) in (("Synced", synced), ("Healthy", healthy))]
    return {"ready": synced[0] == healthy[0] == "True", "revision": revision, "conditions": conds}


OK = ("True", "Synced", "the revision was applied")
FINE = ("True", "Healthy", "2 workload(s) ready")


@pytest.mark.parametrize(("state", "expected"), [
    (conditions(OK, FINE), ("True", "Healthy", "applied revision abc; 2 workload(s) ready")),
    (conditions(("False", "Pending", "not synced yet"), FINE), ("Unknown", "Pending", "not synced yet")),
    (conditions(OK, ("False", "Unknown", "no status round yet")), ("Unknown", "Unknown", "no status round yet")),
    (conditions(OK, ("False", "Progressing", "a: 1/2 ready")), ("Unknown", "Progressing", "a: 1/2 ready")),
    (conditions(OK, ("False", "Degraded", "a: CrashLoopBackOff")), ("False", "Degraded", "a: CrashLoopBackOff")),
    (conditions(("False", "ConfigError", "f.yaml:3:1: bad"), FINE), ("False", "ConfigError", "f.yaml:3:1: bad")),
    (conditions(("False", "SyncFailed", "apply failed"), ("False", "Degraded", "x")),
     ("False", "SyncFailed", "apply failed")),  # Synced first
    (conditions(("False", "Suspended", "not applied"), FINE), ("False", "Suspended", "not applied")),
])
def test_the_adapter_maps_each_state_to_ready(state: dict[str, Any], expected: tuple[str, str, str]) -> None:
    status = unit_status(state)
    cond = status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == ("Ready", *expected)
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Synced", "Healthy"]
    assert ("lastAppliedRevision" in status) is (state["conditions"][0]["status"] == "True")


def test_only_the_object_of_the_units_name_is_its_flowerunit() -> None:
    """A FlowerUnit made by hand with a unit's labels but another name is not taken for the unit's."""
    from syncer.agent.flowerunits import _unit_of

    labels = FED_UNIT.labels()
    assert _unit_of({"metadata": {"name": object_name(FED_UNIT), "namespace": NS, "labels": labels}}) == FED_UNIT
    assert _unit_of({"metadata": {"name": "look-alike", "namespace": NS, "labels": labels}}) is None


def test_the_flowerunits_held_are_slim_and_still_enough_for_the_writer(agent: Agent, kube: FakeKube,
                                                                       view: FlowerUnits) -> None:
    """One FlowerUnit is held per unit for the agent's life: without its managedFields (most of
    its size), with what the writer reads (status, resourceVersion, uid, labels, annotations)."""
    from syncer.agent.flowerunits import slim

    sync(agent)
    assert view.write_round() == 2
    obj = stored(kube)
    assert obj is not None
    whole = {**obj, "metadata": {**obj["metadata"], "annotations": {ANN_REQUESTED_AT: "t1"},
                                 "managedFields": [{"manager": "flower-syncer", "fieldsV1": {"f:status": {}}}]}}
    assert view.reflector(None).transform is slim  # a listing is slimmed page by page
    view.event("MODIFIED", whole)
    held = view.objects[FED_UNIT]
    assert set(held) == {"metadata", "status"}
    assert set(held["metadata"]) == {"name", "namespace", "uid", "resourceVersion", "labels", "annotations"} & set(
        whole["metadata"])
    assert "managedFields" not in held["metadata"] and held["metadata"]["annotations"] == {ANN_REQUESTED_AT: "t1"}
    assert held["status"] == obj["status"] and slim(held) == held
    writes = kube.writes
    assert view.write_round() == 0  # the slim object is enough to see nothing changed
    assert kube.writes == writes


def many(agent: Agent, kube: FakeKube, tmp_path: Path, count: int) -> list[Unit]:
    """`count` federations, each synced, their namespace there."""
    files = {f"federations/f{i:02d}.yaml": fed(f"f{i:02d}") for i in range(count)}
    install(agent, repo_at(tmp_path / "many", files), "r1")
    kube.server.add_namespace(NS)
    units = [Unit("federation", NS, f"f{i:02d}") for i in range(count)]
    for unit in units:
        agent.book.health[unit] = UnitCondition("Healthy", False, "Progressing", "pool a: 0/1 ready")
        sync(agent, unit)
    return units


def test_writes_are_paced_and_what_waits_is_written_in_later_rounds(agent: Agent, kube: FakeKube, view: FlowerUnits,
                                                                    clock: Clock, tmp_path: Path) -> None:
    """30 units turn up at once (the agent's first start): at most WRITE_BURST writes in a burst,
    then WRITE_RATE a second, until every FlowerUnit is there; then nothing."""
    from syncer.agent.flowerunits import WRITE_BURST, WRITE_RATE

    units = many(agent, kube, tmp_path, 30)
    wanted = 2 * len(units)  # each created, then its status written
    assert view.write_round() == WRITE_BURST
    assert view._wanted.is_set()  # the rest is asked for
    assert view.write_round() == 0  # no time passed: no budget
    clock.now += 1
    assert view.write_round() == WRITE_RATE
    done = int(WRITE_BURST + WRITE_RATE)
    for _ in range(wanted):  # bounded: a round that writes nothing would loop for ever
        if done >= wanted:
            break
        clock.now += 1
        done += view.write_round()
    assert done == wanted and all(stored(kube, u) is not None and "status" in (stored(kube, u) or {}) for u in units)
    clock.now += 10
    assert view.write_round() == 0


def test_when_the_budget_is_short_a_unit_whose_readiness_changed_is_written_first(
        agent: Agent, kube: FakeKube, view: FlowerUnits, clock: Clock, tmp_path: Path) -> None:
    """Pods starting one by one change every unit's message; the unit that turned Ready (or a
    commit that synced or failed) is not left behind them."""
    units = many(agent, kube, tmp_path, 30)
    for _ in range(10):
        clock.now += 10
        view.write_round()
    assert all(ready(stored(kube, u) or {})["status"] == "Unknown" for u in units)
    last = units[-1]  # written last if the order were by name alone
    for unit in units[:-1]:
        agent.book.health[unit] = UnitCondition("Healthy", False, "Progressing", "pool a: 1/2 ready")
    agent.book.health[last] = HEALTHY
    for unit in units:
        sync(agent, unit)
    clock.now += 1  # a budget of WRITE_RATE: fewer than the 30 units that changed
    assert view.write_round() < len(units)
    assert ready(stored(kube, last) or {})["status"] == "True"


def test_what_somebody_waits_for_is_written_before_progress_messages() -> None:
    """A new revision applied or a reconcile request handled goes first, as a changed condition."""
    from syncer.agent.flowerunits import _urgency

    ready = {"type": "Ready", "status": "True", "reason": "Healthy", "message": "applied revision r1"}
    was = {"status": {"conditions": [ready], "lastAppliedRevision": "r1"}}
    assert _urgency(was, {"conditions": [{**ready, "message": "applied revision r1; 2/2"}],
                          "lastAppliedRevision": "r1"}) == 2
    assert _urgency(was, {"conditions": [{**ready, "message": "applied revision r2"}],
                          "lastAppliedRevision": "r2"}) == 0
    assert _urgency(was, {"conditions": [ready], "lastAppliedRevision": "r1", "lastHandledReconcileAt": "t"}) == 0
    assert _urgency(was, {"conditions": [{**ready, "status": "False", "reason": "Degraded"}],
                          "lastAppliedRevision": "r1"}) == 0
    assert _urgency(None, {"conditions": [ready]}) == 1


def test_rounds_take_a_tenth_of_the_time_at_most_and_never_wait_more_than_a_second() -> None:
    from syncer.agent.flowerunits import ROUND_GAP, gap_after

    assert gap_after(0.001) == pytest.approx(0.009)  # a few units: the next round almost at once
    assert gap_after(0.03) == pytest.approx(0.27)  # 2,000 units: 30 ms of work, 270 ms of rest
    assert gap_after(5.0) == ROUND_GAP
