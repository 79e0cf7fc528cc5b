"""ManagedObjects keeps an owner index beside the objects; its invariant (owned_by(u) is exactly the
objects whose labels name u, labelled_units() every such u) holds after any sequence of writes,
through every mutator a mapping has: compared after each step with a fresh scan."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from syncer.engine.live import ManagedObjects
from syncer.engine.ownership import owner_of
from syncer.identity import LABEL_REPOSITORY, ObjectRef, Unit

UNITS = [Unit("federation", "ns", "a"), Unit("federation", "ns", "b"), Unit("supernode", "ns", "c")]
REFS = [ObjectRef("Service", "ns", f"o{i}") for i in range(6)]


def obj(ref: ObjectRef, unit: Unit | None, fields: int) -> dict[str, Any]:
    labels = {**unit.labels(), LABEL_REPOSITORY: "repo"} if unit is not None else {"app": "other"}
    return {"apiVersion": "v1", "kind": ref.kind,
            "metadata": {"name": ref.name, "namespace": ref.namespace, "labels": labels,
                         "managedFields": [{"manager": "m", "fieldsV1": {f"f:{fields}": {}}}]}}


def fresh_index(objects: dict[ObjectRef, dict[str, Any]]) -> dict[Unit, set[ObjectRef]]:
    index: dict[Unit, set[ObjectRef]] = {}
    for ref, o in objects.items():
        owner = owner_of(o)
        if owner is not None:
            index.setdefault(owner.unit, set()).add(ref)
    return index


refs = st.sampled_from(REFS)
owners = st.sampled_from([*UNITS, None])
steps = st.one_of(
    st.tuples(st.just("set"), refs, owners, st.integers(0, 3)),
    st.tuples(st.just("del"), refs),
    st.tuples(st.just("pop"), refs),
    st.tuples(st.just("popitem")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("update"), st.lists(st.tuples(refs, owners), max_size=3)),
    st.tuples(st.just("ior"), st.lists(st.tuples(refs, owners), max_size=3)),
    st.tuples(st.just("setdefault"), refs, owners),
)


def apply(step: tuple[Any, ...], managed: ManagedObjects, plain: dict[ObjectRef, dict[str, Any]]) -> None:
    op = step[0]
    if op == "set":
        _, ref, unit, fields = step
        managed[ref] = obj(ref, unit, fields)
        plain[ref] = obj(ref, unit, fields)
    elif op in ("del", "pop"):
        if step[1] in plain:
            del plain[step[1]]
            if op == "del":
                del managed[step[1]]
            else:
                managed.pop(step[1])
        else:
            assert managed.pop(step[1], None) is None
    elif op == "popitem":
        if plain:
            ref, _ = managed.popitem()
            del plain[ref]
    elif op == "clear":
        managed.clear()
        plain.clear()
    elif op in ("update", "ior"):
        new = {ref: obj(ref, unit, 0) for ref, unit in step[1]}
        if op == "update":
            managed.update(new)
        else:
            managed |= new
        plain.update({ref: obj(ref, unit, 0) for ref, unit in step[1]})
    elif op == "setdefault":
        _, ref, unit = step
        managed.setdefault(ref, obj(ref, unit, 1))
        plain.setdefault(ref, obj(ref, unit, 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(steps, max_size=25))
def test_the_owner_index_matches_a_fresh_scan_after_any_writes(sequence: list[tuple[Any, ...]]) -> None:
    managed = ManagedObjects()
    plain: dict[ObjectRef, dict[str, Any]] = {}
    for step in sequence:
        apply(step, managed, plain)
        assert dict(managed.items()) == plain
        expected = fresh_index(plain)
        assert {u: {ref for ref, _ in managed.owned_by(u)} for u in managed.labelled_units()} == expected
        for unit in UNITS:
            assert {ref for ref, _ in managed.owned_by(unit)} == expected.get(unit, set())


def test_equal_field_sets_are_stored_once() -> None:
    managed = ManagedObjects({REFS[0]: obj(REFS[0], UNITS[0], 1), REFS[1]: obj(REFS[1], UNITS[1], 1)})
    first, second = (managed[r]["metadata"]["managedFields"][0]["fieldsV1"] for r in REFS[:2])
    assert first is second


def server_object(name: str) -> dict[str, Any]:
    """A StatefulSet as a metadata-only watch gives it: our Apply entry, a controller's status
    entry, and an entry without a field set."""
    return {"kind": "StatefulSet", "apiVersion": "apps/v1",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "42",
                         "labels": {**UNITS[0].labels(), LABEL_REPOSITORY: "repo"},
                         "annotations": {"flower-syncer.io/applied-hash": "abc", "note": "é ünïcode"},
                         "managedFields": [
                             {"manager": "flower-syncer", "operation": "Apply", "apiVersion": "apps/v1",
                              "time": "2026-11-26T18:01:43Z", "fieldsType": "FieldsV1",
                              "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {}}}}},
                             {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                              "fieldsV1": {"f:status": {"f:replicas": {}}}},
                             {"manager": "odd", "operation": "Update"}]}}


def test_an_object_reads_back_equal_and_each_read_is_a_fresh_dict() -> None:
    whole = {**server_object("a"), "spec": {"replicas": 3}, "status": {"readyReplicas": 3}}
    managed = ManagedObjects({REFS[0]: whole, REFS[1]: server_object("b")})
    assert managed[REFS[1]] == server_object("b")
    assert managed[REFS[0]] == server_object("a"), "a whole object is kept as its kind, apiVersion and metadata"
    read = managed[REFS[1]]
    read["metadata"]["labels"]["x"] = "y"
    read["metadata"]["managedFields"].pop()
    assert managed[REFS[1]] == server_object("b"), "changing what a read returned changes nothing stored"
    a, b = (managed[r]["metadata"]["managedFields"] for r in REFS[:2])
    assert a[0]["fieldsV1"] is b[0]["fieldsV1"] and a[1]["fieldsV1"] is b[1]["fieldsV1"]
    assert {ref for ref, _ in managed.owned_by(UNITS[0])} == set(REFS[:2])


def test_what_json_cannot_carry_is_kept_as_it_is() -> None:
    odd = server_object("a")
    odd["metadata"]["annotations"]["big"] = 2**70  # beyond 64 bits: orjson refuses it
    odd["metadata"]["managedFields"][0]["fieldsV1"]["f:big"] = 2**70
    managed = ManagedObjects({REFS[0]: odd})
    assert managed[REFS[0]] == odd and managed[REFS[0]] is not managed[REFS[0]]
