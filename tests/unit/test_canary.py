"""Canary pools: the annotations and their errors (file, line, field), the rendered partition, the
gate as a pure function of what is observed, and the engine's steps on the fake API server (a
change reaches the canary, a failed canary stops the rollout, the fix goes through, zero writes
once done)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import replace
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
    BRAKE,
    DS_GENERATION,
    SETTLE,
    CanaryNote,
    CanarySpec,
    DaemonRollout,
    DeployRollout,
    FlowerSeen,
    PodSeen,
    Rollout,
    Step,
    canary_nodes,
    daemon_pod_seen,
    daemon_stage,
    deploy_canary,
    deploy_stage,
    judge,
    judge_stage,
    pod_node,
    pod_seen,
    stale_canary,
    stuck_pods,
    with_brake,
    with_on_delete,
)
from syncer.engine.changeset import Action, Cause, UnitResult
from syncer.engine.live import LiveState
from syncer.identity import ANN_CANARY_FROM, ANN_CANARY_NODES, ANN_CANARY_TEMPLATE, ObjectRef, Unit
from syncer.models.canary import parse_counts
from syncer.observe.conditions import SyncedReason, synced_condition
from syncer.observe.flower_health import ControlAnswer, FlowerHealth, PoolHealth, compute
from syncer.observe.metrics import Metrics
from syncer.plan import ExpectedPool, FlowerTarget
from syncer.render.repo import render_repo, render_unit
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


def _daemon_repo(tmp_path: Path, annotations: str = CANARY, image: str = "") -> Path:
    repo = write(tmp_path, annotations=annotations)
    path = repo / "federations" / "fed.yaml"
    text = path.read_text().replace("mode: StatefulSet", "mode: DaemonSet").replace("        replicas: 1\n", "")
    path.write_text(text.replace("supernode:1.25.0", image) if image else text)
    return repo


def test_a_daemonset_pool_takes_a_canary(tmp_path: Path) -> None:
    state = load_repo(_daemon_repo(tmp_path))
    assert not [d for d in state.diagnostics if "canary" in d.path] and FED_UNIT not in state.failed
    ds = by_kind(render_repo(state).units[FED_UNIT], "DaemonSet", STS)
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate"}  # OnDelete only while a canary waits
    assert CanarySpec.of(ds) == CanarySpec(1, 60.0, 600.0)
    bad = load_repo(_daemon_repo(tmp_path / "bad", '"flower-syncer.io/canary": "z=1"'))
    [d] = [d for d in bad.diagnostics if "canary" in d.path]
    assert (d.file, d.line) == ("federations/fed.yaml", 5) and "there is no pool 'z'" in d.message


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


# -- DaemonSet pools: OnDelete, the canary nodes' pods deleted, the same gate --------------------------

def _dpod(node: str, generation: str = "2", *, ready: bool = True, ready_since: float = 1000.0,
          created: float = 900.0, problem: str = "", terminating: bool = False) -> PodSeen:
    return PodSeen(f"{STS}-{node}", 0, generation, ready, ready_since if ready else None, created, problem,
                   terminating, node)


DAEMON = DaemonRollout(on_delete=True, generation="2", seen=True, desired=3, updated=1, template="t", nodes=("n0",))


def test_a_daemonset_pod_is_read_by_its_node_and_template_generation() -> None:
    bound = {"metadata": {"name": "p", "labels": {"pod-template-generation": "3"}}, "spec": {"nodeName": "n1"},
             "status": {}}
    pending = {"metadata": {"name": "q", "labels": {"pod-template-generation": "4"}}, "spec": {"affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}}, "status": {}}
    assert (pod_node(bound), daemon_pod_seen(bound).revision) == ("n1", "3")
    assert (pod_node(pending), daemon_pod_seen(pending).node) == ("n2", "n2")  # not bound yet (Pending)
    assert pod_node({"spec": {}}) == ""


def test_the_canary_nodes_are_the_first_by_name_and_never_the_whole_pool() -> None:
    pods = [_dpod(n) for n in ("n2", "n0", "n1")]
    assert canary_nodes(pods, 1) == ("n0",)
    assert canary_nodes(pods, 2) == ("n0", "n1")
    assert canary_nodes(pods, 5) == ("n0", "n1")  # fewer than all: the rest waits for them
    assert canary_nodes([_dpod("n0")], 1) == ()  # a pool on one node has no canary
    assert canary_nodes([_dpod("n0"), _dpod("n0", "1", terminating=True), _dpod("n1")], 1) == ("n0",)


def test_a_live_daemonset_says_whether_a_canary_stage_goes_on() -> None:
    live = {"metadata": {"generation": 4, "annotations": {DS_GENERATION: "2", ANN_CANARY_TEMPLATE: "t",
                                                          ANN_CANARY_NODES: "n0,n1"}},
            "spec": {"updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": 4, "desiredNumberScheduled": 3, "updatedNumberScheduled": 2}}
    rollout = DaemonRollout.of(live)
    assert rollout == DaemonRollout(True, "2", True, 3, 2, "t", ("n0", "n1")) and rollout.rolling()
    assert not replace(rollout, updated=3).rolling()  # every pod on the template: nothing holds back
    assert replace(rollout, updated=3, seen=False).rolling()  # the controller has not seen the change yet
    assert not replace(rollout, on_delete=False).rolling()  # the rendered RollingUpdate: no stage
    applied = with_on_delete({"metadata": {"name": "d"}, "spec": {"updateStrategy": {"type": "RollingUpdate"}}},
                             ("n0",))
    assert applied["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert applied["metadata"]["annotations"][ANN_CANARY_NODES] == "n0"


def test_a_daemonset_canary_is_judged_by_the_same_gate() -> None:
    rest = [_dpod("n1", "1"), _dpod("n2", "1")]
    assert judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0", "1")]), None, now=1000).step is Step.WAITING
    assert judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0", ready=False)]), None,
                       now=1000).step is Step.WAITING
    assert judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0")]), None, now=1030).step is Step.WAITING
    assert judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0")]), None, now=1060).step is Step.PASSED
    unseen = replace(DAEMON, seen=False)
    assert judge_stage(SPEC, daemon_stage(unseen, [*rest, _dpod("n0")]), None, now=5000).step is Step.WAITING
    crash = judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0", ready=False, problem="supernode: "
                                                                  "CrashLoopBackOff")]), None, now=950)
    assert crash.step is Step.FAILED and "CrashLoopBackOff" in crash.message
    late = judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0", ready=False, created=100.0)]), None, now=700)
    assert late.step is Step.FAILED and "within its deadline (600s)" in late.message
    offline = judge_stage(SPEC, daemon_stage(DAEMON, [*rest, _dpod("n0", created=100.0)]), FlowerSeen(2, 3, 1100.0),
                          now=1100)
    assert offline.step is Step.FAILED and "not online at the SuperLink" in offline.message
    # the canary nodes' pods on an earlier template are deleted; the rest's and the terminating ones are not
    pods = [*rest, _dpod("n0", "1"), _dpod("n0", "0", terminating=True)]
    assert stale_canary(("n0",), "2", pods) == [f"{STS}-n0"]
    assert stale_canary(("n0",), "2", [*rest, _dpod("n0")]) == []


def _daemon_controller(api: FakeApiServer, pods: dict[str, tuple[str, bool, str]], *, updated: int | None = None
                       ) -> None:
    """What the DaemonSet controller and the kubelet would say: its status and one pod per node."""
    ds = api.objects[("DaemonSet", NS, STS)]
    generation = ds["metadata"]["annotations"][DS_GENERATION]
    ds["status"] = {"desiredNumberScheduled": len(pods), "numberReady": sum(r for _, r, _ in pods.values()),
                    "updatedNumberScheduled": sum(g == generation for g, _, _ in pods.values())
                    if updated is None else updated}
    for key in [k for k in api.objects if k[0] == "Pod"]:
        del api.objects[key]
    labels = ds["spec"]["selector"]["matchLabels"]
    for node, (gen, ready, problem) in pods.items():
        waiting = [{"name": "supernode", "state": {"waiting": {"reason": problem}}}] if problem else []
        api.objects[("Pod", NS, f"{STS}-{node}")] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{STS}-{node}", "namespace": NS, "uid": f"pod-{node}-{gen}",
                         "creationTimestamp": "2000-01-01T00:00:00Z",
                         "labels": {**labels, "pod-template-generation": gen}},
            "spec": {"nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": "2000-01-01T00:00:00Z"}],
                       "containerStatuses": waiting}}


def _strategy(api: FakeApiServer) -> str:
    return str(api.objects[("DaemonSet", NS, STS)]["spec"]["updateStrategy"]["type"])


def test_a_daemonset_change_reaches_the_canary_node_first_and_the_rest_after_its_gate(api: FakeApiServer,
                                                                                      tmp_path: Path) -> None:
    kube = FakeKube(api)
    asked: list[str] = []

    def hold(d: Any) -> str:
        asked.append(d.describe())
        return "runs in progress"
    assert sync(kube, _daemon_repo(tmp_path)).ok and _strategy(api) == "RollingUpdate"
    _daemon_controller(api, dict.fromkeys(("n0", "n1", "n2"), ("1", True, "")))
    new = "supernode:1.26.0"
    assert sync(kube, _daemon_repo(tmp_path, image=new), gate=hold).units[0].is_held()
    assert asked == ["restarts pool a (3 SuperNodes) (pod template: spec.containers[supernode].image): "
                     "canary 1 of 3 first"] and _strategy(api) == "RollingUpdate"  # held: not even the canary
    started = sync(kube, _daemon_repo(tmp_path, image=new))
    assert started.ok and [n.step for u in started.units for n in u.canaries] == [Step.STARTED]
    assert "goes to 1 of 3 SuperNodes first (node n0)" in started.units[0].canaries[0].message
    ds = api.objects[("DaemonSet", NS, STS)]
    assert _strategy(api) == "OnDelete" and ds["metadata"]["annotations"][ANN_CANARY_NODES] == "n0"
    assert ("Pod", NS, f"{STS}-n0") not in api.objects  # deleted: the controller creates it anew
    assert ("Pod", NS, f"{STS}-n1") in api.objects and ("Pod", NS, f"{STS}-n2") in api.objects
    # the controller has not seen the change yet and recreated n0's pod on the old template: deleted again
    _daemon_controller(api, dict.fromkeys(("n0", "n1", "n2"), ("1", True, "")))
    again = sync(kube, _daemon_repo(tmp_path, image=new))
    assert again.ok and [n.step for u in again.units for n in u.canaries] == [Step.WAITING]
    assert ("Pod", NS, f"{STS}-n0") not in api.objects and ("Pod", NS, f"{STS}-n1") in api.objects
    _daemon_controller(api, {"n0": ("2", True, ""), "n1": ("1", True, ""), "n2": ("1", True, "")})
    not_yet = sync(kube, _daemon_repo(tmp_path, image=new), canary_health=lambda ref, pool: FlowerSeen(2, 3, 0.0))
    [note] = not_yet.units[0].canaries  # the SuperLink has not listed the canary yet: it is asked soon
    assert note.step is Step.WAITING and note.asks_flower
    waits = sync(kube, _daemon_repo(tmp_path, image=new), gate=hold)  # passed; the rest restarts: held
    assert waits.units[0].is_held() and _strategy(api) == "OnDelete" and "restarts pool a (2 SuperNodes)" in asked
    passed = sync(kube, _daemon_repo(tmp_path, image=new))
    assert passed.ok and [n.step for u in passed.units for n in u.canaries] == [Step.PASSED]
    assert _strategy(api) == "RollingUpdate"  # the controller rolls the rest, maxUnavailable at a time
    _daemon_controller(api, dict.fromkeys(("n0", "n1", "n2"), ("2", True, "")))
    writes = kube.writes
    done = sync(kube, _daemon_repo(tmp_path, image=new))
    assert done.ok and not done.units[0].canaries and kube.writes == writes  # done: zero writes


def test_a_failed_daemonset_canary_leaves_the_rest_and_the_fix_replaces_it(api: FakeApiServer,
                                                                          tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _daemon_repo(tmp_path)).ok
    _daemon_controller(api, dict.fromkeys(("n0", "n1", "n2"), ("1", True, "")))
    assert sync(kube, _daemon_repo(tmp_path, image="supernode:1.26.0")).ok and _strategy(api) == "OnDelete"
    _daemon_controller(api, {"n0": ("2", False, "ImagePullBackOff"), "n1": ("1", True, ""), "n2": ("1", True, "")})
    version = api.objects[("DaemonSet", NS, STS)]["metadata"]["resourceVersion"]
    failed = sync(kube, _daemon_repo(tmp_path, image="supernode:1.26.0"))
    change = next(c for u in failed.units for c in u.changes if c.ref.kind == "DaemonSet")
    assert not failed.ok and change.cause is Cause.CANARY_FAILED and "ImagePullBackOff" in change.message
    assert api.objects[("DaemonSet", NS, STS)]["metadata"]["resourceVersion"] == version  # nothing written
    assert ("Pod", NS, f"{STS}-n0") in api.objects  # the broken canary pod stays until a fix
    assert synced_condition(result=failed.units[0]).reason is SyncedReason.CANARY_FAILED
    fixed = sync(kube, _daemon_repo(tmp_path, image="supernode:1.27.0"))
    assert fixed.ok and [n.step for u in fixed.units for n in u.canaries] == [Step.STARTED]
    assert ("Pod", NS, f"{STS}-n0") not in api.objects and ("Pod", NS, f"{STS}-n1") in api.objects


def test_a_daemonset_pool_on_one_node_rolls_as_usual(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _daemon_repo(tmp_path)).ok
    _daemon_controller(api, {"n0": ("1", True, "")})
    moved = sync(kube, _daemon_repo(tmp_path, image="supernode:1.26.0"))
    assert moved.ok and not moved.units[0].canaries and _strategy(api) == "RollingUpdate"
    assert ("Pod", NS, f"{STS}-n0") in api.objects  # its controller rolls it


def test_the_agent_starts_a_daemonset_canary_and_looks_again(api: FakeApiServer, tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _daemon_repo(tmp_path)).ok
    _daemon_controller(api, dict.fromkeys(("n0", "n1", "n2"), ("1", True, "")))
    events: list[Event] = []
    recorder = cast(EventRecorder, SimpleNamespace(record=events.append))
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(), recorder)
    agent.cache.state = LiveState.load(kube, None)
    install(agent, _daemon_repo(tmp_path, image="supernode:1.26.0"), "r2")
    agent.cache.synced.set()
    agent.leading.set()
    agent.syncs.sync(FED_UNIT)
    assert _strategy(api) == "OnDelete" and ("Pod", NS, f"{STS}-n0") not in api.objects
    started = [e for e in events if e.reason.startswith("Canary")]
    assert [e.reason for e in started] == ["CanaryStarted"] and "(node n0)" in started[0].note
    assert [due for due, _, unit in agent.work._delayed if unit == FED_UNIT]  # looked at again soon
    agent.dispatch_pending()
    assert agent.unit_states()[FED_UNIT].synced.reason == SyncedReason.CANARY


# -- SuperNode releases: a Deployment braked by minReadySeconds, the same gate -------------------------

REL_UNIT = Unit("supernode", NS, "r")
DEP = "r-flower-client-supernode"


def _release(root: Path, release: str = "canary: 1\n", tag: str = "1.25.0", replicas: int = 3) -> Path:
    (root / "supernodes" / "r").mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (root / "supernodes" / "r" / "values.yaml").write_text(
        f"tls:\n  enabled: false\nsupernode:\n  replicas: {replicas}\n  image:\n    tag: {tag}\n")
    (root / "supernodes" / "r" / "release.yaml").write_text(release)
    return root


@pytest.mark.parametrize(("release", "line", "field", "words"), [
    ("namespace: flower\ncanary: 0\n", 2, "canary", "a canary needs at least 1 SuperNode"),
    ("canary: 1\ncanaryGate: soon\n", 2, "canaryGate", "'soon' is not a duration"),
    ("canary: 1\ncanaryGate: 10m\ncanaryDeadline: 5m\n", 2, "canaryGate", "the canary could never pass"),
    ("namespace: flower\n\ncanary: 3\n", 3, "canary", "a canary of 3 of the release's 3 SuperNodes is all of them"),
])
def test_bad_release_canaries_name_file_line_and_field(tmp_path: Path, release: str, line: int, field: str,
                                                       words: str) -> None:
    state = load_repo(_release(tmp_path, release))
    [d] = [d for d in state.diagnostics if d.path == field]
    assert (d.file, d.line, d.severity) == ("supernodes/r/release.yaml", line, "error")
    assert words in d.message and REL_UNIT in state.failed


def test_a_release_canary_renders_on_its_deployment(tmp_path: Path) -> None:
    state = load_repo(_release(tmp_path, "canary: 1\ncanaryGate: 2m\n"))
    assert not state.failed, state.diagnostics
    dep = by_kind(render_repo(state).units[REL_UNIT], "Deployment", DEP)
    assert CanarySpec.of(dep) == CanarySpec(1, 120.0, 600.0)
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate"} and "minReadySeconds" not in dep["spec"]
    plain = by_kind(render_repo(load_repo(_release(tmp_path / "p", ""))).units[REL_UNIT], "Deployment", DEP)
    assert CanarySpec.of(plain) is None


def _rpod(revision: str, *, ready: bool = True, created: float = 900.0, problem: str = "",
          name: str = "") -> PodSeen:
    return PodSeen(name or f"{DEP}-{revision}", 0, revision, ready, 1000.0 if ready else None, created, problem)


def test_a_release_canary_is_the_pods_on_a_template_the_stage_did_not_start_over() -> None:
    live = {"metadata": {"generation": 2, "annotations": {ANN_CANARY_TEMPLATE: "t", ANN_CANARY_FROM: "old"}},
            "spec": {"replicas": 3, "minReadySeconds": BRAKE,
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
            "status": {"observedGeneration": 2, "updatedReplicas": 1}}
    rollout = DeployRollout.of(live)
    assert rollout == DeployRollout(True, 1, True, 3, 1, "t", ("old",)) and rollout.rolling()
    assert not replace(rollout, braked=False).rolling() and not replace(rollout, updated=3).rolling()
    assert (deploy_canary(1, 3), deploy_canary(5, 3), deploy_canary(1, 1)) == (1, 2, 0)
    rest = [_rpod("old", name="a"), _rpod("old", name="b")]
    assert judge_stage(SPEC, deploy_stage(rollout, rest), None, now=1000).step is Step.WAITING
    assert judge_stage(SPEC, deploy_stage(rollout, [*rest, _rpod("new")]), None, now=1060).step is Step.PASSED
    broken = judge_stage(SPEC, deploy_stage(rollout, [*rest, _rpod("new", ready=False, problem="supernode: "
                                                                   "ErrImagePull")]), None, now=950)
    assert broken.step is Step.FAILED and "ErrImagePull" in broken.message
    braked = with_brake({"metadata": {"name": DEP}, "spec": {"strategy": {"type": "Recreate"}}}, 1, ["h2", "h1"])
    assert braked["spec"]["strategy"] == {"type": "RollingUpdate",
                                          "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert braked["spec"]["minReadySeconds"] == BRAKE and braked["spec"]["progressDeadlineSeconds"] > BRAKE
    assert braked["metadata"]["annotations"][ANN_CANARY_FROM] == "h1,h2"


def _deploy_controller(api: FakeApiServer, pods: dict[str, tuple[str, bool, str]], updated: int) -> None:
    """What the Deployment controller and the kubelet would say: its status and its pods (name: hash, ...)."""
    dep = api.objects[("Deployment", NS, DEP)]
    dep["status"] = {"updatedReplicas": updated, "replicas": len(pods)}
    for key in [k for k in api.objects if k[0] == "Pod"]:
        del api.objects[key]
    labels = dep["spec"]["selector"]["matchLabels"]
    for name, (pod_hash, ready, problem) in pods.items():
        waiting = [{"name": "supernode", "state": {"waiting": {"reason": problem}}}] if problem else []
        api.objects[("Pod", NS, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"pod-{name}",
                         "creationTimestamp": "2000-01-01T00:00:00Z",
                         "labels": {**labels, "pod-template-hash": pod_hash}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": "2000-01-01T00:00:00Z"}],
                       "containerStatuses": waiting}}


def _dep(api: FakeApiServer) -> dict[str, Any]:
    return api.objects[("Deployment", NS, DEP)]


def test_a_release_change_reaches_its_canary_first_and_a_failure_holds_the_rest(api: FakeApiServer,
                                                                               tmp_path: Path) -> None:
    kube = FakeKube(api)
    assert sync(kube, _release(tmp_path)).ok and "minReadySeconds" not in _dep(api)["spec"]
    old = {"a": ("h1", True, ""), "b": ("h1", True, ""), "c": ("h1", True, "")}
    _deploy_controller(api, old, 3)
    started = sync(kube, _release(tmp_path, tag="1.26.0"))
    assert started.ok and [n.step for u in started.units for n in u.canaries] == [Step.STARTED]
    assert "goes to 1 of 3 SuperNodes first" in started.units[0].canaries[0].message
    spec = _dep(api)["spec"]
    assert spec["minReadySeconds"] == BRAKE and spec["strategy"]["rollingUpdate"] == {"maxSurge": 0,
                                                                                     "maxUnavailable": 1}
    assert _dep(api)["metadata"]["annotations"][ANN_CANARY_FROM] == "h1"
    _deploy_controller(api, {"a": ("h1", True, ""), "b": ("h1", True, ""), "n": ("h2", False, "ErrImagePull")}, 1)
    version = _dep(api)["metadata"]["resourceVersion"]
    failed = sync(kube, _release(tmp_path, tag="1.26.0"))
    change = next(c for u in failed.units for c in u.changes if c.ref.kind == "Deployment")
    assert not failed.ok and change.cause is Cause.CANARY_FAILED and "ErrImagePull" in change.message
    assert _dep(api)["metadata"]["resourceVersion"] == version  # nothing written: the brake stays
    fixed = sync(kube, _release(tmp_path, tag="1.27.0"))  # the failed canary's hash is not the fix's canary
    assert fixed.ok and [n.step for u in fixed.units for n in u.canaries] == [Step.STARTED]
    assert _dep(api)["metadata"]["annotations"][ANN_CANARY_FROM] == "h1,h2"
    _deploy_controller(api, {"a": ("h1", True, ""), "b": ("h1", True, ""), "n": ("h3", True, "")}, 1)
    passed = sync(kube, _release(tmp_path, tag="1.27.0"))
    assert passed.ok and [n.step for u in passed.units for n in u.canaries] == [Step.PASSED]
    spec = _dep(api)["spec"]  # the release's strategy again: the controller rolls the rest
    assert "minReadySeconds" not in spec and "progressDeadlineSeconds" not in spec
    assert spec["strategy"]["type"] == "RollingUpdate" and not spec["strategy"].get("rollingUpdate")
    _deploy_controller(api, {"x": ("h3", True, ""), "y": ("h3", True, ""), "n": ("h3", True, "")}, 3)
    writes = kube.writes
    done = sync(kube, _release(tmp_path, tag="1.27.0"))
    assert done.ok and not done.units[0].canaries and kube.writes == writes  # done: zero writes


def test_a_release_canary_reads_the_supernodes_its_federation_lists() -> None:
    health = FlowerHealth(True, "fed:9093", "2026-01-01T00:00:10Z",
                          pools=(PoolHealth(FED_UNIT.id, "a", "", 3, online=3),
                                 PoolHealth(REL_UNIT.id, "supernode", "", 3, online=2)))
    watch = cast(FlowerWatch, SimpleNamespace(probe=SimpleNamespace(enabled=True), health={FED_UNIT: health}))
    canaries = Canaries(lambda _u, _e: None, lambda _u, _d: None, lambda: watch)
    ref = ObjectRef("Deployment", NS, DEP)
    assert canaries.health(REL_UNIT)(ref, "supernode") == FlowerSeen(2, 3, 1767225610.0)
    assert canaries.health(Unit("supernode", NS, "other"))(ref, "supernode") is None


def test_the_template_digest_is_of_the_sealed_template_never_of_plain_values(tmp_path: Path) -> None:
    env = "        env:\n          - name: TOKEN\n            value: s3cr3t-token-value\n"
    state = load_repo(write(tmp_path, pools=pool("a", 3, env), annotations=CANARY))
    assert not state.failed, state.diagnostics
    [loaded] = state.units
    plain = by_kind(render_unit(loaded), "StatefulSet", STS)
    sealed = by_kind(render_unit(dataclasses.replace(loaded, sealed=frozenset({"s3cr3t-token-value"}),
                                                     seal_key=b"k" * 32)), "StatefulSet", STS)
    assert "s3cr3t-token-value" not in json.dumps(sealed["spec"]["template"])  # the value went to a Secret

    def digest(sts: dict[str, Any]) -> str:
        text = json.dumps(sts["spec"]["template"], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    assert sealed["metadata"]["annotations"][ANN_CANARY_TEMPLATE] == digest(sealed) != digest(plain)
