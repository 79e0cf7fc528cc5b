"""A unit's rendered manifests kept compact between syncs.

The agent keeps every unit's desired objects for as long as they do not change: as small dicts
and lists they took several times their JSON. Packed, one unit's manifests are one
zlib-compressed JSON blob (a fraction of the JSON), decoded afresh each time they are read: a
sync reads them once (cheap next to the sync itself), and every reader
gets objects of its own, so no one can change the kept state in place.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import overload

import orjson

from syncer.identity import Manifest

LEVEL = 1  # the fastest: the blobs are small and templated, so most of the gain is there already


class PackedManifests(Sequence[Manifest]):
    """Invariant: `unpack()` equals the manifests `pack` was given, key order included, and each
    read decodes the blob once and hands out objects no one else holds (so nothing can change the
    kept state). Every read of the Sequence API is one decode: iteration, `in`, `index`, `count`,
    `reversed` and slices unpack once, not once per index as the Sequence mixins would; an index
    `p[i]` is one read of its own (read the whole with `unpack()` or a loop, not `p[i]` per i)."""

    __slots__ = ("_blob", "_len")

    def __init__(self, blob: bytes, length: int) -> None:
        self._blob = blob
        self._len = length

    def unpack(self) -> list[Manifest]:
        """The manifests, as new objects."""
        manifests: list[Manifest] = orjson.loads(zlib.decompress(self._blob))
        return manifests

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Manifest]:
        return iter(self.unpack())

    @overload
    def __getitem__(self, index: int) -> Manifest: ...

    @overload
    def __getitem__(self, index: slice) -> list[Manifest]: ...

    def __getitem__(self, index: int | slice) -> Manifest | list[Manifest]:
        return self.unpack()[index]

    def __contains__(self, value: object) -> bool:
        return value in self.unpack()

    def __reversed__(self) -> Iterator[Manifest]:
        return reversed(self.unpack())

    def index(self, value: object, start: int = 0, stop: int | None = None) -> int:
        return self.unpack().index(value, start, self._len if stop is None else stop)  # type: ignore[arg-type]

    def count(self, value: object) -> int:
        return self.unpack().count(value)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedManifests):
            return self._blob == other._blob or self.unpack() == other.unpack()
        if isinstance(other, Sequence):
            return self.unpack() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return f"PackedManifests({self._len} objects, {len(self._blob)} bytes)"

    @property
    def size(self) -> int:
        """Bytes held."""
        return len(self._blob)


def pack(manifests: Sequence[Manifest]) -> Sequence[Manifest]:
    """`manifests` packed; as they are when JSON cannot carry them exactly (an integer beyond 64
    bits, a key that is not a string), which rendered manifests never hold in practice."""
    try:
        blob = orjson.dumps(list(manifests))
    except orjson.JSONEncodeError:
        return manifests
    packed = PackedManifests(zlib.compress(blob, LEVEL), len(manifests))
    return packed if packed.unpack() == list(manifests) else manifests
