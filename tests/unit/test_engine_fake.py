"""The sync engine's decisions, in-process on an in-memory API server (tests/fakekube.py): the
apply ladder (unchanged without a request, dry-run, drift, conflicts, immutable fields), prune
safety, ownership and inventories. The integration tests prove the same on a real API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.engine.changeset import Action, Cause
from syncer.engine.live import managed_reads
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.identity import LABEL_REPOSITORY, Unit
from syncer.plan import Claims, Plan, Policy, UnitPlan
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.fakekube import FakeApiServer, FakeKube

NS = "flower"
FED = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:1.25.0
  supernodes:
    image: flwr/supernode:1.25.0
    pools:
{pools}
"""


def pool(name: str, replicas: int = 1) -> str:
    return f"      - name: {name}\n        replicas: {replicas}\n        images: {{}}\n"


@pytest.fixture
def server() -> FakeApiServer:
    api = FakeApiServer()
    api.add_namespace(NS)
    return api


@pytest.fixture
def kube(server: FakeApiServer) -> FakeKube:
    return FakeKube(server)


def write(repo: Path, name: str = "fed", pools: str = "", annotations: str = "", repo_name: str = "team") -> Path:
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {repo_name}\ndefaultNamespace: {NS}\n")
    (repo / "federations" / f"{name}.yaml").write_text(
        FED.format(name=name, pools=pools or pool("a"), annotations=annotations))
    return repo


def sync(kube: FakeKube, repo: Path, **opts: bool) -> SyncReport:
    state = load_repo(repo)
    return Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions(**opts))


def actions(report: SyncReport) -> dict[str, str]:
    return {str(c.ref): c.action.value for u in report.units for c in u.changes}


def test_create_then_resync_makes_no_request_per_object(kube: FakeKube, tmp_path: Path) -> None:
    repo = write(tmp_path)
    first = sync(kube, repo)
    assert first.ok, first.to_dict()
    assert actions(first)[f"StatefulSet/{NS}/fed-supernode-a"] == "created"
    before = dict(kube.counts)
    second = sync(kube, repo)
    assert second.ok and second.writes == 0
    assert set(actions(second).values()) == {"unchanged"}
    # the snapshot's LISTs and one GET of the namespace (a new engine): no request per object, no dry-run
    assert second.requests == len(managed_reads()) + 1
    assert kube.counts["PATCH dry-run"] == before.get("PATCH dry-run", 0)


def test_an_imperative_edit_is_drift_and_is_reverted(kube: FakeKube, server: FakeApiServer, tmp_path: Path) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    server.edit("StatefulSet", NS, "fed-supernode-a", {"spec": {"replicas": 7}}, manager="kubectl-scale")
    report = sync(kube, repo)
    change = next(c for u in report.units for c in u.changes if str(c.ref).endswith("/fed-supernode-a")
                  and str(c.ref).startswith("StatefulSet"))
    assert (change.action, change.drift) == (Action.CONFIGURED, True)
    assert "kubectl-scale" in change.message
    live = server.get("StatefulSet", NS, "fed-supernode-a")
    assert live is not None and live["spec"]["replicas"] == 1
    assert sync(kube, repo).writes == 0


def test_a_field_another_applier_owns_is_a_conflict_unless_forced(kube: FakeKube, server: FakeApiServer,
                                                                  tmp_path: Path) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    other = FakeKube(server)
    live = server.get("StatefulSet", NS, "fed-supernode-a")
    assert live is not None
    other.apply({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "fed-supernode-a",
                 "namespace": NS}, "spec": {"replicas": 5}}, manager="other-gitops", force=True)
    report = sync(kube, repo)
    failed = [c for u in report.units for c in u.changes if c.action is Action.FAILED]
    assert len(failed) == 1 and "other-gitops" in failed[0].message and "--force-conflicts" in failed[0].message
    assert failed[0].is_conflict() and [c for u in report.units for c in u.conflicts()] == failed
    forced = sync(kube, repo, force_conflicts=True)
    assert forced.ok
    taken = server.get("StatefulSet", NS, "fed-supernode-a")
    assert taken is not None and taken["spec"]["replicas"] == 1


def test_an_immutable_change_fails_or_recreates_with_the_policy(kube: FakeKube, server: FakeApiServer,
                                                                tmp_path: Path) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    uid = (server.get("StatefulSet", NS, "fed-superlink") or {})["metadata"]["uid"]
    server.edit("StatefulSet", NS, "fed-superlink", {"spec": {"selector": {"matchLabels": {"x": "y"}}}},
                manager="someone")
    report = sync(kube, repo)
    change = next(c for u in report.units for c in u.changes if str(c.ref) == f"StatefulSet/{NS}/fed-superlink")
    assert change.action is Action.FAILED and "allowRecreate" in change.message
    assert change.cause is Cause.IMMUTABLE_FIELD and not change.is_conflict()
    write(repo, annotations='"flower-syncer.io/allow-recreate": "true"')
    report = sync(kube, repo)
    assert actions(report)[f"StatefulSet/{NS}/fed-superlink"] == "recreated"
    assert (server.get("StatefulSet", NS, "fed-superlink") or {})["metadata"]["uid"] != uid


def test_prune_deletes_what_left_git_and_keeps_what_must_stay(kube: FakeKube, server: FakeApiServer,
                                                              tmp_path: Path) -> None:
    repo = write(tmp_path, pools=pool("a") + pool("b") + pool("c"))
    assert sync(kube, repo).ok
    server.edit("StatefulSet", NS, "fed-supernode-b", {"metadata": {"annotations": {
        "flower-syncer.io/prune": "disabled"}}}, manager="kubectl-annotate")
    server.edit("StatefulSet", NS, "fed-supernode-c", {"metadata": {"labels": {LABEL_REPOSITORY: "other"}}},
                manager="kubectl-label")
    write(repo, pools=pool("a"))
    report = sync(kube, repo)
    got = actions(report)
    assert got[f"StatefulSet/{NS}/fed-supernode-b"] == "skipped"
    assert got[f"StatefulSet/{NS}/fed-supernode-c"] == "skipped"
    assert got[f"Service/{NS}/fed-supernode-b"] == "deleted"
    assert server.get("StatefulSet", NS, "fed-supernode-b") is not None
    assert server.get("StatefulSet", NS, "fed-supernode-c") is not None


def test_a_missing_namespace_is_created(tmp_path: Path) -> None:
    server = FakeApiServer()
    kube = FakeKube(server)
    assert sync(kube, write(tmp_path)).ok
    assert server.get("Namespace", "", NS) is not None


def test_a_dry_run_writes_nothing(kube: FakeKube, server: FakeApiServer, tmp_path: Path) -> None:
    report = sync(kube, write(tmp_path), dry_run=True)
    assert report.writes == 0
    assert server.get("StatefulSet", NS, "fed-supernode-a") is None
    assert set(actions(report).values()) == {"created"}


def test_plan_units_are_synced_with_their_policy_and_revision(kube: FakeKube, server: FakeApiServer) -> None:
    unit = Unit("supernode", NS, "x")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS,
                                                                "labels": unit.labels()}, "data": {"k": "v"}}
    plan = Plan(units={unit: UnitPlan(unit, [cm], Policy(), "supernodes/x/values.yaml", "abc")},
                repository="team", revision="abc", claims=Claims.of([(unit, [cm])]))
    report = Engine(kube).sync(plan, SyncOptions())
    assert report.ok, report.to_dict()
    inv = server.get("ConfigMap", NS, "flower-syncer.supernode.x")
    assert inv is not None and '"revision": "abc"' in inv["data"]["inventory.json"]
    suspended = Plan(units={unit: UnitPlan(unit, [{**cm, "data": {"k": "w"}}], Policy(suspend=True))},
                     repository="team")
    result = Engine(kube).sync(suspended, SyncOptions())
    skipped = result.units[0].skipped
    assert skipped is not None and skipped.suspended
    assert (server.get("ConfigMap", NS, "x") or {})["data"] == {"k": "v"}


def test_diff_hides_flower_syncers_bookkeeping(kube: FakeKube, tmp_path: Path) -> None:
    """`diff` shows what a person changed, not the applied-hash or source annotations."""
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    write(tmp_path, pools=pool("a", replicas=3))
    state = load_repo(repo)
    report = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions(dry_run=True, with_diff=True))
    diffs = [c.diff for u in report.units for c in u.changes if c.diff]
    assert diffs and any("replicas: 3" in d for d in diffs)
    assert not [d for d in diffs if "flower-syncer.io/applied-hash" in d or "flower-syncer.io/source" in d]


def test_the_last_outcome_is_kept_on_the_inventory(kube: FakeKube, tmp_path: Path) -> None:
    """`status` reads why a unit is not in sync from its inventory (no agent needed, survives
    restarts); the record is written only when the outcome changes."""
    from syncer.engine.inventory import decode, inventory_name

    def condition() -> tuple[str, str, str]:
        inv = decode(kube.get("ConfigMap", NS, inventory_name(Unit("federation", NS, "fed"))) or {})
        assert inv is not None and inv.condition is not None
        return ("True" if inv.condition.ready else "False"), inv.condition.reason, inv.condition.message

    repo = write(tmp_path)
    assert sync(kube, repo).ok
    assert condition() == ("True", "Synced", "in sync with Git")
    (repo / "federations" / "fed.yaml").write_text(
        (repo / "federations" / "fed.yaml").read_text().replace("mode: StatefulSet", "mode: Statefulset"))
    assert not sync(kube, repo).ok
    status, reason, message = condition()
    assert (status, reason) == ("False", "ConfigError") and message.startswith("federations/fed.yaml:")
    assert "spec.mode" in message
    again = sync(kube, repo)
    assert again.writes == 0  # the same error again: nothing new to record
    write(tmp_path)
    assert sync(kube, repo).ok and condition() == ("True", "Synced", "in sync with Git")


def test_many_units_are_applied_level_by_level_workloads_last_then_inventories(kube: FakeKube,
                                                                                 tmp_path: Path) -> None:
    """As kubectl and Flux apply a file: every unit's Services before any unit's workload, so pods
    start once everything they need exists; the inventories (the record) after all workloads."""
    sent: list[tuple[str, str]] = []
    handle = kube.server.handle

    def recording(method: str, url: str, headers: Any, body: Any) -> Any:
        if method != "GET":
            sent.append((method, url.split("?", maxsplit=1)[0]))
        return handle(method, url, headers, body)

    kube.server.handle = recording  # type: ignore[method-assign]
    for name in ("one", "two", "three"):
        write(tmp_path, name, pools=pool("a") + pool("b"))
    assert sync(kube, tmp_path).ok

    def positions(plural: str) -> list[int]:
        return [i for i, (_, path) in enumerate(sent) if f"/{plural}/" in path]

    services, workloads, inventories = positions("services"), positions("statefulsets"), [
        i for i, (_, path) in enumerate(sent) if "/configmaps/flower-syncer.federation." in path]
    assert len(workloads) == 3 * 3 and len(services) >= 3 and len(inventories) == 3
    assert max(services) < min(workloads)
    assert max(workloads) < min(inventories)


def test_live_objects_share_equal_field_sets_and_keep_their_managed_fields_hash() -> None:
    """At 26,000 objects the agent holds every managed object's metadata; the field sets repeat
    across objects of one template and are stored once (issue 14: agent RSS)."""
    import json

    from syncer.cluster.client import FIELD_MANAGER
    from syncer.engine.live import ManagedObjects
    from syncer.engine.normalize import managed_fields_hash
    from syncer.identity import ObjectRef

    def obj(name: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "Service", "apiVersion": "v1", "metadata": {
            "name": name, "namespace": NS, "labels": {},
            "managedFields": [{"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": fields}]}}

    same = {"f:spec": {"f:ports": {'k:{"port":9092}': {".": {}}}, "f:selector": {}}}
    a, b = obj("a", same), obj("b", json.loads(json.dumps(same)))
    c = obj("c", {"f:selector": {}, "f:spec": {}})
    hashes = [managed_fields_hash(o, FIELD_MANAGER) for o in (a, b, c)]
    live = ManagedObjects()
    for o in (a, b, c):
        live[ObjectRef.of(o)] = o
    fields = [live[ObjectRef.of(o)]["metadata"]["managedFields"][0]["fieldsV1"] for o in (a, b, c)]
    assert fields[0] is fields[1] and fields[2] is not fields[0]
    assert [managed_fields_hash(live[ObjectRef.of(o)], FIELD_MANAGER) for o in (a, b, c)] == hashes
