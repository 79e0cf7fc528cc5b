"""Packed manifests (what the agent keeps of each unit between syncs): the same objects back,
new ones at each read, and left unpacked when JSON cannot carry them exactly."""

from __future__ import annotations

import pytest

from syncer.render.packed_manifests import PackedManifests, pack

MANIFESTS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "n", "labels": {"a": "b"}},
     "spec": {"ports": [{"port": 9092, "name": "fleet"}], "clusterIP": None, "publishNotReadyAddresses": True}},
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w", "namespace": "n"},
     "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "args": ["--x", "ü"]}]}},
              "ratio": 0.25}},
]


def test_packed_manifests_read_back_equal_in_order_with_their_key_order() -> None:
    packed = pack(MANIFESTS)
    assert isinstance(packed, PackedManifests)
    assert len(packed) == 2 and packed == MANIFESTS and MANIFESTS == packed  # noqa: SIM300 (list.__eq__ first)
    assert [list(m) for m in packed] == [list(m) for m in MANIFESTS]  # key order kept
    assert packed[1]["spec"]["template"]["spec"]["containers"][0]["args"] == ["--x", "ü"]
    assert packed[-1:] == MANIFESTS[-1:]
    assert packed != MANIFESTS[:1] and packed != "not manifests"
    assert packed.size < len(repr(MANIFESTS))


def test_each_read_gives_new_objects_so_the_kept_state_cannot_be_changed_in_place() -> None:
    packed = pack(MANIFESTS)
    first = list(packed)
    first[0]["metadata"]["name"] = "changed"
    assert next(iter(packed))["metadata"]["name"] == "s"


@pytest.mark.parametrize("manifests", [
    [{"kind": "ConfigMap", "data": {"n": 2**70}}],
    [{"kind": "ConfigMap", "data": {1: "x"}}],
    [{"kind": "ConfigMap", "data": ("a", "b")}],
], ids=["big-int", "int-key", "tuple"])
def test_what_json_cannot_carry_exactly_stays_as_it_was(manifests: list[dict[str, object]]) -> None:
    assert pack(manifests) is manifests


def test_packed_manifests_are_unhashable_like_lists() -> None:
    with pytest.raises(TypeError):
        hash(pack(MANIFESTS))


def test_every_read_of_the_sequence_api_decodes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Sequence mixins read by index (`in`, index, count, reversed): each would decode the blob
    once per element; here every read is one decode, and gives what a fresh list gives."""
    import zlib

    from syncer.render import packed_manifests as module

    many = [{**MANIFESTS[i % 2], "n": i} for i in range(40)]
    p = pack(many)
    decodes = 0
    decompress = zlib.decompress

    def counting(blob: bytes) -> bytes:
        nonlocal decodes
        decodes += 1
        return decompress(blob)

    monkeypatch.setattr(module.zlib, "decompress", counting)
    reads = [
        (lambda: list(p), lambda: list(many)),
        (lambda: many[-1] in p, lambda: True),
        (lambda: {"absent": 1} in p, lambda: False),
        (lambda: p.index(many[30]), lambda: 30),
        (lambda: p.count(many[3]), lambda: 1),
        (lambda: list(reversed(p)), lambda: list(reversed(many))),
        (lambda: p[5:9], lambda: many[5:9]),
        (lambda: p[-1], lambda: many[-1]),
    ]
    for read, fresh in reads:
        decodes = 0
        assert read() == fresh()
        assert decodes == 1
