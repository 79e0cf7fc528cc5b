"""Who may write or prune a live object: owner labels, hand-overs between units, other repositories,
inventories rebuilt from labels, and inventory entries that cannot be trusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from syncer.engine.changeset import Cause
from syncer.engine.inventory import INVENTORY_KEY, Inventory, decode
from syncer.engine.live import LiveState, ManagedObjects
from syncer.engine.ownership import owner_of, recover_inventory, stamp_repository, write_conflict
from syncer.engine.prune import prune_blocker
from syncer.engine.units_left_git import vanished_units
from syncer.identity import LABEL_REPOSITORY, ObjectRef, Unit
from syncer.plan import Claims
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import federation, pool

A = Unit("federation", "ns", "a")
B = Unit("federation", "ns", "b")


def obj(name: str, unit: Unit | None, repository: str | None = "repo", kind: str = "Service",
        managed_fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if unit is not None:
        labels = dict(unit.labels())
        if repository is not None:
            labels[LABEL_REPOSITORY] = repository
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "labels": labels, "uid": "u1",
                         "annotations": {"flower-syncer.io/applied-hash": "h-" + name},
                         "managedFields": managed_fields or []}}


def test_owner_of_reads_unit_and_repository_labels() -> None:
    owner = owner_of(obj("x", A))
    assert owner is not None
    assert (owner.unit, owner.repository) == (A, "repo")
    assert owner_of(obj("x", None)) is None  # not ours at all
    legacy = owner_of(obj("x", A, repository=None))
    assert legacy is not None and legacy.repository == ""


def test_a_unit_writes_its_own_and_unmanaged_objects() -> None:
    claims = Claims.of([(A, [obj("x", A)])])
    assert write_conflict(A, {"repo"}, obj("x", A), claims, {}) is None
    assert write_conflict(A, {"repo"}, obj("x", None), claims, {}) is None
    assert write_conflict(A, {"repo"}, None, claims, {}) is None


def test_another_repositorys_object_is_a_conflict_even_for_the_same_unit_id() -> None:
    claims = Claims.of([(A, [obj("x", A)])])
    for owner in (A, B):
        conflict = write_conflict(A, {"repo"}, obj("x", owner, repository="other"), claims, {})
        assert conflict is not None and conflict.cause is Cause.OTHER_REPOSITORY
        assert "repository 'other'" in conflict.reason and owner.id in conflict.reason


def test_legacy_objects_take_the_repository_from_the_owners_inventory() -> None:
    claims = Claims.of([(A, [obj("x", A)])])
    inventories = {B: Inventory(B, repository="other")}
    legacy = write_conflict(A, {"repo"}, obj("x", B, repository=None), claims, inventories)
    assert legacy is not None and legacy.cause is Cause.OTHER_REPOSITORY and "repository 'other'" in legacy.reason
    own = {A: Inventory(A, repository="repo")}
    assert write_conflict(A, {"repo"}, obj("x", A, repository=None), claims, own) is None


def test_an_object_another_unit_still_renders_or_may_render_is_refused() -> None:
    live = obj("x", B)
    both = Claims({ObjectRef("Service", "ns", "x"): B})
    failed = Claims({ObjectRef("Service", "ns", "x"): A}, frozenset({B}))
    for claims, why in ((both, "renders it too"), (failed, "configuration errors")):
        conflict = write_conflict(A, {"repo"}, live, claims, {})
        assert conflict is not None and conflict.cause is Cause.OTHER_UNIT and why in conflict.reason


def test_an_object_left_behind_by_a_unit_of_the_same_repository_is_handed_over() -> None:
    claims = Claims({ObjectRef("Service", "ns", "x"): A})
    assert write_conflict(A, {"repo"}, obj("x", B), claims, {}) is None


def written(o: dict[str, Any]) -> dict[str, Any]:
    """`o` as flower-syncer applies it: a fingerprint, owned by its apply manager."""
    name = o["metadata"]["name"]
    o["metadata"]["annotations"]["flower-syncer.io/applied-hash"] = (name.encode().hex() * 32)[:32]
    o["metadata"]["managedFields"] = [{"manager": "flower-syncer", "operation": "Apply", "fieldsType": "FieldsV1",
                                       "fieldsV1": {"f:metadata": {"f:annotations": {
                                           "f:flower-syncer.io/applied-hash": {}}}}}]
    return o


def test_recover_inventory_from_labelled_objects_only() -> None:
    live = {ObjectRef("Service", "ns", n): o for n, o in [
        ("mine", written(obj("mine", A))), ("legacy", written(obj("legacy", A, repository=None))),
        ("theirs", written(obj("theirs", A, repository="other"))), ("b", written(obj("b", B))),
        ("plain", obj("plain", None)), ("copied", obj("copied", A))]}
    found = recover_inventory(A, live.items(), "repo", "flower-syncer")
    inv = found.inventory
    assert inv is not None
    assert sorted(r.name for r in inv.entries) == ["legacy", "mine"]
    assert inv.entries[ObjectRef("Service", "ns", "mine")].applied == live[ObjectRef("Service", "ns", "mine")][
        "metadata"]["annotations"]["flower-syncer.io/applied-hash"]
    assert inv.repository == "repo"
    assert found.not_ours == (ObjectRef("Service", "ns", "copied"),)
    assert recover_inventory(Unit("supernode", "ns", "none"), live.items(), "repo", "flower-syncer").inventory is None


def test_stamp_repository_copies() -> None:
    m = obj("x", A, repository=None)
    stamped = stamp_repository(m, "repo")
    assert stamped["metadata"]["labels"][LABEL_REPOSITORY] == "repo"
    assert LABEL_REPOSITORY not in m["metadata"]["labels"]


def test_prune_keeps_secret_data_written_as_string_data_by_another_manager() -> None:
    for field in ("f:data", "f:stringData"):
        secret = obj("s", A, kind="Secret", managed_fields=[
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {field: {"f:token": {}}}}])
        assert "written by 'kubectl-edit'" in prune_blocker(A, secret), field
    ours = obj("s", A, kind="Secret", managed_fields=[
        {"manager": "flower-syncer", "operation": "Apply", "fieldsV1": {"f:data": {"f:token": {}}}}])
    assert prune_blocker(A, ours) == ""


def test_prune_keeps_another_repositorys_object() -> None:
    assert "repository 'other'" in prune_blocker(A, obj("x", A, repository="other"), "repo")
    assert prune_blocker(A, obj("x", A), "repo") == ""


def test_inventory_entries_of_unknown_kinds_or_shapes_are_ignored_not_fatal() -> None:
    objects = [
        {"kind": "Service", "namespace": "ns", "name": "ok", "applied": "a", "fields": "f"},
        {"kind": "ClusterRoleBinding", "namespace": "", "name": "admin"},
        {"kind": "Widget", "namespace": "ns", "name": "w"},
        {"kind": "Namespace", "namespace": "", "name": "kube-system"},
        {"kind": "Service", "namespace": None, "name": "x"},
        "not an object",
    ]
    cm = {"metadata": {"namespace": "ns", "labels": dict(A.labels())},
          "data": {INVENTORY_KEY: json.dumps({"unit": A.id, "objects": objects})}}
    inv = decode(cm)
    assert inv is not None
    assert list(inv.entries) == [ObjectRef("Service", "ns", "ok")]
    assert len(inv.ignored) == 5


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "federations").mkdir()
    (tmp_path / "supernodes" / "one").mkdir(parents=True)
    (tmp_path / "supernodes" / "two").mkdir(parents=True)
    (tmp_path / "federations" / "f.yaml").write_text(federation("fed", pools=pool("p")))
    (tmp_path / "supernodes" / "one" / "values.yaml").write_text("fullnameOverride: shared\n")
    (tmp_path / "supernodes" / "two" / "values.yaml").write_text("fullnameOverride: shared\n")
    return tmp_path


def test_a_clash_fails_every_unit_involved_and_names_the_others(tmp_path: Path) -> None:
    state = load_repo(_repo(tmp_path))
    assert state.clean
    rendered = render_repo(state)
    assert {u.id for u in rendered.failed} == {"supernode/default/one", "supernode/default/two"}
    assert [u.id for u in rendered.units] == ["federation/default/fed"]
    assert not rendered.clean
    messages = {d.unit: d.message for d in rendered.diagnostics}
    assert "supernode 'two'" in messages["supernode/default/one"]
    assert "supernode 'one'" in messages["supernode/default/two"]


def test_a_clash_with_an_unselected_unit_still_fails_the_selected_one(tmp_path: Path) -> None:
    rendered = render_repo(load_repo(_repo(tmp_path)), ["one"])
    assert not rendered.units
    assert Unit("supernode", "default", "one") in rendered.failed
    only_fed = render_repo(load_repo(tmp_path), ["fed"])
    assert list(only_fed.units) == [Unit("federation", "default", "fed")]
    assert not only_fed.unselected  # the clashing units are failed, not merely unselected


def test_live_objects_index_follows_every_write() -> None:
    objects = ManagedObjects({ObjectRef("Service", "ns", "x"): obj("x", A), ObjectRef("Service", "ns", "p"):
                              obj("p", None)})
    x, y = ObjectRef("Service", "ns", "x"), ObjectRef("Service", "ns", "y")
    assert [r for r, _ in objects.owned_by(A)] == [x]
    objects[y] = obj("y", A)
    objects[x] = obj("x", B)  # relabelled: moves to B
    assert ([r for r, _ in objects.owned_by(A)], [r for r, _ in objects.owned_by(B)]) == ([y], [x])
    assert objects.pop(y)["metadata"]["name"] == "y"
    assert objects.pop(y, None) is None
    del objects[x]
    assert (list(objects.owned_by(A)), list(objects.owned_by(B)), objects.labelled_units()) == ([], [], [])
    objects.update({y: obj("y", B)})
    assert [r for r, _ in objects.owned_by(B)] == [y] and len(objects) == 2  # "p" (unlabelled) stays


def test_vanished_units_come_from_inventories_and_labels_of_this_repository() -> None:
    live = LiveState()
    live.inventories[A] = Inventory(A, repository="repo")
    live.objects[ObjectRef("Service", "ns", "b")] = obj("b", B)  # inventory lost; labels say ours
    live.objects[ObjectRef("Service", "ns", "c")] = obj("c", Unit("federation", "ns", "c"), repository="other")
    assert vanished_units(live, "repo") == [A, B]
    assert vanished_units(live, "new-name", former=["repo"]) == [A, B]
    assert vanished_units(live, "other") == [Unit("federation", "ns", "c")]
    assert vanished_units(live, "repo", in_git=lambda u: u == A) == [B]  # units still in Git are left out
    assert vanished_units(live, "repo", in_git=lambda u: u == B) == [A]


def test_hashes_stay_those_of_earlier_versions() -> None:
    """Fingerprints and managed-field hashes are recorded in the cluster: a faster encoder must
    write the very bytes json.dumps wrote, or every object would be applied again after an upgrade."""
    import hashlib

    from syncer.engine.normalize import fingerprint, managed_fields_hash

    tricky = {"b": "é\u2028\x7f\x01\n\t\"\\/", "a": [1.5, 0.1, 1e20, -0.0, 2**62, True, None],
              "ä": {"z": 1, "Z": 2, "\U0001F600": 3, "\uffff": 4}, "big": 2**70}
    old = json.dumps(tricky, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert fingerprint(tricky) == hashlib.sha256(old.encode()).hexdigest()[:32]
    for fields in ({"f:metadata": {"f:labels": {"f:app": {}}}}, {"f:data": {"f:é": {}}}):
        live = {"metadata": {"managedFields": [{"manager": "m", "operation": "Apply", "fieldsV1": fields}]}}
        old = json.dumps([fields], separators=(",", ":"))
        assert managed_fields_hash(live, "m") == hashlib.sha256(old.encode()).hexdigest()[:32]
