"""A snapshot of what flower-syncer manages in the cluster: one LIST per kind, not a GET per object."""

from __future__ import annotations

import copy
import zlib
from collections.abc import Hashable, Iterable, Iterator, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import orjson

from syncer.cluster.client import Kube
from syncer.engine.checked_revision import Checked
from syncer.engine.checked_revision import decode as decode_checked
from syncer.engine.inventory import Inventory, decode
from syncer.engine.ownership import owner_of
from syncer.identity import INVENTORY_SELECTOR, MANAGED_KINDS, MANAGED_SELECTOR, ObjectRef, Unit


class Read(NamedTuple):
    """One LIST (or watch) of what flower-syncer manages."""

    kind: str
    namespace: str | None  # None: cluster-wide
    selector: str
    inventory: bool  # inventories are read whole (their data); everything else as metadata only


def managed_reads(namespaces: Iterable[str] | None = None, kinds: Iterable[str] = MANAGED_KINDS) -> list[Read]:
    """What to read to know what we manage: each managed kind by label, and the inventories;
    cluster-wide, or per namespace for credentials limited to some."""
    scopes: list[str | None] = [*sorted(set(namespaces))] if namespaces is not None else [None]
    kinds = list(kinds)
    reads = [Read(kind, ns, MANAGED_SELECTOR, False) for ns in scopes for kind in kinds]
    return reads + [Read("ConfigMap", ns, INVENTORY_SELECTOR, True) for ns in scopes]


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class UnitIndex(Generic[K, V]):
    """Keys grouped by the unit each belongs to, a value with each: the entries of one unit cost
    that unit's entries, not a scan of all of them."""

    def __init__(self) -> None:
        self._unit_of: dict[K, Unit] = {}
        self._groups: dict[Unit, dict[K, V]] = {}  # insertion-ordered

    def put(self, key: K, unit: Unit, value: V) -> None:
        """Key `key` under `unit` (moved there, last, if it was under any unit)."""
        self.remove(key)
        self._unit_of[key] = unit
        self._groups.setdefault(unit, {})[key] = value

    def remove(self, key: K) -> None:
        unit = self._unit_of.pop(key, None)
        if unit is not None:
            group = self._groups[unit]
            group.pop(key, None)
            if not group:
                del self._groups[unit]

    def unit_of(self, key: K) -> Unit | None:
        return self._unit_of.get(key)

    def of(self, unit: Unit) -> Mapping[K, V]:
        """The unit's entries (a live view: copy it to change the index while reading)."""
        return self._groups.get(unit, {})

    def units(self) -> list[Unit]:
        return list(self._groups)

    def __iter__(self) -> Iterator[K]:
        """Every key, as a snapshot (the index may change while it is read)."""
        return iter(list(self._unit_of))

    def __len__(self) -> int:
        return len(self._unit_of)


MAX_FIELD_SETS = 20_000  # distinct field sets kept for sharing


class ManagedObjects(MutableMapping[ObjectRef, dict[str, Any]]):
    """The live objects by reference, indexed by the unit their labels name, so the objects of one
    unit (`owned_by`) cost that unit's objects, not a scan of all of them (new units each scanning
    everything grows with the square of the units).

    What is kept of an object is what the engine reads of it: its kind, apiVersion and metadata
    (the watches and lists ask for no more; a whole object read for a closer look is cut to that).
    Each read returns a fresh dict.

    Invariant: `_owners` holds exactly the refs of `_objects` whose object's labels name a unit,
    each under that unit (`owned_by(u)` equals a scan of every object for owner u). It holds by
    construction: the objects live in a private dict, and every write (assignment, `del`, and the
    MutableMapping mixins built on them: pop, popitem, clear, update, setdefault, |=) goes through
    `__setitem__` or `__delitem__`, which keep the index. Reads go to the private dict.

    Storage: the field sets of managedFields (`fieldsV1`, most of a metadata-only object) repeat
    across objects rendered from one template: equal ones are stored once, shared (read-only, like
    every live object here). The rest of an object is kept as compressed JSON and parsed again at
    each read: about half what the same object takes as dicts, with its reference and index
    entries, for a parse per read that costs microseconds.
    Invariant of `_field_sets`: a cache only, keyed by the serialised set; dropping it changes no
    object. Invariant of a stored object: reading it gives back, equal, what was stored (of kind,
    apiVersion and metadata); test_managed_objects.py."""

    __slots__ = ("_field_sets", "_objects", "_owners")

    def __init__(self, items: Mapping[ObjectRef, dict[str, Any]] | None = None) -> None:
        self._objects: dict[ObjectRef, _Stored] = {}
        self._owners: UnitIndex[ObjectRef, None] = UnitIndex()
        self._field_sets: dict[bytes, Any] = {}
        for ref, obj in (items or {}).items():
            self[ref] = obj

    def __setitem__(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        self._objects[ref] = self._store(obj)
        owner = owner_of(obj)
        if owner is not None:
            self._owners.put(ref, owner.unit, None)
        else:
            self._owners.remove(ref)

    def __delitem__(self, ref: ObjectRef) -> None:
        del self._objects[ref]
        self._owners.remove(ref)

    def __getitem__(self, ref: ObjectRef) -> dict[str, Any]:
        return _read(self._objects[ref])

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, ref: object) -> bool:
        return ref in self._objects

    def get(self, ref: ObjectRef, default: Any = None) -> Any:  # the dict's, not the mixin's try/except
        stored = self._objects.get(ref)
        return default if stored is None else _read(stored)

    def __ior__(self, other: Mapping[ObjectRef, dict[str, Any]]) -> ManagedObjects:
        self.update(other)
        return self

    def __repr__(self) -> str:
        return f"ManagedObjects({dict(self.items())!r})"

    def _store(self, obj: dict[str, Any]) -> _Stored:
        """What is kept of `obj` (see the class): the compressed JSON of its kind, apiVersion and
        metadata without the field sets, and the field sets, shared, in the order of its
        managedFields; the dict itself where JSON cannot carry it exactly."""
        kept = {k: obj[k] for k in ("kind", "apiVersion", "metadata") if k in obj}
        meta = kept.get("metadata")
        entries = meta.get("managedFields") if isinstance(meta, dict) else None
        sets: tuple[Any, ...] = ()
        if isinstance(entries, list) and any(isinstance(e, dict) and "fieldsV1" in e for e in entries):
            if len(self._field_sets) > MAX_FIELD_SETS:  # sets no object holds any more pile up: start afresh
                self._field_sets.clear()
            shared = []
            bare = []
            for entry in entries:
                fields = entry.get("fieldsV1", _NONE) if isinstance(entry, dict) else _NONE
                if fields is not _NONE:
                    try:
                        key = orjson.dumps(fields)  # in the server's order, which the managed-fields hash keeps
                    except orjson.JSONEncodeError:
                        return _Stored(None, (), copy.deepcopy(kept))
                    fields = self._field_sets.setdefault(key, fields)
                shared.append(fields)
                bare.append({k: v for k, v in entry.items() if k != "fieldsV1"} if fields is not _NONE else entry)
            kept = {**kept, "metadata": {**meta, "managedFields": bare}}  # type: ignore[dict-item]
            sets = tuple(shared)
        try:
            return _Stored(zlib.compress(orjson.dumps(kept), 1), sets, None)
        except orjson.JSONEncodeError:
            return _Stored(None, (), copy.deepcopy(kept))

    def owned_by(self, unit: Unit) -> Iterator[tuple[ObjectRef, dict[str, Any]]]:
        """The objects whose labels name `unit` (of any repository)."""
        for ref in list(self._owners.of(unit)):
            yield ref, self[ref]

    def labelled_units(self) -> list[Unit]:
        """Every unit some live object's labels name."""
        return self._owners.units()


class _Stored(NamedTuple):
    blob: bytes | None  # zlib-compressed JSON of the object without its field sets
    field_sets: tuple[Any, ...]  # per managedFields entry: its fieldsV1 (shared), or _NONE
    whole: dict[str, Any] | None  # instead of blob, for an object JSON cannot carry exactly


_NONE: Any = object()  # a managedFields entry without fieldsV1


def _read(stored: _Stored) -> dict[str, Any]:
    if stored.whole is not None:
        return copy.deepcopy(stored.whole)
    assert stored.blob is not None
    obj: dict[str, Any] = orjson.loads(zlib.decompress(stored.blob))
    if stored.field_sets:
        for entry, fields in zip(obj["metadata"]["managedFields"], stored.field_sets, strict=True):
            if fields is not _NONE:
                entry["fieldsV1"] = fields
    return obj


@dataclass
class LiveState:
    """Metadata (labels, annotations, managedFields, uid) of every managed object, and the
    inventories. Full objects are fetched only for the few that need a closer look."""

    objects: ManagedObjects = field(default_factory=ManagedObjects)
    inventories: dict[Unit, Inventory] = field(default_factory=dict)
    checked: dict[tuple[str, str], Checked] = field(default_factory=dict)
    """(namespace, repository) -> the revision the repository was last checked at (engine.checked)."""

    def note(self, cm: dict[str, Any]) -> Inventory | None:
        """Take in a ConfigMap of the inventory LIST: an inventory (returned) or a checked record."""
        inv = decode(cm)
        if inv is not None:
            self.inventories[inv.unit] = inv
            return inv
        record = decode_checked(cm)
        if record is not None:
            self.checked[(str(cm["metadata"].get("namespace", "")), record.repository)] = record
        return None

    @classmethod
    def load(cls, kube: Kube, namespaces: Iterable[str] | None = None,
             kinds: Iterable[str] = MANAGED_KINDS) -> LiveState:
        """Everything labelled managed-by flower-syncer: cluster-wide, or in the given namespaces
        (for an agent whose RBAC is limited to them)."""
        state = cls()
        reads = managed_reads(namespaces, kinds)
        # the server serialises one list while we parse another
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda r: kube.list(r.kind, r.namespace, labels=r.selector,
                                                        metadata_only=not r.inventory)[0], reads))
        for read, items in zip(reads, results, strict=True):
            if read.inventory:
                for cm in items:
                    state.note(cm)
            else:
                for item in items:
                    state.objects[ObjectRef.of(item)] = item
        return state
