"""Flower-level health (syncer.observe.flower_health): SuperNodes matched to the pools and releases
Git expects, by key with node authentication and by count without; runs by outcome; the Healthy
condition it gives; each failed run and each lost pool news once; bounded metric labels."""

from __future__ import annotations

from syncer.cluster.flower_control import RegisteredNode, RunInfo
from syncer.observe.conditions import HealthReason
from syncer.observe.flower_health import (
    ControlAnswer,
    compute,
    health_condition,
    lost_pools,
    metric_series,
    new_failures,
)
from syncer.plan import ExpectedPool, FlowerTarget

FED = "federation/ns/fed"
SITE_A, SITE_B = "supernode/ns/site-a", "supernode/ns/site-b"
KEY_A, KEY_B, STRANGER = b"-----A-----", b"-----B-----", b"-----S-----"


def node(i: int, status: str, key: bytes = b"") -> RegisteredNode:
    return RegisteredNode(i, status, key + b"\n")


def answer(nodes: list[RegisteredNode] | None, runs: list[RunInfo] | None = None, error: str = "") -> ControlAnswer:
    if nodes is None:
        return ControlAnswer("fed-superlink.ns.svc:9093", "2026-11-26T09:00:00Z", error=error, code="unavailable")
    return ControlAnswer("fed-superlink.ns.svc:9093", "2026-11-26T09:00:00Z", tuple(nodes), tuple(runs or ()))


KEYED = FlowerTarget("fed-superlink.ns.svc:9093", "http", "fed-superlink-ca", (
    ExpectedPool(SITE_A, "supernode", 1, frozenset({KEY_A})),
    ExpectedPool(SITE_B, "supernode", 1, frozenset({KEY_B}))), node_auth=True)
COUNTED = FlowerTarget("fed-superlink.ns.svc:9093", "http", "", (
    ExpectedPool(FED, "p", 3), ExpectedPool(FED, "q", 2), ExpectedPool(FED, "d", None)))


def test_with_node_auth_each_release_is_matched_by_its_key() -> None:
    health = compute(KEYED, answer([node(1, "online", KEY_A), node(2, "offline", KEY_B), node(3, "online", STRANGER),
                                    node(4, "unregistered", KEY_B)]))
    a, b = health.pools
    assert (a.unit, a.online, a.offline, a.matched_by) == (SITE_A, 1, 0, "publicKey")
    assert (b.unit, b.online, b.offline) == (SITE_B, 0, 1)  # the unregistered node is not counted
    assert (health.online, health.offline, health.unmatched, health.expected) == (2, 1, 1, 2)
    assert health.connected == "1/2"
    as_json = health.to_dict()
    assert as_json["supernodes"]["pools"][1] == {"unit": SITE_B, "pool": "supernode", "cluster": "", "expected": 1,
                                                 "online": 0, "offline": 1, "registered": 0, "matchedBy": "publicKey"}
    assert set(as_json) == {"reachable", "error", "code", "checkedAt", "address", "supernodes", "runs"}


def test_without_keys_online_nodes_are_credited_by_count_and_daemonsets_by_their_workload() -> None:
    nodes = [node(i, "online") for i in range(6)] + [node(9, "offline")]
    health = compute(COUNTED, answer(nodes), desired={(FED, "d"): 2})
    assert [(p.pool, p.online, p.expected, p.matched_by) for p in health.pools] == [
        ("p", 3, 3, "count"), ("q", 2, 2, "count"), ("d", 1, 2, "count")]
    assert health.unmatched == 1  # the offline node: a SuperNode restarted without node auth gets a new id
    assert [p.pool for p in health.short_pools()] == ["d"]


def test_more_online_than_expected_are_unmatched() -> None:
    target = FlowerTarget("a:1", "http", "", (ExpectedPool(FED, "p", 1),))
    health = compute(target, answer([node(1, "online"), node(2, "online")]))
    assert (health.pools[0].online, health.unmatched, health.connected) == (1, 1, "1/1")


def test_runs_by_outcome_and_the_last_failure_with_its_message() -> None:
    runs = [RunInfo(1, "a", "1", "finished", "completed", finished_at="2026-01-01T00:00:01"),
            RunInfo(2, "a", "1", "finished", "failed", finished_at="2026-01-01T00:00:03",
                    details="ServerApp failed with exception: E2E-FAIL on purpose\n\x1b[31m"),
            RunInfo(3, "a", "1", "finished", "failed", finished_at="2026-01-01T00:00:02", details="older"),
            RunInfo(4, "a", "1", "running", ""), RunInfo(5, "a", "1", "pending", ""),
            RunInfo(6, "a", "1", "finished", "stopped"), RunInfo(7, "a", "1", "starting", "")]
    health = compute(COUNTED, answer([], runs))
    out = health.to_dict()["runs"]
    assert {k: v for k, v in out.items() if k != "lastFailure"} == {
        "pending": 1, "starting": 1, "running": 1, "completed": 1, "failed": 2, "stopped": 1}
    assert out["lastFailure"] == {"runId": 2, "finishedAt": "2026-01-01T00:00:03",
                                  "message": "ServerApp failed with exception: E2E-FAIL on purpose\\n\\x1b[31m"}


def test_an_unreachable_superlink_is_unknown_with_the_error_and_reports_no_counts() -> None:
    health = compute(KEYED, answer(None, error="timed out"))
    assert not health.reachable and health.connected == "-" and health.to_dict()["code"] == "unavailable"
    cond = health_condition(health)
    assert cond is not None and cond.reason == HealthReason.UNKNOWN and "timed out" in cond.message
    assert metric_series(FED, health) == ([], [])


def test_pods_ready_but_supernodes_not_connected_is_degraded_after_the_grace() -> None:
    health = compute(KEYED, answer([node(1, "online", KEY_A), node(2, "registered", KEY_B)]))
    early = health_condition(health, short_for=5.0)
    late = health_condition(health, short_for=31.0)
    assert early is not None and early.reason == HealthReason.PROGRESSING
    assert late is not None and late.reason == HealthReason.DEGRADED and not late.status
    assert f"{SITE_B} pool supernode: 0/1 SuperNodes connected" in late.message
    assert health_condition(compute(KEYED, answer([node(1, "online", KEY_A), node(2, "online", KEY_B)])),
                            short_for=100) is None
    assert health_condition(None) is None
    assert health_condition(compute(KEYED, ControlAnswer("a:1", "", code="disabled"))) is None


def test_each_failed_run_is_news_once() -> None:
    seen: set[int] = set()
    runs = [RunInfo(1, "a", "1", "finished", "failed"), RunInfo(2, "a", "1", "finished", "completed")]
    assert [r.run_id for r in new_failures(runs, seen)] == [1]
    assert new_failures(runs, seen) == []
    assert [r.run_id for r in new_failures([*runs, RunInfo(3, "a", "1", "finished", "failed")], seen)] == [3]


def test_a_pool_losing_its_supernodes_is_news_once_per_drop() -> None:
    full = compute(KEYED, answer([node(1, "online", KEY_A), node(2, "online", KEY_B)]))
    lost = compute(KEYED, answer([node(1, "online", KEY_A), node(2, "offline", KEY_B)]))
    assert [p.unit for p in lost_pools(full, lost)] == [SITE_B]
    assert lost_pools(lost, lost) == []  # still short: no news
    assert lost_pools(None, lost) == [] and lost_pools(compute(KEYED, answer(None)), lost) == []


def test_metric_labels_are_git_pools_and_fixed_states() -> None:
    health = compute(KEYED, answer([node(1, "online", KEY_A), node(3, "online", STRANGER)],
                                   [RunInfo(1, "a", "1", "finished", "failed")]))
    nodes, runs = metric_series(FED, health)
    assert {(pool, state) for _, pool, state, _ in nodes} == {
        (SITE_A, s) for s in ("online", "offline", "registered", "expected")} | {
        (SITE_B, s) for s in ("online", "offline", "registered", "expected")} | {("-", "online")}
    assert (FED, SITE_A, "online", 1) in nodes and (FED, "-", "online", 1) in nodes
    assert {s: v for _, s, v in runs} == {"pending": 0, "starting": 0, "running": 0, "completed": 0,
                                                  "failed": 1, "stopped": 0}
