"""The agent's view of the cluster: a `LiveState` kept current by watches.

One LIST per kind to start, then a watch per kind (metadata only, labelled managed-by
flower-syncer) that keeps the objects and the inventories current and reports every change, so
an outside edit is seen at once. The list/watch loop (resume, re-list on 410 Gone, backoff) is
`syncer.cluster.reflector`.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from syncer.cluster.client import Kube
from syncer.cluster.reflector import Reflector
from syncer.engine.inventory import Inventory, decode
from syncer.engine.live import LiveState, Read, managed_reads
from syncer.identity import MANAGED_KINDS, ObjectRef, Unit

OnChange = Callable[[Unit, ObjectRef, dict[str, Any] | None], None]
"""Called with (the unit the object belongs to, object ref, object or None when deleted); an object
of no unit is not reported."""
OnInventory = Callable[[Inventory], None]
OnInventoryDeleted = Callable[[Unit], None]
Spawn = Callable[[str, Callable[[], None]], threading.Thread]


class LiveCache:
    def __init__(self, kube: Kube, *, namespaces: list[str] | None, on_change: OnChange,
                 on_inventory: OnInventory, on_inventory_deleted: OnInventoryDeleted | None = None,
                 kinds: tuple[str, ...] = MANAGED_KINDS) -> None:
        self.kube = kube
        self.namespaces = namespaces
        self.state = LiveState()
        self.synced = threading.Event()
        self._on_change = on_change
        self._on_inventory = on_inventory
        self._on_inventory_deleted = on_inventory_deleted or (lambda _unit: None)
        self._kinds = kinds
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._listed_reads: set[Read] = set()
        self._lock = threading.Lock()

    def start(self, stop: threading.Event, spawn: Spawn | None = None) -> None:
        """A watch thread per read; `spawn(name, loop)` starts each (the agent's supervisor, which
        restarts a loop that raises), else a plain thread."""
        reads = managed_reads(self.namespaces, self._kinds)
        self._pending = len(reads)
        for read in reads:
            loop = functools.partial(self._run, read, stop)
            if spawn is not None:
                self._threads.append(spawn(f"watch-{read.kind}", loop))
                continue
            t = threading.Thread(target=loop, name=f"watch-{read.kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def _listed(self, read: Read) -> None:
        with self._lock:
            if read in self._listed_reads:
                return  # listed again by a restarted loop: counted once
            self._listed_reads.add(read)
            self._pending -= 1
            if self._pending == 0:
                self.synced.set()

    def _run(self, read: Read, stop: threading.Event) -> None:
        kind, ns, selector, inventory = read

        def replace(items: list[dict[str, Any]]) -> None:
            self._replace(kind, ns, items, inventory)

        event = self._inventory_event if inventory else self._object_event
        Reflector(self.kube, kind, ns, replace, event, labels=selector, metadata_only=not inventory,
                  listed=functools.partial(self._listed, read)).run(stop)

    def _replace(self, kind: str, ns: str | None, items: list[dict[str, Any]], inventory: bool) -> None:
        """Install a fresh listing (startup or after a watch expired), reporting what changed meanwhile."""
        if inventory:
            fresh_units = set()
            for cm in items:
                self._inventory_event("ADDED", cm)
                inv = decode(cm)
                if inv is not None:
                    fresh_units.add(inv.unit)
            gone = [u for u in list(self.state.inventories) if (ns is None or u.namespace == ns)
                    and u not in fresh_units]
            for unit in gone:  # deleted while the watch was down
                self.state.inventories.pop(unit, None)
                self._on_inventory_deleted(unit)
            return
        fresh = {ObjectRef.of(i): i for i in items}
        stale = [ref for ref in list(self.state.objects) if ref.kind == kind and (ns is None or ref.namespace == ns)
                 and ref not in fresh]
        for ref in stale:
            self.state.objects.pop(ref, None)
            self._changed(ref, None)
        for ref, obj in fresh.items():
            before = self.state.objects.get(ref)
            self.state.objects[ref] = obj
            if before is None or before["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._changed(ref, obj)

    def _object_event(self, kind_of_event: str, obj: dict[str, Any]) -> None:
        ref = ObjectRef.of(obj)
        if kind_of_event == "DELETED":
            self.state.objects.pop(ref, None)
            self._changed(ref, None)
        else:
            self.state.objects[ref] = obj
            self._changed(ref, obj)

    def _changed(self, ref: ObjectRef, obj: dict[str, Any] | None) -> None:
        unit = self.unit_of(ref, (obj or {}).get("metadata", {}).get("labels", {}))
        if unit is not None:
            self._on_change(unit, ref, obj)

    def unit_of(self, ref: ObjectRef, labels: dict[str, str]) -> Unit | None:
        """The unit an object belongs to: from its labels, or (deleted, so unlabelled) the inventories."""
        unit_of = Unit.from_labels(ref.namespace, labels)
        if unit_of is not None:
            return unit_of
        for unit, inv in list(self.state.inventories.items()):  # deleted objects carry no labels
            if ref in inv.entries:
                return unit
        return None

    def _inventory_event(self, kind_of_event: str, cm: dict[str, Any]) -> None:
        if kind_of_event == "DELETED":
            inv = decode(cm)
            if inv is not None:
                self.state.inventories.pop(inv.unit, None)
                self._on_inventory_deleted(inv.unit)
            return
        inv = self.state.note(cm)  # an inventory, or the record of the revision last checked
        if inv is not None:
            self._on_inventory(inv)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced.wait(0.1):
            if time.monotonic() > deadline:
                return False
        return True
