"""Metrics: what the exposition says after each observe_* call, and which series go away."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from syncer import __version__
from syncer.engine.changeset import Action, Cause, Change, SkipReason, UnitResult
from syncer.identity import ObjectRef, Unit
from syncer.observe.flower_health import FlowerHealth, PoolHealth
from syncer.observe.gc_pauses import GCPauses
from syncer.observe.health import GPUCount, NodeGPU
from syncer.observe.metrics import CONTENT_TYPE, Metrics, corrections_by_kind, drift_by_kind
from syncer.observe.notify import Notifier, Receiver
from syncer.observe.status import ClusterGPUs, PoolStatus, UnitStatus

FED = "federation/flower/fed"
SN = "supernode/edge/pytorch"
FED_UNIT, SN_UNIT = Unit.parse(FED), Unit.parse(SN)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def ref(text: str) -> ObjectRef:
    kind, namespace, name = text.split("/")
    return ObjectRef(kind, namespace, name)


def samples(m: Metrics) -> Samples:
    """Every sample of the text exposition, by (sample name, sorted labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(m.exposition().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return samples(m).get((name, tuple(sorted(labels.items()))))


def series(m: Metrics, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in samples(m) if n == name]


def test_own_registry_two_instances_do_not_clash() -> None:
    a, b = Metrics(), Metrics()
    a.set_queue_depth(3)
    b.set_queue_depth(5)
    assert value(a, "flower_syncer_queue_depth") == 3
    assert value(b, "flower_syncer_queue_depth") == 5
    assert REGISTRY.get_sample_value("flower_syncer_queue_depth") is None
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_agent_metrics_present_from_the_start() -> None:
    m = Metrics()
    assert value(m, "flower_syncer_up") == 1
    assert value(m, "flower_syncer_build_info", version=__version__) == 1
    assert value(m, "flower_syncer_leader") == 0
    assert value(m, "flower_syncer_source_last_fetch_timestamp_seconds") == 0
    assert value(m, "flower_syncer_source_fetch_errors_total", reason="unreachable") == 0
    m.set_leader(True)
    assert value(m, "flower_syncer_leader") == 1
    m.set_leader(False)
    assert value(m, "flower_syncer_leader") == 0


def test_observe_sync_success_counts_actions() -> None:
    m = Metrics()
    result = UnitResult(FED_UNIT, changes=[
        Change(ref("StatefulSet/flower/fed-superlink"), Action.CONFIGURED, drift=True),
        Change(ref("StatefulSet/flower/fed-pool-a"), Action.CONFIGURED, drift=True),
        Change(ref("Service/flower/fed"), Action.CONFIGURED),  # Git changed it: not a correction
        Change(ref("ConfigMap/flower/x"), Action.UNCHANGED),
        Change(ref("Secret/flower/y"), Action.CREATED),
        Change(ref("Service/flower/old"), Action.DELETED),
    ])
    before = time.time()
    m.observe_sync(result, 0.3)
    assert value(m, "flower_syncer_sync_total", unit=FED, result="success") == 1
    assert value(m, "flower_syncer_sync_total", unit=FED, result="failed") == 0
    assert value(m, "flower_syncer_sync_total", unit=FED, result="skipped") == 0
    assert value(m, "flower_syncer_sync_duration_seconds_count", unit=FED) == 1
    assert value(m, "flower_syncer_sync_duration_seconds_sum", unit=FED) == pytest.approx(0.3)
    assert value(m, "flower_syncer_sync_duration_seconds_bucket", unit=FED, le="0.25") == 0
    assert value(m, "flower_syncer_sync_duration_seconds_bucket", unit=FED, le="0.5") == 1
    assert value(m, "flower_syncer_sync_duration_seconds_bucket", unit=FED, le="0.01") == 0
    assert value(m, "flower_syncer_sync_duration_seconds_bucket", unit=FED, le="60.0") == 1
    assert (value(m, "flower_syncer_last_sync_timestamp_seconds", unit=FED) or 0) >= before
    assert (value(m, "flower_syncer_last_success_timestamp_seconds", unit=FED) or 0) >= before
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="configured") == 3
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="unchanged") == 1
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="created") == 1
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="deleted") == 1
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="failed") is None
    assert series(m, "flower_syncer_drift_corrections_total") == []  # counted by observe_drift_corrections

    m.observe_sync(UnitResult(FED_UNIT, changes=[Change(ref("StatefulSet/flower/fed-pool-a"), Action.CONFIGURED,
                                                   drift=True)]), 0.02)
    assert value(m, "flower_syncer_sync_total", unit=FED, result="success") == 2
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="configured") == 4


def test_drift_corrections() -> None:
    m = Metrics()
    result = UnitResult(FED_UNIT, changes=[
        Change(ref("StatefulSet/flower/fed-superlink"), Action.CONFIGURED, drift=True),
        Change(ref("StatefulSet/flower/fed-pool-a"), Action.RECREATED, drift=True),
        Change(ref("Service/flower/fed"), Action.CONFIGURED),  # Git changed it: not a correction
        Change(ref("Service/flower/gone"), Action.CREATED),  # someone deleted it (it is in the inventory)
        Change(ref("Secret/flower/new"), Action.CREATED),  # new in Git
        # a failed correction is none
        Change(ref("ConfigMap/flower/a"), Action.FAILED, drift=True, cause=Cause.INVALID),
    ])
    counts = corrections_by_kind(result, known={ref("Service/flower/gone"), ref("Service/flower/fed")})
    assert counts == {"StatefulSet": 2, "Service": 1}
    m.observe_drift_corrections(FED, counts)
    m.observe_drift_corrections(FED, {"StatefulSet": 1, "Secret": 0})
    assert value(m, "flower_syncer_drift_corrections_total", unit=FED, kind="StatefulSet") == 3
    assert value(m, "flower_syncer_drift_corrections_total", unit=FED, kind="Service") == 1
    assert value(m, "flower_syncer_drift_corrections_total", unit=FED, kind="Secret") is None


def test_observe_sync_failed_and_skipped() -> None:
    m = Metrics()
    m.observe_sync(UnitResult(FED_UNIT, errors=["configuration has errors"]), 0.01)
    invalid = Change(ref("Service/flower/a"), Action.FAILED, "422 Invalid", cause=Cause.INVALID)
    m.observe_sync(UnitResult(FED_UNIT, changes=[invalid]), 1.0)
    m.observe_sync(UnitResult(SN_UNIT, skipped=SkipReason.SUSPENDED_IN_GIT), 0.001)
    assert value(m, "flower_syncer_sync_total", unit=FED, result="failed") == 2
    assert value(m, "flower_syncer_sync_total", unit=FED, result="success") == 0
    assert value(m, "flower_syncer_sync_total", unit=SN, result="skipped") == 1
    assert value(m, "flower_syncer_objects_applied_total", unit=FED, action="failed") == 1
    # a failed sync does not move the last-success time
    assert value(m, "flower_syncer_last_success_timestamp_seconds", unit=FED) is None
    assert value(m, "flower_syncer_last_sync_timestamp_seconds", unit=FED) is not None


def test_commit_to_applied_histogram() -> None:
    m = Metrics()
    m.observe_commit_applied(0.005)
    m.observe_commit_applied(42.0)
    m.observe_commit_applied(1000.0)
    assert value(m, "flower_syncer_commit_to_applied_seconds_count") == 3
    assert value(m, "flower_syncer_commit_to_applied_seconds_bucket", le="0.01") == 1
    assert value(m, "flower_syncer_commit_to_applied_seconds_bucket", le="60.0") == 2
    assert value(m, "flower_syncer_commit_to_applied_seconds_bucket", le="300.0") == 2
    assert value(m, "flower_syncer_commit_to_applied_seconds_bucket", le="+Inf") == 3


def test_revision_info_keeps_only_the_current_revision() -> None:
    m = Metrics()
    m.set_revision("aaa111")
    assert series(m, "flower_syncer_source_revision_info") == [{"revision": "aaa111"}]
    m.set_revision("bbb222")
    m.set_revision("bbb222")
    assert series(m, "flower_syncer_source_revision_info") == [{"revision": "bbb222"}]
    assert value(m, "flower_syncer_source_revision_info", revision="bbb222") == 1


def test_source_fetch_errors_and_last_fetch() -> None:
    m = Metrics()
    m.fetch_error("unreachable")
    m.fetch_error("unreachable")
    m.fetch_error("auth")
    m.fetch_error("something the source made up")
    assert value(m, "flower_syncer_source_fetch_errors_total", reason="unreachable") == 2
    assert value(m, "flower_syncer_source_fetch_errors_total", reason="auth") == 1
    assert value(m, "flower_syncer_source_fetch_errors_total", reason="other") == 1
    assert {s["reason"] for s in series(m, "flower_syncer_source_fetch_errors_total")} == {
        "unreachable", "auth", "ref-not-found", "path-not-found", "corrupt", "invalid", "unverified", "other"}
    before = time.time()
    m.fetch_ok()
    assert (value(m, "flower_syncer_source_last_fetch_timestamp_seconds") or 0) >= before


def test_config_errors_queue_depth() -> None:
    m = Metrics()
    m.set_config_errors(FED, 3)
    m.set_config_errors(SN, 0)
    m.set_queue_depth(7)
    assert value(m, "flower_syncer_config_errors", unit=FED) == 3
    assert value(m, "flower_syncer_config_errors", unit=SN) == 0
    assert value(m, "flower_syncer_queue_depth") == 7
    m.set_config_errors(FED, 0)
    assert value(m, "flower_syncer_config_errors", unit=FED) == 0


def test_drift_objects_by_kind() -> None:
    m = Metrics()
    dry_run = UnitResult(FED_UNIT, changes=[
        Change(ref("StatefulSet/flower/a"), Action.CONFIGURED, "would configure", drift=True),
        Change(ref("StatefulSet/flower/b"), Action.CONFIGURED, "would configure"),
        Change(ref("Service/flower/c"), Action.CREATED, "would create"),
        Change(ref("Secret/flower/d"), Action.UNCHANGED),
        Change(ref("Service/flower/e"), Action.SKIPPED),
    ])
    assert drift_by_kind(dry_run) == {"StatefulSet": 2, "Service": 1}
    m.set_drift(FED, drift_by_kind(dry_run))
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="StatefulSet") == 2
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="Service") == 1
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="Secret") is None
    m.set_drift(FED, {"Service": 1})  # the StatefulSets were put back: 0, not stale
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="StatefulSet") == 0
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="Service") == 1
    m.set_drift(FED, {})
    assert {v for (n, _), v in samples(m).items() if n == "flower_syncer_drift_objects"} == {0}


def _pool(pool: str, desired: int, ready: int, *, healthy: bool, gpus: dict[str, tuple[int, int]] | None = None,
          kind: str = "StatefulSet") -> PoolStatus:
    return PoolStatus(pool, kind, f"fed-{pool}", desired, ready, healthy=healthy,
                      gpus={r: GPUCount(req, alloc) for r, (req, alloc) in (gpus or {}).items()})


def _statuses() -> list[UnitStatus]:
    return [
        UnitStatus(FED, pools=[
            _pool("superlink", 1, 1, healthy=True),
            _pool("gpu-a100", 4, 2, healthy=False, gpus={"nvidia.com/gpu": (8, 4)}),
            _pool("cpu", 3, 3, healthy=True),
        ]),
        UnitStatus(SN, pools=[_pool("supernode", 2, 2, healthy=True, kind="Deployment",
                                    gpus={"amd.com/gpu": (2, 2)})]),
    ]


def test_observe_status_pools_units_and_gpus() -> None:
    m = Metrics()
    nodes = [NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 4), NodeGPU("gpu-nvidia-1", "nvidia.com/gpu", 4, 0),
             NodeGPU("gpu-amd-0", "amd.com/gpu", 8, 2)]
    m.observe_status(_statuses(), nodes)
    v = samples(m)

    def at(name: str, **labels: str) -> float | None:
        return v.get((name, tuple(sorted(labels.items()))))

    assert at("flower_syncer_pool_desired_replicas", unit=FED, pool="gpu-a100") == 4
    assert at("flower_syncer_pool_ready_replicas", unit=FED, pool="gpu-a100") == 2
    assert at("flower_syncer_pool_ready", unit=FED, pool="gpu-a100") == 0
    assert at("flower_syncer_pool_ready", unit=FED, pool="superlink") == 1
    assert at("flower_syncer_pool_ready", unit=SN, pool="supernode") == 1
    assert at("flower_syncer_unit_ready", unit=FED) == 0
    assert at("flower_syncer_unit_ready", unit=SN) == 1
    assert at("flower_syncer_pool_gpus_requested", unit=FED, pool="gpu-a100", resource="nvidia.com/gpu") == 8
    assert at("flower_syncer_pool_gpus_allocated", unit=FED, pool="gpu-a100", resource="nvidia.com/gpu") == 4
    assert at("flower_syncer_pool_gpus_requested", unit=SN, pool="supernode", resource="amd.com/gpu") == 2
    assert at("flower_syncer_pool_gpus_requested", unit=FED, pool="cpu", resource="nvidia.com/gpu") is None
    assert at("flower_syncer_node_gpus_allocatable", node="gpu-nvidia-1", resource="nvidia.com/gpu") == 4
    assert at("flower_syncer_node_gpus_used", node="gpu-nvidia-0", resource="nvidia.com/gpu") == 4
    assert at("flower_syncer_node_gpus_used", node="gpu-amd-0", resource="amd.com/gpu") == 2
    assert len(series(m, "flower_syncer_pool_ready")) == 4


def test_observe_status_removes_vanished_pools_units_and_nodes() -> None:
    m = Metrics()
    m.observe_status(_statuses(), [NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 4),
                                   NodeGPU("gpu-nvidia-1", "nvidia.com/gpu", 4, 0)])
    # the gpu-a100 pool left the federation, the SuperNode release left Git, a node went away
    fed = _statuses()[0]
    fed.pools = [p for p in fed.pools if p.pool != "gpu-a100"]
    m.observe_status([fed], ClusterGPUs([NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 0)]))
    pools = {(s["unit"], s["pool"]) for s in series(m, "flower_syncer_pool_desired_replicas")}
    assert pools == {(FED, "superlink"), (FED, "cpu")}
    assert {s["unit"] for s in series(m, "flower_syncer_unit_ready")} == {FED}
    assert value(m, "flower_syncer_unit_ready", unit=FED) == 1
    assert series(m, "flower_syncer_pool_gpus_requested") == []
    assert series(m, "flower_syncer_pool_gpus_allocated") == []
    assert series(m, "flower_syncer_node_gpus_allocatable") == [{"node": "gpu-nvidia-0", "resource": "nvidia.com/gpu"}]
    assert value(m, "flower_syncer_node_gpus_used", node="gpu-nvidia-0", resource="nvidia.com/gpu") == 0
    # node figures not collected this time: kept; collected and none: gone
    m.observe_status([fed], None)
    assert len(series(m, "flower_syncer_node_gpus_used")) == 1
    m.observe_status([fed], ClusterGPUs(error="forbidden"))
    assert series(m, "flower_syncer_node_gpus_used") == []


def test_two_workloads_with_one_pool_name_are_added_up() -> None:
    m = Metrics()
    m.observe_status([UnitStatus(FED, pools=[
        _pool("p", 2, 2, healthy=True, gpus={"nvidia.com/gpu": (2, 2)}),
        _pool("p", 3, 1, healthy=False, gpus={"nvidia.com/gpu": (3, 1)}),
    ])])
    text = m.exposition().decode()
    assert text.count('flower_syncer_pool_desired_replicas{pool="p"') == 1
    assert value(m, "flower_syncer_pool_desired_replicas", unit=FED, pool="p") == 5
    assert value(m, "flower_syncer_pool_ready_replicas", unit=FED, pool="p") == 3
    assert value(m, "flower_syncer_pool_ready", unit=FED, pool="p") == 0
    assert value(m, "flower_syncer_pool_gpus_requested", unit=FED, pool="p", resource="nvidia.com/gpu") == 5


def test_forget_unit_drops_every_series_of_the_unit() -> None:
    m = Metrics()
    for unit in (FED, SN):
        configured = Change(ref("StatefulSet/x/a"), Action.CONFIGURED, drift=True)
        m.observe_sync(UnitResult(Unit.parse(unit), changes=[configured]), 0.1)
        m.set_config_errors(unit, 1)
        m.set_drift(unit, {"StatefulSet": 1})
        m.observe_drift_corrections(unit, {"StatefulSet": 1})
        m.observe_unit_commit_applied(unit, 0.2)
        m.set_supernode_keys(unit, 2, 1)
    m.observe_status(_statuses(), [NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 4)])
    assert value(m, "flower_syncer_supernode_keys", unit=SN, state="failing") == 1
    assert value(m, "flower_syncer_unit_commit_to_applied_seconds", unit=SN) == 0.2
    m.forget_unit(SN)
    units = {dict(labels).get("unit") for (_, labels) in samples(m)} - {None}
    assert units == {FED}
    assert value(m, "flower_syncer_sync_total", unit=FED, result="success") == 1
    assert value(m, "flower_syncer_drift_objects", unit=FED, kind="StatefulSet") == 1
    assert len(series(m, "flower_syncer_node_gpus_used")) == 1
    m.forget_unit(FED)
    m.forget_unit("federation/never/seen")
    assert {dict(labels).get("unit") for (_, labels) in samples(m)} == {None}
    # a unit that comes back starts from zero
    m.observe_sync(UnitResult(SN_UNIT), 0.1)
    assert value(m, "flower_syncer_sync_total", unit=SN, result="success") == 1


def test_the_series_written_as_text_are_byte_for_byte_what_prometheus_client_writes() -> None:
    """The per-unit and status families are written straight from their figures
    (syncer.observe.textformat); prometheus_client, given the same families as metric objects,
    is the reference: every family, every kind (counter with `_created`, histogram, gauges), label
    values that need escaping, units that never synced."""
    from prometheus_client import generate_latest

    from syncer.observe.health import ProblemSummary

    m = Metrics()
    odd = 'supernode/edge/we"ird\\name\nx'  # quote, backslash, newline: escaped in label values
    for unit in (FED, SN, odd):
        m.init_unit(unit, {"Service", "StatefulSet"})
    m.observe_sync(UnitResult(FED_UNIT, changes=[Change(ref("Service/flower/a"), Action.CREATED),
                                                 Change(ref("StatefulSet/flower/b"), Action.CONFIGURED)]), 0.04)
    m.observe_sync(UnitResult(FED_UNIT, errors=["boom"]), 75.0)
    m.observe_sync(UnitResult(SN_UNIT, skipped=SkipReason.SUSPENDED_BY_CLI), 0.2)
    m.observe_drift_corrections(SN, {"StatefulSet": 2})
    m.set_drift(FED, {"Service": 1, "StatefulSet": 0})
    m.set_supernode_keys(FED, 3, 1)
    m.set_config_errors(odd, 2)
    m.set_suspended(SN, True)
    m.observe_unit_commit_applied(FED, 0.4)
    m.set_unit_state(FED, "Synced", "Healthy")
    m.set_unit_state(odd, "ConfigError", 'Un"known')
    statuses = [*_statuses(), UnitStatus(odd, pools=[
        PoolStatus('p"1', "StatefulSet", "x", 3, 1, healthy=False, gpus={"nvidia.com/gpu": GPUCount(3, 1)},
                   problem=ProblemSummary("Unschedulable", "no GPU", 2, 3, "x-0"))])]
    m.observe_status(statuses, [NodeGPU("gpu-nvidia-0", "nvidia.com/gpu", 4, 4), NodeGPU("n\\1", "amd.com/gpu", 2, 0)])
    m.set_revision("abc")
    m.observe_flower({FED_UNIT: FlowerHealth(True, "fed-superlink:9093", "2026-01-01T00:00:00Z", pools=(
        PoolHealth(FED, "gpu", "", 3, online=2, offline=1),), unmatched=1, runs={"running": 1})}, waiting=2)
    m.registry.register(GCPauses())  # registered by the agent's runner, as is the notifier
    m.registry.register(Notifier([Receiver("ops", "generic", "http://127.0.0.1:9/hook")]))

    text = bytes(m.exposition())
    assert text == generate_latest(m.registry)  # its collect() makes every family as metric objects
    assert b'flower_syncer_federation_supernodes{pool="gpu",state="offline",unit="federation/flower/fed"} 1.0' in text
    assert b'flower_syncer_notifications_total{outcome="dropped",receiver="ops"} 0.0' in text
    assert 'unit="supernode/edge/we\\"ird\\\\name\\nx"' in text.decode()  # so escaping was covered
    assert b"flower_syncer_pool_problem_pods{" in text and b"flower_syncer_sync_duration_seconds_created{" in text
    # ... and the text parses back to the figures
    assert value(m, "flower_syncer_config_errors", unit=odd) == 2
    assert value(m, "flower_syncer_pool_gpus_allocated", unit=odd, pool='p"1', resource="nvidia.com/gpu") == 1


def test_a_fresh_registry_is_written_as_generate_latest_writes_it() -> None:
    """Before any unit is loaded: the counters and histogram of no series have no `_created`
    family (prometheus_client writes none; the text writer once wrote their HELP and TYPE)."""
    from prometheus_client import generate_latest

    m = Metrics()
    assert bytes(m.exposition()) == generate_latest(m.registry)
    assert b"# TYPE flower_syncer_sync_total counter" in bytes(m.exposition())


def test_exposition_is_valid_text_format() -> None:
    m = Metrics()
    m.observe_sync(UnitResult(FED_UNIT, changes=[Change(ref("Service/flower/a"), Action.CREATED)]), 0.2)
    m.observe_status(_statuses(), [NodeGPU("n", "nvidia.com/gpu", 1, 1)])
    m.set_revision("abc")
    m.observe_drift_corrections(FED, {"Service": 1})
    text = m.exposition().decode()
    assert "# TYPE flower_syncer_sync_total counter" in text
    assert "# TYPE flower_syncer_sync_duration_seconds histogram" in text
    assert "# TYPE flower_syncer_pool_ready gauge" in text
    assert "# HELP flower_syncer_node_gpus_used " in text
    names = {f.name for f in text_string_to_metric_families(text)}
    expected = {
        "flower_syncer_sync", "flower_syncer_sync_duration_seconds", "flower_syncer_last_sync_timestamp_seconds",
        "flower_syncer_commit_to_applied_seconds", "flower_syncer_source_revision_info",
        "flower_syncer_source_fetch_errors", "flower_syncer_source_last_fetch_timestamp_seconds",
        "flower_syncer_config_errors", "flower_syncer_queue_depth", "flower_syncer_objects_applied",
        "flower_syncer_drift_objects", "flower_syncer_drift_corrections", "flower_syncer_pool_desired_replicas",
        "flower_syncer_pool_ready_replicas", "flower_syncer_pool_ready", "flower_syncer_unit_ready",
        "flower_syncer_pool_gpus_requested", "flower_syncer_pool_gpus_allocated",
        "flower_syncer_node_gpus_allocatable", "flower_syncer_node_gpus_used", "flower_syncer_leader",
        "flower_syncer_up", "flower_syncer_build_info", "flower_syncer_status_round_cpu_seconds",
        "flower_syncer_flower_checks_waiting",
    }
    assert expected <= names


def test_init_unit_creates_series_at_zero_so_rate_counts_the_first_event() -> None:
    m = Metrics()
    m.init_unit("federation/ns/fed", {"StatefulSet", "Service"})
    text = m.exposition().decode()
    assert 'flower_syncer_sync_total{result="success",unit="federation/ns/fed"} 0.0' in text
    assert 'flower_syncer_objects_applied_total{action="created",unit="federation/ns/fed"} 0.0' in text
    assert 'flower_syncer_drift_corrections_total{kind="StatefulSet",unit="federation/ns/fed"} 0.0' in text
    assert 'flower_syncer_sync_duration_seconds_count{unit="federation/ns/fed"} 0.0' in text
    m.forget_unit("federation/ns/fed")
    assert "federation/ns/fed" not in m.exposition().decode()


def test_pool_problem_reason_is_exported_and_cleared() -> None:
    from syncer.observe.health import ProblemSummary
    from syncer.observe.status import PoolStatus, UnitStatus

    m = Metrics()
    stuck = PoolStatus(pool="gpu", kind="StatefulSet", name="fed-supernode-gpu", desired=3, ready=2,
                       problem=ProblemSummary("Unschedulable", "0/7 nodes: Insufficient nvidia.com/gpu", 1, 3,
                                              "fed-supernode-gpu-2"))
    m.observe_status([UnitStatus(unit="federation/ns/fed", pools=[stuck])])
    text = m.exposition().decode()
    assert 'flower_syncer_pool_problem_pods{pool="gpu",reason="Unschedulable",unit="federation/ns/fed"} 1.0' in text
    fine = PoolStatus(pool="gpu", kind="StatefulSet", name="fed-supernode-gpu", desired=3, ready=3, healthy=True)
    m.observe_status([UnitStatus(unit="federation/ns/fed", pools=[fine])])
    assert "flower_syncer_pool_problem_pods{" not in m.exposition().decode()


def test_per_unit_series_are_what_prometheus_clients_labelled_metrics_expose() -> None:
    """The per-unit figures are kept as plain numbers (syncer.observe.unit_metrics); a scrape gives
    the samples prometheus_client's own labelled metrics give for the same calls, `_created`
    included (its values are creation times, so only their presence is compared)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    r = CollectorRegistry()
    sync_total = Counter("flower_syncer_sync_total", "", ["unit", "result"], registry=r)
    duration = Histogram("flower_syncer_sync_duration_seconds", "", ["unit"], registry=r,
                         buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0))
    applied = Counter("flower_syncer_objects_applied_total", "", ["unit", "action"], registry=r)
    corrections = Counter("flower_syncer_drift_corrections_total", "", ["unit", "kind"], registry=r)
    drift = Gauge("flower_syncer_drift_objects", "", ["unit", "kind"], registry=r)
    keys = Gauge("flower_syncer_supernode_keys", "", ["unit", "state"], registry=r)
    gauges = {n: Gauge(n, "", ["unit"], registry=r) for n in (
        "flower_syncer_config_errors", "flower_syncer_unit_suspended", "flower_syncer_unit_commit_to_applied_seconds",
        "flower_syncer_last_sync_timestamp_seconds", "flower_syncer_last_success_timestamp_seconds")}

    m = Metrics()
    m.init_unit(FED, {"Service"})
    for unit in (FED, SN):
        for result in ("success", "failed", "skipped"):
            sync_total.labels(unit, result)
        duration.labels(unit)
    for action in Action:
        applied.labels(FED, action.value)
    corrections.labels(FED, "Service")
    for seconds, changes in ((0.02, [Action.CREATED, Action.CREATED]), (0.3, [Action.UNCHANGED]), (75.0, [])):
        made = [Change(ref(f"Service/edge/s{i}"), a) for i, a in enumerate(changes)]
        m.observe_sync(UnitResult(SN_UNIT, changes=made), seconds)
        sync_total.labels(SN, "success").inc()
        duration.labels(SN).observe(seconds)
        for a in changes:
            applied.labels(SN, a.value).inc()
    m.observe_sync(UnitResult(FED_UNIT, errors=["boom"]), 0.01)
    sync_total.labels(FED, "failed").inc()
    duration.labels(FED).observe(0.01)
    m.observe_drift_corrections(SN, {"StatefulSet": 2, "Service": 0})
    corrections.labels(SN, "StatefulSet").inc(2)
    m.set_drift(FED, {"StatefulSet": 1})
    m.set_drift(FED, {"Service": 2})
    drift.labels(FED, "StatefulSet").set(0)
    drift.labels(FED, "Service").set(2)
    m.set_supernode_keys(FED, 3, 1)
    keys.labels(FED, "admitted").set(3)
    keys.labels(FED, "failing").set(1)
    m.set_config_errors(SN, 2)
    gauges["flower_syncer_config_errors"].labels(SN).set(2)
    m.set_suspended(FED, True)
    gauges["flower_syncer_unit_suspended"].labels(FED).set(1)
    m.observe_unit_commit_applied(SN, 0.4)
    gauges["flower_syncer_unit_commit_to_applied_seconds"].labels(SN).set(0.4)
    for unit in (FED, SN):
        gauges["flower_syncer_last_sync_timestamp_seconds"].labels(unit).set(1)
    gauges["flower_syncer_last_success_timestamp_seconds"].labels(SN).set(1)  # FED's one sync failed

    def per_unit(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float | None]:
        return {(s.name, tuple(sorted(s.labels.items()))): None if s.name.endswith(("_created", "timestamp_seconds"))
                else s.value
                for f in text_string_to_metric_families(text) for s in f.samples if "unit" in s.labels}

    from prometheus_client import generate_latest

    reference = per_unit(generate_latest(r).decode())
    assert per_unit(m.exposition().decode()) == reference
    assert len(reference) == 78  # so the comparison covers something
    m.forget_unit(SN)
    assert not any(dict(labels)["unit"] == SN for _, labels in per_unit(m.exposition().decode()))


def test_a_scrape_holds_one_family_at_a_time() -> None:
    """At 2,001 units a scrape is 147,000 samples: made all at once, their objects peaked at 4.5
    times the text's size (56 MiB for 12.5), and the agent stayed larger by much of that. Family by
    family, the peak is the text (and its copy when joined) plus the largest family."""
    import tracemalloc

    m = Metrics()
    units = [Unit("federation", "ns", f"fed-{i}") for i in range(150)]
    for u in units:
        m.init_unit(u.id, ["Service", "StatefulSet"])
        m.observe_sync(UnitResult(u, [Change(ref(f"Service/ns/{u.name}"), Action.CREATED)]), 0.2)
        m.set_unit_state(u.id, "Synced", "Healthy")
    m.observe_status([UnitStatus(u.id, pools=[PoolStatus(f"p{p}", "StatefulSet", f"{u.name}-p{p}", 1, 1,
                                                          healthy=True) for p in range(10)]) for u in units])
    tracemalloc.start()
    try:
        text = m.exposition()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.count(b"\n") > 10_000
    assert peak < 3 * len(text), (peak, len(text))
