"""The shared vocabulary: one parse of unit ids and labels, selectors, and a leaf that imports
nothing of ours."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import syncer.identity
from syncer.identity import LABEL_UNIT, LABEL_UNIT_KIND, ObjectRef, Unit, selected, unit_matches


def test_unit_parse_round_trips_and_refuses_what_is_not_a_unit() -> None:
    unit = Unit("supernode", "flower", "edge")
    assert Unit.parse(unit.id) == unit
    assert Unit.parse("federation/ns/a/b") == Unit("federation", "ns", "a/b")  # the name is the rest
    for bad in ("federation/ns", "widget/ns/x", "federation//x", "", "supernode/ns/"):
        with pytest.raises(ValueError, match="not a unit id"):
            Unit.parse(bad)


def test_unit_from_labels() -> None:
    unit = Unit("federation", "ns", "fed")
    assert Unit.from_labels("ns", unit.labels()) == unit
    assert Unit.from_labels("ns", {LABEL_UNIT: "fed", LABEL_UNIT_KIND: "widget"}) is None
    assert Unit.from_labels("ns", {LABEL_UNIT_KIND: "federation"}) is None
    assert Unit.from_labels("", unit.labels()) is None
    assert Unit.from_labels("ns", None) is None


def test_selectors() -> None:
    unit = Unit("federation", "ns", "fed")
    assert all(unit_matches(unit, s) for s in ("fed", "federation/fed", "federation/ns/fed"))
    assert not any(unit_matches(unit, s) for s in ("other", "supernode/fed", "federation/x/fed"))
    assert selected(unit, []) and selected(unit, ["x", "fed"]) and not selected(unit, ["x"])


def test_object_ref() -> None:
    ref = ObjectRef.of({"kind": "Service", "metadata": {"name": "s", "namespace": "ns"}})
    assert str(ref) == "Service/ns/s"


def test_identity_is_a_leaf() -> None:
    tree = ast.parse(Path(syncer.identity.__file__).read_text())
    ours = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom | ast.Import)
            and any(name.startswith("syncer") for name in
                    ([n.module or ""] if isinstance(n, ast.ImportFrom) else [a.name for a in n.names]))]
    assert ours == []
