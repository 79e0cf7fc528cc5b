"""A snapshot of what flower-syncer manages in the cluster: one LIST per kind, not a GET per object."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from syncer.cluster.client import Kube
from syncer.compact import share_strings
from syncer.engine.checked import Checked
from syncer.engine.checked import decode as decode_checked
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


MAX_FIELD_SETS = 20_000  # distinct field sets kept for sharing
_SHARED_ALREADY = frozenset({"fieldsV1"})


class ManagedObjects(dict[ObjectRef, dict[str, Any]]):
    """The live objects by reference, indexed by the unit their labels name, so the objects of one
    unit (`owned_by`) cost that unit's objects, not a scan of all of them (at 26,000 objects, 2,000
    new units each scanning everything was 52 million label reads). Writes go through item
    assignment, `del` and `pop`, which keep the index.

    The field sets of managedFields (`fieldsV1`, most of a metadata-only object) repeat across
    objects rendered from one template: equal ones are stored once, shared (read-only, like every
    live object here); so are the short strings (label values, managers, timestamps)."""

    def __init__(self, items: Mapping[ObjectRef, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self._unit_of: dict[ObjectRef, Unit] = {}
        self._by_unit: dict[Unit, dict[ObjectRef, None]] = {}  # insertion-ordered sets
        self._field_sets: dict[bytes, Any] = {}
        for ref, obj in (items or {}).items():
            self[ref] = obj

    def __setitem__(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        self._unindex(ref)
        self._share_field_sets(obj)
        share_strings(obj, skip=_SHARED_ALREADY)
        super().__setitem__(ref, obj)
        owner = owner_of(obj)
        if owner is not None:
            self._unit_of[ref] = owner.unit
            self._by_unit.setdefault(owner.unit, {})[ref] = None

    def __delitem__(self, ref: ObjectRef) -> None:
        super().__delitem__(ref)
        self._unindex(ref)

    def pop(self, ref: ObjectRef, *default: Any) -> Any:
        self._unindex(ref)
        return super().pop(ref, *default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for ref, obj in dict(*args, **kwargs).items():
            self[ref] = obj

    def setdefault(self, ref: ObjectRef, default: dict[str, Any] | None = None) -> dict[str, Any]:
        raise TypeError("ManagedObjects.setdefault would bypass the owner index; assign instead")

    def _share_field_sets(self, obj: dict[str, Any]) -> None:
        entries = (obj.get("metadata") or {}).get("managedFields")
        if not isinstance(entries, list):
            return
        if len(self._field_sets) > MAX_FIELD_SETS:  # sets no object holds any more pile up: start afresh
            self._field_sets.clear()
        for entry in entries:
            fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
            if isinstance(fields, dict):
                try:
                    key = orjson.dumps(fields)  # in the server's order, which the managed-fields hash keeps
                except orjson.JSONEncodeError:
                    continue
                entry["fieldsV1"] = self._field_sets.setdefault(key, fields)

    def _unindex(self, ref: ObjectRef) -> None:
        unit = self._unit_of.pop(ref, None)
        if unit is not None:
            refs = self._by_unit[unit]
            refs.pop(ref, None)
            if not refs:
                del self._by_unit[unit]

    def owned_by(self, unit: Unit) -> Iterator[tuple[ObjectRef, dict[str, Any]]]:
        """The objects whose labels name `unit` (of any repository)."""
        for ref in list(self._by_unit.get(unit, ())):
            yield ref, self[ref]

    def labelled_units(self) -> list[Unit]:
        """Every unit some live object's labels name."""
        return list(self._by_unit)


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
