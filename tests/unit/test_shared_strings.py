"""Interned strings for the objects the agent holds many of."""

from __future__ import annotations

import orjson

from syncer.shared_strings import share_strings


def parsed(name: str) -> dict[str, object]:
    return orjson.loads(orjson.dumps({  # type: ignore[no-any-return]
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"flower-syncer.io/unit": "fed"},
                     "managedFields": [{"manager": "flower-syncer", "fieldsV1": {"f:spec": {}}}],
                     "annotations": {"long": "x" * 100}},
    }))


def test_equal_short_strings_become_one_object_and_nothing_else_changes() -> None:
    a, b = parsed("a"), parsed("b")
    before = orjson.dumps(a)
    assert share_strings(a) is a and share_strings(b) is b
    assert orjson.dumps(a) == before
    ma, mb = a["metadata"], b["metadata"]
    assert isinstance(ma, dict) and isinstance(mb, dict)
    assert ma["namespace"] is mb["namespace"]
    assert ma["labels"]["flower-syncer.io/unit"] is mb["labels"]["flower-syncer.io/unit"]
    assert ma["managedFields"][0]["manager"] is mb["managedFields"][0]["manager"]
    assert ma["annotations"]["long"] is not mb["annotations"]["long"]  # long strings are left alone


def test_skipped_keys_are_not_walked() -> None:
    a, b = parsed("a"), parsed("b")
    fields_a = a["metadata"]["managedFields"][0]  # type: ignore[index]
    fields_a["fieldsV1"] = {"f:x": "".join(["v", "a"])}
    fields_b = b["metadata"]["managedFields"][0]  # type: ignore[index]
    fields_b["fieldsV1"] = {"f:x": "".join(["v", "a"])}
    share_strings(a, skip=frozenset({"fieldsV1"}))
    share_strings(b, skip=frozenset({"fieldsV1"}))
    assert fields_a["fieldsV1"]["f:x"] is not fields_b["fieldsV1"]["f:x"]

