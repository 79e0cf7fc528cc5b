"""Inventories as an agent holds them: every unit's entries, for the agent's life."""

from __future__ import annotations

import json

from syncer.engine.inventory import Entry, Inventory, decode
from syncer.identity import ObjectRef, Unit


def encoded(unit: Unit, names: list[str]) -> dict[str, object]:
    inv = Inventory(unit, {ObjectRef("Service", unit.namespace, n): Entry(f"sha256:{n}", "f" * 32) for n in names},
                    revision="r1")
    return json.loads(json.dumps(inv.manifest()))  # as read back from the API server: fresh strings


def test_decoded_entries_share_their_repeated_strings_and_round_trip() -> None:
    """30,000 entries at 2,000 units: the kind, namespace and field-set hash they repeat are held
    once, and an entry is a slotted pair of strings."""
    a = decode(encoded(Unit("federation", "ns", "a"), ["a-1", "a-2"]))
    b = decode(encoded(Unit("federation", "ns", "b"), ["b-1"]))
    assert a is not None and b is not None
    (r1, e1), (_r2, e2) = sorted(a.entries.items())
    ((r3, e3),) = b.entries.items()
    assert r1.kind is r3.kind and r1.namespace is r3.namespace
    assert e1.fields is e2.fields is e3.fields
    assert not hasattr(e1, "__dict__")
    assert [(r.name, e.applied) for r, e in sorted(a.entries.items())] == [("a-1", "sha256:a-1"), ("a-2", "sha256:a-2")]
    again = decode(json.loads(json.dumps(a.manifest())))
    assert again is not None and again.entries == a.entries


def test_refs_of_separately_parsed_objects_hold_one_string_each() -> None:
    """The live cache, the inventory and a sync's results each parse the same object: their refs
    hold one string for each of kind, namespace and name, not three."""
    text = json.dumps({"kind": "Service", "metadata": {"namespace": "ns", "name": "fed-superlink"}})
    live, desired = ObjectRef.of(json.loads(text)), ObjectRef.of(json.loads(text))
    assert live == desired
    assert live.kind is desired.kind and live.namespace is desired.namespace and live.name is desired.name
    inv = decode(encoded(Unit("federation", "ns", "fed"), ["fed-superlink"]))
    assert inv is not None
    assert next(iter(inv.entries)).name is live.name
