"""Canary pools: the annotations and their errors (file, line, field), the rendered partition, the
gate as a pure function of what is observed, and the engine's steps on the fake API server (a
change reaches the canary, a failed canary stops the rollout, the fix goes through, zero writes
once done)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from syncer.agent.canaries import Canaries
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.events import Event, EventRecorder
from syncer.cluster.flower_control import RegisteredNode
from syncer.engine.canary import (
    SETTLE,
    CanaryNote,
    CanarySpec,
    FlowerSeen,
    PodSeen,
    Rollout,
    Step,
    judge,
    pod_seen,
    stuck_pods,
)
from syncer.engine.changeset import Action, Cause, UnitResult
from syncer.engine.live import LiveState
from syncer.identity import ANN_CANARY_TEMPLATE, ObjectRef, Unit
from syncer.models.canary import parse_counts
from syncer.observe.conditions import SyncedReason, synced_condition
from syncer.observe.flower_health import ControlAnswer, FlowerHealth, PoolHealth, compute
from syncer.observe.metrics import Metrics
from syncer.plan import ExpectedPool, FlowerTarget
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, by_kind, install, pool, sync, write
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

FED_UNIT = Unit("federation", NS, "fed")
CANARY = '"flower-syncer.io/canary": "1"'
POOLS = pool("a", 3) + pool("b", 2)
STS = "fed-supernode-a"


# -- Git: the annotations and what is wrong with them --------------------------------------------

def test_counts_parse_as_every_pool_or_per_pool() -> None:
    assert parse_counts("1") == (1, {}, "")
    assert parse_counts(" gpu=2, cpu = 1 ") == (None, {"gpu": 2, "cpu": 1}, "")
    assert parse_counts("0")[2] and parse_counts("one")[2] and parse_counts("gpu=x")[2]
    assert parse_counts("gpu=1,gpu=2")[2] == "pool 'gpu' is named twice"


@pytest.mark.parametrize(("annotations", "pools", "field", "words"), [
    ('"flower-syncer.io/canary": "2"', pool("a", 2), "flower-syncer.io/canary",
     "a canary of 2 in pool 'a' of 2 SuperNodes is the whole pool"),
    ('"flower-syncer.io/canary": "some"', pool("a", 3), "flower-syncer.io/canary", "'some' is not a canary count"),
    ('"flower-syncer.io/canary": "z=1"', pool("a", 3), "flower-syncer.io/canary", "there is no pool 'z'"),
    (CANARY + ', "flower-syncer.io/canary-gate": "soon"', pool("a", 3), "flower-syncer.io/canary-gate",
     "'soon' is not a duration"),
    (CANARY + ', "flower-syncer.io/canary-gate": "10m", "flower-syncer.io/canary-deadline": "5m"', pool("a", 3),
     "flower-syncer.io/canary-gate", "the canary could never pass"),
])
def test_bad_canary_settings_name_file_line_and_field(tmp_path: Path, annotations: str, pools: str, field: str,
                                                      words: str) -> None:
    state = load_repo(write(tmp_path, pools=pools, annotations=annotations))
    [d] = [d for d in state.diagnostics if "canary" in d.path]
    assert (d.file, d.line, d.severity) == ("federations/fed.yaml", 5, "error")
    assert d.path == f"metadata.annotations['{field}']"
    assert words in d.message and FED_UNIT in state.failed


def test_a_daemonset_federation_refuses_a_canary(tmp_path: Path) -> None:
    repo = write(tmp_path, annotations=CANARY)
    text = (repo / "federations" / "fed.yaml").read_text().replace("mode: StatefulSet", "mode: DaemonSet")
    (repo / "federations" / "fed.yaml").write_text(text.replace("        replicas: 1\n", ""))
    state = load_repo(repo)
    [d] = [d for d in state.diagnostics if "canary" in d.path]
    assert "a DaemonSet has no partition" in d.message and FED_UNIT in state.failed


# -- render: the partition Git owns ----------------------------------------------------------------

def _pool(tmp_path: Path, annotations: str, name: str = STS, image: str = "") -> dict[str, Any]:
    repo = write(tmp_path, pools=POOLS, annotations=annotations)
    if image:
        path = repo / "federations" / "fed.yaml"
        path.write_text(path.read_text().replace("supernode:1.25.0", image))
    state = load_repo(repo)
    assert not state.failed, state.diagnostics
    return by_kind(render_repo(state).units[FED_UNIT], "StatefulSet", name)


def test_a_canary_pool_renders_partition_zero_and_its_settings(tmp_path: Path) -> None:
    sts = _pool(tmp_path, '"flower-syncer.io/canary": "a=1", "flower-syncer.io/canary-gate": "2m"')
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert CanarySpec.of(sts) == CanarySpec(1, 120.0, 600.0)
    other = _pool(tmp_path, '"flower-syncer.io/canary": "a=1"', "fed-supernode-b")
    assert "updateStrategy" not in other["spec"] and CanarySpec.of(other) is None  # pool b: not named
    plain = _pool(tmp_path, "")
    assert "updateStrategy" not in plain["spec"] and CanarySpec.of(plain) is None
    moved = _pool(tmp_path, '"flower-syncer.io/canary": "a=1"', image="supernode:1.26.0")
    digest = sts["metadata"]["annotations"][ANN_CANARY_TEMPLATE]
    assert moved["metadata"]["annotations"][ANN_CANARY_TEMPLATE] != digest
    assert _pool(tmp_path, '"flower-syncer.io/canary": "a=1"')["metadata"]["annotations"][ANN_CANARY_TEMPLATE] == digest


# -- the gate: a pure function of what is observed -------------------------------------------------

SPEC = CanarySpec(1, 60.0, 600.0)
ROLLING = Rollout(replicas=3, partition=2, current="old", update="new", seen=True, template="t")


def _pod(ordinal: int, revision: str = "new", *, ready: bool = True, ready_since: float = 1000.0,
         created: float = 900.0, problem: str = "") -> PodSeen:
    return PodSeen(f"{STS}-{ordinal}", ordinal, revision, ready, ready_since if ready else None, created, problem)


OLD = [_pod(0, "old"), _pod(1, "old")]


def test_the_gate_waits_for_the_canary_on_the_new_revision_then_for_its_time() -> None:
    assert judge(SPEC, ROLLING, [*OLD, _pod(2, "old")], None, now=1000).step is Step.WAITING
    assert judge(SPEC, ROLLING, [*OLD, _pod(2, ready=False)], None, now=1000).step is Step.WAITING
    waiting = judge(SPEC, ROLLING, [*OLD, _pod(2)], None, now=1030)
    assert waiting.step is Step.WAITING and waiting.retry <= 10
    assert judge(SPEC, ROLLING, [*OLD, _pod(2)], None, now=1060).step is Step.PASSED
    unseen = Rollout(3, 2, "old", "old", False, "t")  # the controller has not seen the change yet
    shrunk = Rollout(2, 2, "old", "new", True, "t")  # scaled down under the partition: no canary pod to judge
    assert judge(SPEC, shrunk, OLD, None, now=5000).step is Step.WAITING
    assert judge(SPEC, unseen, [*OLD, _pod(2, "old")], None, now=5000).step is Step.WAITING


def test_the_gate_fails_a_canary_that_cannot_start_or_misses_its_deadline() -> None:
    crash = judge(SPEC, ROLLING, [*OLD, _pod(2, ready=False, problem="supernode: CrashLoopBackOff")], None, now=950)
    assert crash.step is Step.FAILED and "CrashLoopBackOff" in crash.message
    late = judge(SPEC, ROLLING, [*OLD, _pod(2, ready=False, created=100.0)], None, now=700.0)
    assert late.step is Step.FAILED and "within its deadline (600s)" in late.message
    assert judge(SPEC, ROLLING, [*OLD, _pod(2, ready=False, created=100.0)], None, now=699.0).step is Step.WAITING


def test_the_gate_asks_flower_when_it_is_read() -> None:
    pods = [*OLD, _pod(2)]
    assert judge(SPEC, ROLLING, pods, FlowerSeen(3, 3, 1100.0), now=1100).step is Step.PASSED
    early = judge(SPEC, ROLLING, pods, FlowerSeen(3, 3, 1020.0), now=1100)  # taken before the old node timed out
    assert early.step is Step.WAITING and "next answer" in early.message
    short = judge(SPEC, ROLLING, pods, FlowerSeen(2, 3, 1100.0), now=1100)
    assert short.step is Step.WAITING and "2 of 3" in short.message
    failed = judge(SPEC, ROLLING, [*OLD, _pod(2, created=100.0)], FlowerSeen(2, 3, 1100.0), now=1100)
    assert failed.step is Step.FAILED and "not online at the SuperLink" in failed.message


def _node(node_id: int, heard: float, status: str = "online") -> RegisteredNode:
    """A node of a Flower 1.42 answer, last heard from at `heard`: Flower lists it online until
    HEARTBEAT_PATIENCE (2) x its heartbeat interval (30 s) after that."""
    return RegisteredNode(node_id, status, b"", online_until=heard + 60.0, heartbeat_interval=30.0)


def _seen(nodes: list[RegisteredNode], at: str) -> FlowerSeen | None:
    """What the agent's canary gate reads of pool a after the SuperLink gave `nodes` at `at`."""
    target = FlowerTarget("fed:9093", "http", "", pools=(ExpectedPool(FED_UNIT.id, "a", 3),))
    health = compute(target, ControlAnswer("fed:9093", at, nodes=tuple(nodes), runs=()))
    watch = cast(FlowerWatch, SimpleNamespace(probe=SimpleNamespace(enabled=True), health={FED_UNIT: health}))
    return Canaries(lambda _u, _e: None, lambda _u, _d: None, lambda: watch).health(FED_UNIT)(
        ObjectRef("StatefulSet", NS, STS), "a")


def test_the_gate_does_not_count_a_stopped_supernode_flower_still_lists_online() -> None:
    # the old canary stopped without telling the SuperLink (killed, its node lost) at 995, just
    # after its last heartbeat; its successor is Ready at 1000 (a /health that answers) but never
    # connects. 45 s later Flower 1.42 still lists the old node online (until 995 + 2 x 30 s)
    pods = [*OLD, _pod(2, ready_since=1000.0, created=996.0)]
    stale = _seen([_node(1, 1020.0), _node(2, 1025.0), _node(3, 995.0)], "1970-01-01T00:17:25Z")  # at 1045
    assert stale is not None and stale.online == 3
    verdict = judge(SPEC, ROLLING, pods, stale, now=1065)
    assert verdict.step is Step.WAITING and "2 of 3" in verdict.message, verdict
    short = CanarySpec(1, 60.0, 100.0)  # its deadline: at 1096
    assert judge(short, ROLLING, pods, stale, now=1101).step is Step.WAITING  # too early to fail it
    later = _seen([_node(1, 1050.0), _node(2, 1055.0), _node(3, 995.0, "offline")], "1970-01-01T00:17:55Z")
    late = judge(short, ROLLING, pods, later, now=1101)  # at 1075: every live SuperNode had its heartbeat
    assert late.step is Step.FAILED and "not online at the SuperLink" in late.message and "2 of 3" in late.message
    # the canary connected: every node of the pool was heard from after the canary pod was made
    # (the canary's own when it connected, before its pod was Ready)
    fresh = _seen([_node(1, 1020.0), _node(2, 1025.0), _node(4, 1001.5), _node(3, 995.0, "offline")],
                  "1970-01-01T00:17:15Z")  # at 1035: before the fixed settling time, heard from all the same
    assert judge(SPEC, ROLLING, pods, fresh, now=1065).step is Step.PASSED
    early = _seen([_node(1, 1020.0), _node(2, 998.0), _node(4, 1001.5)], "1970-01-01T00:17:15Z")
    assert judge(SPEC, ROLLING, pods, early, now=1065).step is Step.WAITING  # node 2: not heard from since
    # a SuperLink that gives no heartbeat times: counted only SETTLE after Ready
    bare = FlowerSeen(3, 3, 1000.0 + SETTLE)
    assert judge(SPEC, ROLLING, pods, bare, now=1065).step is Step.PASSED
    assert judge(SPEC, ROLLING, pods, FlowerSeen(3, 3, 999.0 + SETTLE), now=1065).step is Step.WAITING
    assert SETTLE >= 2 * 30.0  # Flower 1.42's HEARTBEAT_PATIENCE x its default heartbeat interval


def test_a_canary_waiting_for_the_superlink_asks_it_before_its_next_look() -> None:
    pods = [*OLD, _pod(2, ready_since=1000.0, created=985.0)]
    waiting = judge(SPEC, ROLLING, pods, FlowerSeen(3, 3, 1020.0, (1020.0, 1019.0, 982.0)), now=1030)
    assert waiting.step is Step.WAITING and waiting.asks_flower
    assert not judge(SPEC, ROLLING, pods, None, now=1030).asks_flower  # the gate's own time: nothing to ask
    asked: list[tuple[Unit, float]] = []
    watch = cast(FlowerWatch, SimpleNamespace(soon=lambda unit, within: asked.append((unit, within))))
    canaries = Canaries(lambda _u, _e: None, lambda _u, _d: None, lambda: watch)
    ref = ObjectRef("StatefulSet", NS, STS)
    canaries.after(FED_UNIT, UnitResult(FED_UNIT, canaries=[CanaryNote(ref, "a", Step.WAITING, "w", 10.0)]), "r")
    assert asked == []
    note = CanaryNote(ref, "a", Step.WAITING, "waiting for the SuperLink", 10.0, asks_flower=True)
    canaries.after(FED_UNIT, UnitResult(FED_UNIT, canaries=[note]), "r")
    assert asked == [(FED_UNIT, 10.0)]


def test_pods_read_from_the_api_and_the_stuck_ones() -> None:
    pod = {"metadata": {"name": f"{STS}-2", "creationTimestamp": "2026-01-01T00:00:00Z",
                        "labels": {"controller-revision-hash": "bad", "apps.kubernetes.io/pod-index": "2"}},
           "status": {"conditions": [{"type": "Ready", "status": "False"}],
                      "containerStatuses": [{"name": "supernode", "state": {"waiting": {"reason": "ErrImagePull"}}}]}}
    seen = pod_seen(pod)
    assert seen is not None and (seen.ordinal, seen.revision, seen.ready) == (2, "bad", False)
    assert seen.problem == "supernode: ErrImagePull"
    failed = Rollout(3, 2, "old", "bad", True, "t")
    assert stuck_pods(failed, [*OLD, seen], 2) == [f"{STS}-2"]
    assert stuck_pods(Rollout(3, 2, "old", "old", True, "t"), [*OLD, seen], 2) == []


# -- the engine on the fake API server -------------------------------------------------------------

@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.add_namespace(NS)
    return server


def _write(tmp_path: Path, image: str = "1.25.0") -> Path:
    repo = write(tmp_path / "repo", pools=POOLS, annotations='"flower-syncer.io/canary": "a=1"')
    path = repo / "federations" / "fed.yaml"
    path.write_text(path.read_text().replace("supernode:1.25.0", f"supernode:{image}"))
    return repo


def _controller(api: FakeApiServer, current: str, update: str, pods: dict[int, tuple[str, bool, str]]) -> None:
    """What the StatefulSet controller and the kubelet would say: revisions and the pool's pods."""
    sts = api.objects[("StatefulSet", NS, STS)]
    sts["status"] = {"observedGeneration": sts["metadata"].get("generation", 0), "currentRevision": current,
                     "updateRevision": update}
    for key in [k for k in api.objects if k[0] == "Pod"]:
        del api.objects[key]
    labels = sts["spec"]["selector"]["matchLabels"]
    for i, (revision, ready, problem) in pods.items():
        waiting = [{"name": "supernode", "state": {"waiting": {"reason": problem}}}] if problem else []
        api.objects[("Pod", NS, f"{STS}-{i}")] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{STS}-{i}", "namespace": NS, "uid": f"pod-{i}-{revision}",
                         "creationTimestamp": "2000-01-01T00:00:00Z",
                         "labels": {**labels, "controller-revision-hash": revision}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": "2000-01-01T00:00:00Z"}],
                       "containerStatuses": waiting}}


def _partition(api: FakeApiServer) -> int:
    sts = api.objects[("StatefulSet", NS, STS)]
    return int(sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"])


def _change(report: Any) -> Any:
    return next(c for u in report.units for c in u.changes if c.ref.name == STS and c.ref.kind == "StatefulSet")


def test_a_change_reaches_the_canary_first_and_the_rest_after_its_gate(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _write(tmp_path)).ok and _partition(api) == 0
    _controller(api, "r1", "r1", dict.fromkeys(range(3), ("r1", True, "")))
    dry = sync(kube, _write(tmp_path, "1.26.0"), dry_run=True)
    assert "restarts pool a (3 SuperNodes) (pod template: spec.containers[supernode].image): canary 1 of 3 first" in [
        d.describe() for u in dry.units for d in u.disruptions]
    started = sync(kube, _write(tmp_path, "1.26.0"))
    assert started.ok and _partition(api) == 2  # ordinals 2.. take the change
    assert [n.step for u in started.units for n in u.canaries] == [Step.STARTED]
    # the controller rolled pod 2, which is Ready (since 2000): the gate passed long ago
    _controller(api, "r1", "r2", {0: ("r1", True, ""), 1: ("r1", True, ""), 2: ("r2", True, "")})
    passed = sync(kube, _write(tmp_path, "1.26.0"))
    assert passed.ok and _partition(api) == 0 and [n.step for u in passed.units for n in u.canaries] == [Step.PASSED]
    _controller(api, "r2", "r2", dict.fromkeys(range(3), ("r2", True, "")))
    writes = kube.writes
    assert sync(kube, _write(tmp_path, "1.26.0")).ok and kube.writes == writes  # done: zero writes


def test_a_failed_canary_stops_the_rollout_and_the_fix_goes_through(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _write(tmp_path)).ok
    _controller(api, "r1", "r1", dict.fromkeys(range(3), ("r1", True, "")))
    assert sync(kube, _write(tmp_path, "1.26.0")).ok and _partition(api) == 2
    _controller(api, "r1", "bad", {0: ("r1", True, ""), 1: ("r1", True, ""), 2: ("bad", False, "ImagePullBackOff")})
    version = api.objects[("StatefulSet", NS, STS)]["metadata"]["resourceVersion"]
    failed = sync(kube, _write(tmp_path, "1.26.0"))
    change = _change(failed)
    assert not failed.ok and change.cause is Cause.CANARY_FAILED and "ImagePullBackOff" in change.message
    sts = api.objects[("StatefulSet", NS, STS)]
    assert sts["metadata"]["resourceVersion"] == version  # nothing written: the rest stays on r1
    condition = synced_condition(result=failed.units[0])
    assert condition.reason is SyncedReason.CANARY_FAILED
    fixed = sync(kube, _write(tmp_path, "1.27.0"))  # the fix: to the canary again, its broken pod replaced
    assert fixed.ok and _partition(api) == 2 and _change(fixed).action is Action.CONFIGURED
    assert ("Pod", NS, f"{STS}-2") not in api.objects and ("Pod", NS, f"{STS}-1") in api.objects
    assert [n.step for u in fixed.units for n in u.canaries] == [Step.STARTED]
    waiting = sync(kube, _write(tmp_path, "1.27.0"))  # the controller has not rolled pod 2 yet
    assert waiting.ok and synced_condition(result=waiting.units[0]).reason is SyncedReason.CANARY


def test_the_canary_and_the_rest_of_the_pool_both_wait_for_a_hold(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    asked: list[str] = []

    def hold(d: Any) -> str:
        asked.append(d.describe())
        return "runs in progress"
    assert sync(kube, _write(tmp_path)).ok
    _controller(api, "r1", "r1", dict.fromkeys(range(3), ("r1", True, "")))
    held = sync(kube, _write(tmp_path, "1.26.0"), gate=hold)
    assert held.units[0].is_held() and _partition(api) == 0
    assert any(a.startswith("restarts pool a (3 SuperNodes)") and a.endswith("canary 1 of 3 first") for a in asked)
    assert "1.26.0" not in str(api.objects[("StatefulSet", NS, STS)]["spec"]["template"])  # not even the canary
    assert sync(kube, _write(tmp_path, "1.26.0")).ok and _partition(api) == 2
    _controller(api, "r1", "r2", {0: ("r1", True, ""), 1: ("r1", True, ""), 2: ("r2", True, "")})
    waits = sync(kube, _write(tmp_path, "1.26.0"), gate=hold)  # the canary passed; the rest restarts: held
    assert waits.units[0].is_held() and _partition(api) == 2 and "restarts pool a (2 SuperNodes)" in asked
    assert sync(kube, _write(tmp_path, "1.26.0")).ok and _partition(api) == 0


# -- the agent's side: Flower-level health of a pool, Events once, a look again ---------------------

def test_the_agent_tells_each_step_once_and_looks_again_while_waiting() -> None:
    told: list[Event] = []
    queued: list[float] = []
    health = FlowerHealth(True, "fed:9093", "2026-01-01T00:00:10Z",
                          pools=(PoolHealth(FED_UNIT.id, "a", "", 3, online=2),))
    watch = cast(FlowerWatch, SimpleNamespace(probe=SimpleNamespace(enabled=True), health={FED_UNIT: health}))
    canaries = Canaries(lambda _u, e: told.append(e), lambda _u, delay: queued.append(delay), lambda: watch)
    ref = ObjectRef("StatefulSet", NS, STS)
    assert canaries.health(FED_UNIT)(ref, "a") == FlowerSeen(2, 3, 1767225610.0)
    assert canaries.health(FED_UNIT)(ref, "b") is None

    def result(step: Step, message: str) -> UnitResult:
        return UnitResult(FED_UNIT, canaries=[CanaryNote(ref, "a", step, message, 4.0)])
    canaries.after(FED_UNIT, result(Step.STARTED, "to 1 of 3 first"), "abcdef0123456789")
    canaries.after(FED_UNIT, result(Step.WAITING, "0 of 1 Ready"), "abcdef0123456789")
    failed = UnitResult(FED_UNIT, canaries=[CanaryNote(ref, "a", Step.FAILED, "cannot start (ErrImagePull)")])
    canaries.after(FED_UNIT, failed, "abcdef0123456789")
    again = UnitResult(FED_UNIT, canaries=[CanaryNote(ref, "a", Step.FAILED, "cannot start (ImagePullBackOff)")])
    canaries.after(FED_UNIT, again, "abcdef0123456789")
    assert [(e.reason, e.type) for e in told] == [("CanaryStarted", "Normal"), ("CanaryFailed", "Warning")]
    assert told[1].note == "revision abcdef012345: cannot start (ErrImagePull)" and told[1].regarding == ref
    assert queued == [4.0, 4.0]  # started and waiting: looked at again; failed: the work queue's backoff


def test_a_supernode_release_refuses_a_canary(tmp_path: Path) -> None:
    (tmp_path / "supernodes" / "r").mkdir(parents=True)
    (tmp_path / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (tmp_path / "supernodes" / "r" / "values.yaml").write_text("tls:\n  enabled: false\n")
    (tmp_path / "supernodes" / "r" / "release.yaml").write_text("namespace: flower\ncanary: 1\n")
    state = load_repo(tmp_path)
    [d] = [d for d in state.diagnostics if d.path == "canary"]
    assert (d.file, d.line, d.severity) == ("supernodes/r/release.yaml", 2, "error")
    assert "has no partition" in d.message and Unit("supernode", NS, "r") in state.failed


def test_the_agent_starts_a_canary_and_looks_again(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    root = _write(tmp_path)
    assert sync(kube, root).ok
    _controller(api, "r1", "r1", dict.fromkeys(range(3), ("r1", True, "")))
    events: list[Event] = []
    recorder = cast(EventRecorder, SimpleNamespace(record=events.append))
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(), recorder)
    agent.cache.state = LiveState.load(kube, None)
    install(agent, _write(tmp_path, "1.26.0"), "r2")
    agent.cache.synced.set()
    agent.leading.set()  # the leader reports its Events
    agent.syncs.sync(FED_UNIT)
    assert _partition(api) == 2 and [e.reason for e in events if e.reason.startswith("Canary")] == ["CanaryStarted"]
    assert [due for due, _, unit in agent.work._delayed if unit == FED_UNIT]  # looked at again soon
    agent.dispatch_pending()
    state = agent.unit_states()[FED_UNIT]
    assert state.synced.reason == SyncedReason.CANARY and "goes to 1 of 3 SuperNodes first" in state.synced.message
