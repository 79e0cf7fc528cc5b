"""The agent's decisions, in-process: installing revisions (what changed, what may be pruned, the
revision each unit carries) and which watch events mean work. No threads are started."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from syncer.agent.agent import Agent
from syncer.agent.fetching import poll_delay
from syncer.agent.messages import DriftCheckDue, FetchRequested, ObjectChanged
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.identity import ObjectRef, Unit
from syncer.observe.metrics import Metrics
from syncer.plan import Claims
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import FED, NS, install, pool, repo_at
from tests.builders import federation as fed
from tests.doubles import NoSource
from tests.fakekube import FakeKube

FED_UNIT = Unit("federation", NS, "fed")
CLASH = "fullnameOverride: fed\nsupernode:\n  name: superlink\n"  # renders Service fed-superlink


@pytest.fixture
def agent() -> Agent:
    return build_agent(FakeKube(), NoSource(), Metrics(), AgentOptions())


def test_a_revision_installs_units_with_their_revision(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    assert install(agent, root, "r1") == [FED_UNIT]
    assert agent.desired[FED_UNIT].revision == "r1"
    other = repo_at(tmp_path / "r", {"federations/other.yaml": fed("other")})
    changed = install(agent, other, "r2")
    assert changed == [Unit("federation", NS, "other")]
    assert agent.desired[FED_UNIT].revision == "r1"  # unchanged units keep the revision that made them
    assert agent.installed.plan.revision == "r2"
    loaded = agent.installer.loader.load(other)  # the new file parsed once; both replayed now
    assert (loaded.parsed, loaded.reused, loaded.errors) == (0, 2, 0)


def test_a_clash_never_removes_a_unit_still_in_git(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    install(agent, root, "r1")
    repo_at(root, {"supernodes/aaa/values.yaml": CLASH})
    changed = install(agent, root, "r2")
    assert FED_UNIT in agent.desired  # its last good state stays
    # nothing new to apply and nothing to prune: the unit is synced at its last good state again,
    # which records on its inventory why it is not newer (a ConfigError condition)
    assert changed == [FED_UNIT] and agent.desired[FED_UNIT].revision == "r1"
    assert "/flower/fed-superlink and 1 more object" in agent.installed.plan.errors[FED_UNIT]
    assert not agent.installed.plan.prune_allowed
    assert {u.id for u in agent.installed.plan.failed} == {FED_UNIT.id, f"supernode/{NS}/aaa"}
    assert agent.units[FED_UNIT].config_errors  # and it says why


def test_config_errors_metric_follows_each_revision(agent: Agent, tmp_path: Path) -> None:
    """Set for every unit of the first revision, then changed only where a unit's errors changed."""
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    b = Unit("federation", NS, "b")

    def errors(unit: Unit) -> float | None:
        return agent.metrics.registry.get_sample_value("flower_syncer_config_errors", {"unit": unit.id})

    install(agent, root, "r1")
    assert (errors(FED_UNIT), errors(b)) == (0, 0)
    repo_at(root, {"federations/b.yaml": fed("b").replace("mode: StatefulSet", "mode: Sometimes")})
    install(agent, root, "r2")
    assert (errors(FED_UNIT), errors(b)) == (0, 1)
    repo_at(root, {"federations/b.yaml": fed("b")})
    install(agent, root, "r3")
    assert (errors(FED_UNIT), errors(b)) == (0, 0)


def test_the_claims_are_those_of_the_units_kept(agent: Agent, tmp_path: Path) -> None:
    """Taken from the fresh plan when the agent keeps exactly its units, else made from the units
    kept (a unit that failed claims what its last good state claimed)."""
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    install(agent, root, "r1")
    repo_at(root, {"federations/b.yaml": fed("b", pool("a") + pool("c"))})
    assert install(agent, root, "r2") == [Unit("federation", NS, "b")]
    plan = agent.installed.plan
    assert plan.claims == Claims.of_refs(((u, p.refs) for u, p in plan.units.items()))
    assert ObjectRef("StatefulSet", NS, "b-supernode-c") in plan.claims.objects
    repo_at(root, {"federations/b.yaml": "kind: Federation\n"})  # b fails: keeps its last good claims
    install(agent, root, "r3")
    plan = agent.installed.plan
    assert plan.claims.objects[ObjectRef("StatefulSet", NS, "b-supernode-c")] == Unit("federation", NS, "b")
    assert plan.claims == Claims.of_refs(((u, p.refs) for u, p in plan.units.items()), plan.failed)


def test_a_unit_removed_from_a_clean_repo_is_queued_for_pruning(agent: Agent, tmp_path: Path) -> None:
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed(), "federations/b.yaml": fed("b")})
    install(agent, root, "r1")
    (root / "federations" / "b.yaml").unlink()
    changed = install(agent, root, "r2")
    assert changed == [Unit("federation", NS, "b")]
    assert Unit("federation", NS, "b") not in agent.desired


def queued(agent: Agent) -> list[Unit]:
    """The units the agent put on its work queue, taken off it."""
    units = []
    while (unit := agent.work.get(timeout=0)) is not None:
        units.append(unit)
        agent.work.done(unit)
    return units


def test_only_changes_to_what_we_own_mean_work(agent: Agent, tmp_path: Path) -> None:
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r1")
    queued(agent)  # the revision's own work
    ref = ObjectRef("StatefulSet", NS, "fed-supernode-a")
    agent.handle(ObjectChanged(FED_UNIT, ref, None))
    assert queued(agent) == [FED_UNIT]  # deleted: work
    obj = {"metadata": {"name": ref.name, "namespace": NS, "labels": FED_UNIT.labels()}}
    agent.handle(ObjectChanged(FED_UNIT, ref, obj))
    assert queued(agent) == [FED_UNIT]  # not in an inventory yet: work
    other = Unit("federation", NS, "someone-elses")
    agent.handle(ObjectChanged(other, ObjectRef("StatefulSet", NS, "x"), None))
    assert queued(agent) == []  # neither in our Git nor applied by us: not ours
    assert agent.cache.unit_of(ref, FED_UNIT.labels()) == FED_UNIT
    assert agent.cache.unit_of(ref, {}) is None


class FlakySource:
    """A Git source that is down for the first `failures` fetches."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[float] = []

    def fetch(self) -> object:
        import time

        from syncer.source.refs import SourceError

        self.calls.append(time.monotonic())
        if len(self.calls) <= self.failures:
            raise SourceError("unreachable", "cannot reach the remote")
        return object()

    def describe(self) -> str:
        return "flaky"


def test_a_push_after_a_git_outage_cuts_the_backoff_short() -> None:
    import threading

    from tests.conftest import wait_until

    source = FlakySource(failures=1)
    agent = build_agent(FakeKube(), source, Metrics(),
                        AgentOptions(poll_interval=3600, fetch_backoff=3600))  # neither would come in this test
    thread = threading.Thread(target=agent.fetcher.run, daemon=True)
    thread.start()
    try:
        agent.handle(FetchRequested("start"))  # the first fetch: the remote is down; the next waits an hour
        wait_until("the failed fetch", lambda: len(source.calls) == 1, timeout=5)
        agent.handle(FetchRequested("webhook"))  # a push webhook or a commit event
        wait_until("a fetch right after the push", lambda: len(source.calls) == 2, timeout=5)
    finally:
        agent.shutdown()  # wakes the source thread, which returns
        thread.join(5)
    assert not thread.is_alive()


def test_polls_are_jittered() -> None:
    delays = [poll_delay(60) for _ in range(500)]
    assert min(delays) >= 54 and max(delays) <= 66 and max(delays) - min(delays) > 6


def test_suspended_drift_is_measured_by_a_worker_through_the_queue(tmp_path: Path) -> None:
    """The drift of a suspended unit is a dry-run run by a worker from the one work queue (no
    second thread runs the engine); it never writes."""
    from syncer.agent.messages import DriftCheckDue
    from syncer.engine.live import LiveState
    from syncer.engine.sync import Engine, SyncOptions
    from syncer.render.repo import plan_repo
    from tests.fakekube import FakeApiServer

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = repo_at(tmp_path / "r", {"federations/fed.yaml": fed()})
    state = load_repo(root)
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    suspended = FED.format(name="fed", pools=pool("a", replicas=3),
                           annotations='"flower-syncer.io/suspend": "true"')
    repo_at(root, {"federations/fed.yaml": suspended})  # Git moved on while the unit is suspended
    metrics = Metrics()
    agent = build_agent(kube, NoSource(), metrics, AgentOptions())
    agent.cache.state = LiveState.load(kube, None)
    install(agent, root, "r2")
    agent.cache.synced.set()
    agent.leading.set()
    writes = kube.writes
    agent.handle(DriftCheckDue())
    assert agent.drain() == 1
    assert metrics.registry.get_sample_value("flower_syncer_drift_objects",
                                             {"unit": FED_UNIT.id, "kind": "StatefulSet"}) == 1
    assert kube.writes == writes  # measured, not healed


def test_a_unit_waits_for_the_listed_cluster_instead_of_syncing_on_a_partial_view(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the watches have listed the inventories and objects, a sync would start from a partial
    inventory (and what left Git meanwhile would never be pruned): the unit is requeued, nothing is
    written."""
    from tests.fakekube import FakeApiServer

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions())
    install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r1")
    agent.leading.set()
    monkeypatch.setattr(agent.cache, "wait_synced", lambda timeout: False)
    agent.syncs.sync(FED_UNIT)
    assert kube.writes == 0
    assert agent.work.depth() == 1  # requeued, after its backoff
    agent.cache.synced.set()
    agent.syncs.sync(FED_UNIT)
    assert kube.writes > 0


def test_the_public_steps_do_what_the_threads_do(agent: Agent, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """dispatch_pending handles the queued events as the dispatcher does, a failure reported as the
    unit's and never raised; drain works the queued units as a worker does: a standby syncs none."""
    from syncer.agent.messages import InventoryDeleted

    for unit in install(agent, repo_at(tmp_path / "r", {"federations/fed.yaml": fed()}), "r1"):
        agent.work.add(unit)  # what the dispatcher does with the changed units
    assert agent.drain() == 1  # taken and skipped: a standby writes nothing
    assert agent.kube.writes == 0 and agent.units[FED_UNIT].last_result is None
    agent.events.put(ObjectChanged(FED_UNIT, ObjectRef("StatefulSet", NS, "fed-supernode-a"), None))
    original = Agent.handle

    def handle(self: Agent, event: object) -> None:
        if isinstance(event, InventoryDeleted):
            raise KeyError("injected")
        original(self, event)  # type: ignore[arg-type]

    monkeypatch.setattr(Agent, "handle", handle)
    agent.events.put(InventoryDeleted(FED_UNIT))
    assert agent.dispatch_pending() == 2
    assert agent.dispatch_pending() == 0
    assert "failed handling a change" in agent.units[FED_UNIT].internal_error
    assert queued(agent) == [FED_UNIT]  # the change, and the retry of the failed event: one unit


class GatedSource(FlakySource):
    """A Git source whose fetch lasts until the test opens the gate, then fails (the remote is down)."""

    def __init__(self) -> None:
        super().__init__(failures=1)
        self.started = threading.Event()
        self.gate = threading.Event()

    def fetch(self) -> object:
        self.started.set()
        assert self.gate.wait(5)
        return super().fetch()


def test_the_agent_is_idle_only_when_nothing_is_in_flight(agent: Agent) -> None:
    """What the heap's settling (agent.memory.Heap) waits for: no event, fetch or sync under way."""
    from tests.conftest import wait_until

    assert agent.idle()
    agent.work.add(FED_UNIT)
    assert not agent.idle()  # a unit to sync
    assert agent.work.get(timeout=0) == FED_UNIT
    assert not agent.idle()  # ... syncing
    agent.work.done(FED_UNIT)
    assert agent.idle()
    agent.request_fetch("test")
    assert not agent.idle()  # an event to handle
    agent.events.get_nowait()
    assert agent.idle()

    source = GatedSource()
    gated = build_agent(FakeKube(), source, Metrics(), AgentOptions(poll_interval=3600, fetch_backoff=3600))
    thread = threading.Thread(target=gated.fetcher.run, daemon=True)
    thread.start()
    try:
        gated.handle(FetchRequested("push"))
        assert source.started.wait(5)
        assert not gated.idle()  # fetching
        source.gate.set()
        wait_until("the failed fetch reported", lambda: not gated.events.empty(), timeout=5)
        assert not gated.idle()  # its outcome waits for the dispatcher
        gated.events.get_nowait()
        wait_until("the source thread waiting again", gated.idle, timeout=5)
    finally:
        gated.shutdown()
        thread.join(5)


class CountingMetrics(Metrics):
    """Which units' state a step published (flower_syncer_unit_state)."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[str] = []

    def set_unit_state(self, unit: str, synced: str, health: str) -> None:
        self.published.append(unit)
        super().set_unit_state(unit, synced, health)


def test_a_revision_publishes_the_state_of_the_units_it_can_change(tmp_path: Path) -> None:
    """A commit to one file of a repository of thousands of units publishes that unit's state, not
    every unit's (the status round publishes them all); a unit whose errors come or go, or that
    leaves Git, is published too."""
    metrics = CountingMetrics()
    agent = build_agent(FakeKube(), NoSource(), metrics, AgentOptions())
    files = {f"federations/{n}.yaml": fed(n) for n in ("a", "b", "c")}
    root = repo_at(tmp_path / "r", files)
    install(agent, root, "r1")
    assert sorted(metrics.published) == [f"federation/{NS}/{n}" for n in ("a", "b", "c")]  # all new

    metrics.published.clear()
    repo_at(root, {"federations/b.yaml": fed("b", pool("extra"))})
    install(agent, root, "r2")
    assert metrics.published == [f"federation/{NS}/b"]

    metrics.published.clear()
    repo_at(root, {"federations/c.yaml": fed("c", pool("p", "many"))})  # broken: replicas is no number
    install(agent, root, "r3")
    assert metrics.published == [f"federation/{NS}/c"]
    assert agent.units[Unit("federation", NS, "c")].config_errors

    metrics.published.clear()
    repo_at(root, {"federations/c.yaml": fed("c")})  # fixed
    install(agent, root, "r4")
    assert metrics.published == [f"federation/{NS}/c"]
    assert not agent.units[Unit("federation", NS, "c")].config_errors


def test_keys_forgotten_queue_the_federation_at_once_without_its_backoff(agent: Agent, tmp_path: Path) -> None:
    """Flower-level health saw a SuperLink that forgot its keys (agent.flower_watch): the
    federation with node authentication is synced now, its key registration first in line even
    when a failed sync had put it in backoff; a unit without node authentication is left alone."""
    from syncer.agent.messages import KeysForgotten
    from tests.nodeauth import auth_federation

    root = repo_at(tmp_path / "r", {"federations/auth.yaml": auth_federation("auth"),
                                    "federations/fed.yaml": fed(),
                                    # the hand-made TLS Secret the federation names (syncer.ours)
                                    "flower-syncer.yaml": f"name: team\ndefaultNamespace: {NS}\n"
                                                          "guardrails: {allowedSecrets: [superlink-tls]}\n"})
    install(agent, root, "r1")
    queued(agent)
    auth = Unit("federation", NS, "auth")
    assert agent.installed.plan.units[auth].node_auth is not None
    agent.work.retry(auth)  # a failed sync (the SuperLink restarting): due only after its backoff
    agent.handle(KeysForgotten(auth))
    agent.handle(KeysForgotten(FED_UNIT))
    assert queued(agent) == [auth]


def test_a_failing_federation_with_supernode_keys_waits_for_its_backoff_not_the_next_drift_check(
        agent: Agent, tmp_path: Path) -> None:
    """The drift check queues every federation with SuperNode keys (no watch sees its SuperLink);
    one whose sync failed (a tenant's SuperLink that answers garbage) waits for its backoff
    instead: the bench of issue 39 saw a hostile one dialled every 10 s at a 300 s backoff."""
    from tests.nodeauth import auth_federation

    root = repo_at(tmp_path / "r", {"federations/auth.yaml": auth_federation("auth"),
                                    "flower-syncer.yaml": f"name: team\ndefaultNamespace: {NS}\n"
                                                          "guardrails: {allowedSecrets: [superlink-tls]}\n"})
    install(agent, root, "r1")
    queued(agent)
    auth = Unit("federation", NS, "auth")
    assert agent.installed.plan.units[auth].node_auth is not None
    agent.work.retry(auth)  # its last sync failed: retried after its backoff
    agent.handle(DriftCheckDue())
    assert queued(agent) == []
    agent.work.forget(auth)  # a sync succeeded
    agent.handle(DriftCheckDue())
    assert queued(agent) == [auth]
