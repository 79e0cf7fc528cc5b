"""Flower-level health in the agent: which pools and releases Git expects at a SuperLink
(render.flower_targets), the probe that never holds up a status round and backs off from a
SuperLink that does not answer (agent.flower_probe), and the news it gives once
(agent.flower_watch)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from syncer.agent.flower_probe import DISABLED, INTERVAL, FlowerProbe
from syncer.agent.flower_watch import REKEY_AFTER, FlowerWatch
from syncer.cluster.events import Event
from syncer.cluster.flower_control import (
    ControlApiError,
    ControlErrorCode,
    Listing,
    RegisteredNode,
    RunInfo,
    Transport,
)
from syncer.identity import Unit
from syncer.observe.conditions import HealthReason
from syncer.observe.status import PoolStatus, UnitStatus
from syncer.plan import ExpectedPool, FlowerTarget
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, federation, pool
from tests.conftest import wait_until
from tests.doubles import Clock

FED = Unit("federation", NS, "fed")
TARGET = FlowerTarget("fed-superlink.flower.svc:9093", "http", "", (ExpectedPool(FED.id, "a", 2),))


class FakeApi:
    address = "fed-superlink.flower.svc:9093"
    transport: Transport = "http"

    def __init__(self, nodes: list[RegisteredNode], runs: list[RunInfo], error: ControlApiError | None = None) -> None:
        self.nodes, self.runs, self.error = nodes, runs, error

    def list_nodes(self) -> Listing[RegisteredNode]:
        if self.error is not None:
            raise self.error
        return Listing(self.nodes)

    def list_runs(self) -> Listing[RunInfo]:
        return Listing(self.runs)

    def register(self, public_key: bytes) -> int:
        raise AssertionError("health never registers")

    def unregister(self, node_id: int) -> None:
        raise AssertionError("health never unregisters")

    def close(self) -> None:
        pass


class Connector:
    """Hands out FakeApis; counts connects; can hold them until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.nodes: list[RegisteredNode] = []
        self.runs: list[RunInfo] = []
        self.error: ControlApiError | None = None
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, address: str, transport: str, ca: bytes | None, *, timeout: float) -> FakeApi:
        self.calls += 1
        assert ca is None and timeout <= 5  # plaintext for an insecure federation; a short timeout
        self.gate.wait(10)
        return FakeApi(list(self.nodes), list(self.runs), self.error)


def probe(connector: Connector, clock: Clock, **kwargs: Any) -> FlowerProbe:
    return FlowerProbe(None, clock=clock, connector=connector, **{"cluster_dns": True, **kwargs})


def failed_once(detail: str) -> tuple[Connector, Clock, FlowerProbe]:
    """A probe whose SuperLink went unavailable (`detail`) at its first check, which is over."""
    connector, clock = Connector(), Clock()
    connector.error = ControlApiError("ListNodes", TARGET.address, ControlErrorCode.UNAVAILABLE, detail)
    p = probe(connector, clock)
    p.round({FED: TARGET})
    wait_until("the first failure", lambda: p.round({FED: TARGET})[FED].code == "unavailable")
    return connector, clock, p


def test_a_round_never_waits_for_a_superlink() -> None:
    connector, clock = Connector(), Clock()
    connector.gate.clear()  # the SuperLink hangs
    p = probe(connector, clock)
    try:
        first = p.round({FED: TARGET})[FED]
        assert first.code == "pending" and not first.reachable
        clock.now += 100
        assert p.round({FED: TARGET})[FED].code == "pending"
        assert connector.calls == 1  # one check in flight per SuperLink, never a second
        connector.nodes = [RegisteredNode(1, "online", b"k")]
        connector.gate.set()
        answer = wait_until("the answer", lambda: p.round({FED: TARGET})[FED].nodes)
        assert [n.node_id for n in answer] == [1]
    finally:
        connector.gate.set()
        p.close()


def test_a_federation_whose_pods_just_became_ready_is_asked_at_once() -> None:
    """A SuperLink refused while it started (in backoff) is asked again the round its pods are
    ready, not minutes later (a CI run of the cross-site e2e saw the hub's health stay
    'connection refused' after its SuperLink served)."""
    connector, clock, p = failed_once("refused")
    try:
        connector.error = None
        clock.now += 1.0  # well within its backoff
        p.round({FED: TARGET})
        assert connector.calls == 1
        p.round({FED: TARGET}, frozenset({FED}))  # its pods are ready now
        wait_until("asked at once", lambda: p.round({FED: TARGET})[FED].reachable)
        assert connector.calls == 2
    finally:
        p.close()


def test_a_superlink_asked_now_is_checked_before_any_round_once_and_says_when_it_answered() -> None:
    """A restart held until the runs are read (agent.holding.ask_runs): its SuperLink is checked
    at once, without a status round; asked again while that check runs, no second check starts;
    each caller hears when the answer is in, and a later caller at once."""
    connector, clock = Connector(), Clock()
    connector.gate.clear()  # the SuperLink takes its time
    connector.runs = [RunInfo(7, "app", "1.0", "running", "")]
    p = probe(connector, clock)
    heard: list[str] = []
    try:
        p.ask_now(FED, TARGET, lambda: heard.append("first"))
        wait_until("the check started", lambda: connector.calls == 1)
        p.ask_now(FED, TARGET, lambda: heard.append("second"))
        assert p.answer_for(FED, TARGET) is None and heard == []
        connector.gate.set()
        wait_until("both heard of the answer", lambda: sorted(heard) == ["first", "second"])
        answer = p.answer_for(FED, TARGET)
        assert answer is not None and answer.runs is not None and [r.run_id for r in answer.runs] == [7]
        assert connector.calls == 1
        p.ask_now(FED, TARGET, lambda: heard.append("third"))
        assert heard[-1] == "third" and connector.calls == 1  # answered already: no check
        assert p.round({FED: TARGET})[FED] is answer  # the round reports that answer, not "pending"
    finally:
        connector.gate.set()
        p.close()


def test_a_superlink_asked_soon_is_checked_at_the_round_after_that_not_at_its_turn() -> None:
    """A canary waiting for the SuperLink's next answer (agent.canaries) asks for it within its
    next look (10 s), not at the link's turn (27 s after its last answer); one in backoff keeps it."""
    connector, clock = Connector(), Clock()
    p = probe(connector, clock)
    try:
        p.round({FED: TARGET})
        wait_until("the first answer", lambda: p.round({FED: TARGET})[FED].reachable)
        clock.now += 5.0
        p.round({FED: TARGET})
        assert connector.calls == 1  # not due for 22 s more
        p.soon(FED, TARGET, 10.0)
        clock.now += 9.0
        p.round({FED: TARGET})
        assert connector.calls == 1
        clock.now += 1.0
        p.round({FED: TARGET})
        wait_until("asked at the round 10 s later", lambda: connector.calls == 2)
    finally:
        p.close()
    connector, clock, failing = failed_once("refused")
    try:
        failing.soon(FED, TARGET, 1.0)
        clock.now += 2.0
        failing.round({FED: TARGET})
        assert connector.calls == 1  # its backoff (10 s) stays
    finally:
        failing.close()


def test_a_superlink_that_does_not_answer_is_asked_again_with_backoff() -> None:
    connector, clock, p = failed_once("timed out")
    try:
        assert p.round({FED: TARGET})[FED].error == "timed out"
        for wait, calls in ((5.0, 1), (6.0, 2)):  # 10 s after the first failure
            clock.now += wait
            p.round({FED: TARGET})
            wait_until(f"{calls} calls", lambda c=calls: connector.calls == c)  # type: ignore[misc]
        wait_until("the second answer", lambda: not p._links[next(iter(p._links))].busy)
        clock.now += 15.0  # 20 s after the second failure: not yet
        p.round({FED: TARGET})
        assert connector.calls == 2
        clock.now += 6.0
        p.round({FED: TARGET})
        wait_until("a third call", lambda: connector.calls == 3)
    finally:
        p.close()


def test_an_unresolvable_service_name_says_what_to_do() -> None:
    connector, clock = Connector(), Clock()
    connector.error = ControlApiError("ListNodes", TARGET.address, ControlErrorCode.NOT_RESOLVED,
                                      "the host name does not resolve")
    p = probe(connector, clock)
    try:
        p.round({FED: TARGET})
        answer = wait_until("the answer", lambda: p.round({FED: TARGET})[FED].code == "not-resolved"
                            and p.round({FED: TARGET})[FED].error)
        assert isinstance(answer, str) and "--flower-health off" in answer and "control-api-address" in answer
    finally:
        p.close()


def test_outside_a_cluster_a_service_name_is_not_even_looked_up() -> None:
    connector, clock = Connector(), Clock()
    p = probe(connector, clock, cluster_dns=False)
    try:
        p.round({FED: TARGET})
        answer = wait_until("the answer", lambda: p.round({FED: TARGET})[FED].code == "outside-cluster"
                            and p.round({FED: TARGET})[FED])
        assert connector.calls == 0 and answer and "--flower-health off" in answer.error
        # nothing is known to be wrong with the SuperLink: its federation's health is not lowered
        watch = FlowerWatch(p, lambda unit, event: None, clock)
        health = watch.round({FED: TARGET}, [ready()])[FED]
        assert not health.reachable and health.to_dict()["code"] == "outside-cluster"
        assert watch.check(ready()) is None
        elsewhere = FlowerTarget("127.0.0.1:9", "http", "", TARGET.pools)  # e.g. a port-forward: dialled
        p.round({FED: elsewhere})
        wait_until("a dial", lambda: connector.calls == 1)
    finally:
        p.close()


def test_off_dials_nothing() -> None:
    connector, clock = Connector(), Clock()
    p = probe(connector, clock, enabled=False)
    answer = p.round({FED: TARGET})[FED]
    assert (answer.code, answer.error, connector.calls) == ("disabled", DISABLED, 0)
    watch = FlowerWatch(p, lambda unit, event: None, clock)
    assert watch.round({FED: TARGET}, [ready()]) == {} and watch.check(ready()) is None
    assert watch.to_dict(FED) is None and connector.calls == 0


class FakeProbe:
    enabled = True

    def __init__(self) -> None:
        self.connector = Connector()
        self.clock = Clock()
        self.inner = probe(self.connector, self.clock)

    def round(self, targets: Any, now_ready: Any = frozenset(), budget: float | None = None,
              start_now: bool = True) -> Any:
        """Each round waits for its check: the answer of this round, not the last one."""
        self.inner.round(targets, now_ready)
        wait_until("the check", lambda: not any(link.busy for link in self.inner._links.values()))
        self.clock.now -= 1e6  # asked again now: nothing is due, the answer just got is returned
        try:
            return self.inner.round(targets)
        finally:
            self.clock.now += 1e6

    def start(self) -> None:
        pass


def ready(desired: int = 2) -> UnitStatus:
    return UnitStatus(FED.id, pools=[PoolStatus("a", "StatefulSet", "fed-supernode-a", desired, desired,
                                                healthy=True)])


def test_the_watch_reports_each_failed_run_and_each_lost_pool_once() -> None:
    fake = FakeProbe()
    events: list[Event] = []
    watch = FlowerWatch(fake, lambda unit, event: events.append(event), fake.clock)  # type: ignore[arg-type]
    c = fake.connector
    c.nodes = [RegisteredNode(1, "online", b"a"), RegisteredNode(2, "online", b"b")]
    c.runs = [RunInfo(1, "app", "1", "finished", "failed", details="before the agent")]
    try:
        watch.round({FED: TARGET}, [ready()])
        assert events == []  # a failure from before the agent heard from the SuperLink is not news
        assert watch.check(ready()) is None
        c.runs.append(RunInfo(2, "app", "1", "finished", "failed", details="ServerApp failed: boom"))
        c.nodes = [RegisteredNode(1, "online", b"a"), RegisteredNode(2, "offline", b"b")]
        fake.clock.now += INTERVAL  # the next check of an answering SuperLink
        watch.round({FED: TARGET}, [ready()])
        assert [(e.type, e.reason) for e in events] == [("Warning", "RunFailed"), ("Warning", "SuperNodesLost")]
        assert "run 2 failed: ServerApp failed: boom" in events[0].note
        assert events[1].note == "pool a: 1/2 SuperNodes connected to the SuperLink"
        cond = watch.check(ready())
        assert cond is not None and cond.reason == HealthReason.PROGRESSING  # within the grace
        fake.clock.now += 40
        watch.round({FED: TARGET}, [ready()])
        cond = watch.check(ready())
        assert cond is not None and cond.reason == HealthReason.DEGRADED and "1/2" in cond.message
        assert [(e.reason, e.note) for e in events[2:]] == [("SuperNodesNotConnected", cond.message)]
        watch.check(ready())
        assert len(events) == 3  # nothing new: no news
        assert watch.check(UnitStatus(FED.id, pools=[PoolStatus("a", "StatefulSet", "x", 2, 1)])) is None
        c.nodes = [RegisteredNode(1, "online", b"a"), RegisteredNode(3, "online", b"c")]
        fake.clock.now += INTERVAL
        watch.round({FED: TARGET}, [ready()])
        assert [(e.type, e.reason) for e in events][3:] == [("Normal", "SuperNodesConnected")]
        assert watch.check(ready()) is None
        assert (watch.to_dict(FED) or {})["supernodes"]["online"] == 2
    finally:
        fake.inner.close()


def forgot(events: list[Event]) -> list[Event]:
    return [e for e in events if e.reason == "SuperNodeKeysForgotten"]


def test_keys_the_superlink_forgot_are_registered_again_at_once_through_the_event_queue() -> None:
    """A SuperLink that restarted with its state in memory knows none of the keys flower-syncer
    registered: the unit's key registration is asked for at the first answer that shows it (not at
    the next resync), told once as an Event, and asked again only after REKEY_AFTER."""
    fake = FakeProbe()
    events: list[Event] = []
    asked: list[Unit] = []
    watch = FlowerWatch(fake, lambda unit, event: events.append(event), fake.clock,  # type: ignore[arg-type]
                        rekey=asked.append)
    target = FlowerTarget(TARGET.address, "http", "", TARGET.pools, True, frozenset({b"key-a", b"key-b"}))
    c = fake.connector
    c.nodes = [RegisteredNode(1, "online", b"key-a\n"), RegisteredNode(2, "online", b"key-b")]
    try:
        watch.round({FED: target}, [ready()])
        assert asked == [] and events == []  # it knows them all
        c.nodes = [RegisteredNode(3, "registered", b"key-a")]  # restarted: key-b is unknown
        fake.clock.now += INTERVAL
        watch.round({FED: target}, [ready()])
        assert asked == [FED]
        assert [(e.reason, e.note) for e in forgot(events)] == [(
            "SuperNodeKeysForgotten", "the SuperLink does not know 1 of the 2 SuperNode key(s) Git lists (it lost "
            "its state: restarted in memory?); registering them again")]
        fake.clock.now += INTERVAL
        watch.round({FED: target}, [ready()])
        assert asked == [FED] and len(forgot(events)) == 1  # not again within REKEY_AFTER
        fake.clock.now += REKEY_AFTER
        watch.round({FED: target}, [ready()])
        assert asked == [FED, FED] and len(forgot(events)) == 1  # asked again, not told again
        c.nodes = [RegisteredNode(3, "online", b"key-a"), RegisteredNode(4, "online", b"key-b")]
        fake.clock.now += INTERVAL
        watch.round({FED: target}, [ready()])
        assert asked == [FED, FED]
    finally:
        fake.inner.close()


def test_git_says_which_pools_and_releases_should_reach_a_superlink(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (repo / "federations" / "fed.yaml").write_text(federation("fed", pool("a", 2) + pool("b", 1), insecure=True))
    for release, address in (("site-a", f"fed-superlink.{NS}.svc"), ("site-b", "fed-superlink"),
                             ("elsewhere", "other-superlink.example.com")):
        (repo / "supernodes" / release).mkdir(parents=True)
        (repo / "supernodes" / release / "values.yaml").write_text(
            f"supernode:\n  superlink:\n    address: {address}\n    port: 9092\n")
    state = load_repo(repo)
    assert [d for d in state.diagnostics if d.severity == "error"] == []
    plan = plan_repo(state, render_repo(state), revision="r1")
    target = plan.flower[FED]
    assert target.address == f"fed-superlink.{NS}.svc:9093" and target.ca_secret == "" and not target.node_auth
    assert [(p.unit, p.pool, p.expected, p.keys) for p in target.pools] == [
        (FED.id, "a", 2, frozenset()), (FED.id, "b", 1, frozenset()),
        (f"supernode/{NS}/site-a", "supernode", 1, frozenset()), (f"supernode/{NS}/site-b", "supernode", 1,
                                                                   frozenset())]
    assert list(plan.flower) == [FED]  # only federations


def test_a_flowerunit_keeps_the_health_and_is_written_only_when_it_changes() -> None:
    from syncer.agent.flowerunits import _untimed, with_times

    conditions = [{"type": "Ready", "status": "True", "reason": "Healthy", "message": "m"}]
    desired = {"conditions": conditions, "flower": {"reachable": True, "supernodes": {"online": 2}}}
    first = with_times(desired, {}, "2026-11-26T09:00:00Z")
    assert first["flower"]["checkedAt"] == "2026-11-26T09:00:00Z"
    again = with_times(desired, first, "2026-11-26T09:00:10Z")
    assert again == first and _untimed(first) == _untimed(desired)  # nothing changed: no write
    changed = {**desired, "flower": {"reachable": True, "supernodes": {"online": 1}}}
    assert _untimed(first) != _untimed(changed)
    assert with_times(changed, first, "2026-11-26T09:00:20Z")["flower"]["checkedAt"] == "2026-11-26T09:00:20Z"


def test_the_checks_of_a_round_cost_no_more_than_its_budget_and_the_longest_due_go_first() -> None:
    order: list[str] = []
    clock = Clock()

    def connector(address: str, transport: str, ca: bytes | None, *, timeout: float) -> FakeApi:
        order.append(address)
        return FakeApi([], [])

    p = FlowerProbe(None, clock=clock, connector=connector, cluster_dns=True, workers=1)
    names = [f"fed-{i}" for i in range(5)]
    targets = {Unit("federation", NS, name): FlowerTarget(f"{name}:1", "http", "") for name in names}
    try:
        p.cost = 0.002  # as measured, say: 2 ms of CPU a check
        p.round(targets, budget=0.0045)  # pays for two checks, and half a ms left over
        wait_until("two checks", lambda: len(order) == 2 and not any(link.busy for link in p._links.values()))
        assert p.waiting == 3
        first = sorted(order)
        clock.now += 1
        p.cost = 0.002
        p.round(targets, budget=0.0045)  # 4.5 + 0.5 left over: two more
        wait_until("four checks", lambda: len(order) == 4 and not any(link.busy for link in p._links.values()))
        clock.now += 1
        p.cost = 0.002
        p.round(targets, budget=0.0045)  # the last one due; the first four are not due yet
        wait_until("five checks", lambda: len(order) == 5 and not any(link.busy for link in p._links.values()))
        assert sorted(order) == sorted(f"{n}:1" for n in names)  # each once: none starves, none twice
        assert p.waiting == 0
        clock.now += INTERVAL
        order.clear()
        p.cost = 0.002
        p.round(targets, budget=0.004)  # all due again: 3.5 ms left over and 4 ms: three checks
        wait_until("three checks", lambda: len(order) == 3 and not any(link.busy for link in p._links.values()))
        assert sorted(order[:2]) == first  # the two checked longest ago first
    finally:
        p.close()


def test_a_federation_just_ready_is_asked_beyond_the_budget_and_later_rounds_pay_for_it() -> None:
    connector, clock = Connector(), Clock()
    p = probe(connector, clock, workers=1)
    other = Unit("federation", NS, "other")
    targets = {FED: TARGET, other: FlowerTarget("other-superlink.flower.svc:9093", "http", "")}
    try:
        p.cost = 0.002
        p.round(targets, frozenset({FED}), budget=0.001)  # less than a check: the one just ready still goes
        wait_until("the urgent check", lambda: connector.calls == 1 and not any(k.busy for k in p._links.values()))
        assert p.waiting == 1  # the other waits
        p.cost = 0.002
        p.round(targets, budget=0.0025)  # 1 + 2.5 ms, less the 2 ms the urgent check took: not enough for one
        assert connector.calls == 1 and p.waiting == 1
        p.cost = 0.002
        p.round(targets, budget=0.0025)
        wait_until("the other's check", lambda: connector.calls == 2)
    finally:
        p.close()


def test_the_watch_gives_the_checks_what_the_round_costs_without_them() -> None:
    from syncer.agent.flower_probe import MIN_BUDGET

    watch = FlowerWatch(FakeProbe().inner, lambda unit, event: None, Clock())
    try:
        assert watch.budget() == MIN_BUDGET  # nothing measured yet
        watch.finish_round(own=0.040, flower=0.005)
        assert watch.budget() == 0.035  # the round's 40 ms, less the 5 ms Flower-level health spent in it
        watch.finish_round(own=0.001, flower=0.0)
        assert round(watch.budget(), 4) == 0.0322  # a moving average: one cheap round lowers it a fifth of the way
        for _ in range(30):
            watch.finish_round(own=0.001, flower=0.0)
        assert watch.budget() == MIN_BUDGET  # however cheap the round, the checks get at least this
    finally:
        watch.probe.close()


def test_the_watch_starts_the_checks_after_the_rounds_own_work() -> None:
    """Started during the round, the checks competed with it for the interpreter (its own work cost
    half as much again, bench/status_round.py)."""
    connector, clock = Connector(), Clock()
    p = probe(connector, clock)
    watch = FlowerWatch(p, lambda unit, event: None, clock)
    try:
        assert watch.round({FED: TARGET}, [ready()])[FED].code == "pending"
        assert connector.calls == 0  # chosen, not started
        watch.finish_round(own=0.030, flower=0.002)
        wait_until("the check", lambda: connector.calls == 1)
    finally:
        p.close()


def test_pods_ready_at_the_first_round_did_not_just_become_ready() -> None:
    """An agent that starts beside 1,000 running federations does not ask every SuperLink at once,
    beyond the budget: only pods that become ready while it watches jump the queue."""
    connector, clock = Connector(), Clock()
    p = probe(connector, clock)
    watch = FlowerWatch(p, lambda unit, event: None, clock)
    others = {Unit("federation", NS, f"fed-{i}"): FlowerTarget(f"fed-{i}:1", "http", "") for i in range(40)}
    statuses = [UnitStatus(u.id, pools=[PoolStatus("a", "StatefulSet", "x", 1, 1, healthy=True)]) for u in others]
    try:
        p.cost = 0.002
        watch.round(others, statuses)
        assert len(p._chosen) == 10  # MIN_BUDGET (20 ms) at 2 ms a check, not 40
        assert p.waiting == 30
    finally:
        p.close()
