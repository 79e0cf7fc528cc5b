"""Each unit's inventory: what it applied, stored in the cluster next to its objects.

A ConfigMap `flower-syncer.<kind>.<name>` in the unit's namespace holds one entry per object:
its reference, the fingerprint of what was applied and the hash of the fields we own. A restarted
agent (or a one-shot CLI run) learns from it what it owns, what to prune, and which objects are
known unchanged without a request per object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from syncer.render.common import LABEL_MANAGED_BY, LABEL_UNIT, LABEL_UNIT_KIND, MANAGED_BY, Unit

LABEL_INVENTORY = "flower-syncer.io/inventory"
ANN_SUSPENDED = "flower-syncer.io/suspended"  # set by `flower-syncer suspend`, kept across syncs
LABEL_REPOSITORY = "flower-syncer.io/repository"  # which config repository applied the unit
DEFAULT_REPOSITORY = "default"
INVENTORY_KEY = "inventory.json"
INVENTORY_SELECTOR = f"{LABEL_INVENTORY}=true,{LABEL_MANAGED_BY}={MANAGED_BY}"


@dataclass(frozen=True, order=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return cls(obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass(frozen=True)
class Entry:
    applied: str  # fingerprint of the desired object
    fields: str  # hash of the field set we own after applying it


@dataclass
class Inventory:
    unit: Unit
    entries: dict[ObjectRef, Entry] = field(default_factory=dict)
    revision: str = ""
    suspended: bool = False  # from the ConfigMap's annotation; never written by the engine
    repository: str = DEFAULT_REPOSITORY

    def name(self) -> str:
        return inventory_name(self.unit)

    def encode(self) -> str:
        payload = {
            "unit": self.unit.id,
            "revision": self.revision,
            "objects": [{"kind": r.kind, "namespace": r.namespace, "name": r.name,
                         "applied": e.applied, "fields": e.fields}
                        for r, e in sorted(self.entries.items())],
        }
        return json.dumps(payload, indent=1, sort_keys=True)

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name(),
                "namespace": self.unit.namespace,
                "labels": {**self.unit.labels(), LABEL_INVENTORY: "true", LABEL_REPOSITORY: self.repository},
            },
            "data": {INVENTORY_KEY: self.encode()},
        }


def inventory_name(unit: Unit) -> str:
    return f"flower-syncer.{unit.kind}.{unit.name}"


def decode(cm: dict[str, Any]) -> Inventory | None:
    """An inventory from its ConfigMap, or None if it is not one of ours or is unreadable."""
    labels = cm.get("metadata", {}).get("labels", {})
    kind, name = labels.get(LABEL_UNIT_KIND), labels.get(LABEL_UNIT)
    if kind not in ("federation", "supernode") or not name:
        return None
    unit = Unit(kind, cm["metadata"].get("namespace", ""), name)
    suspended = cm["metadata"].get("annotations", {}).get(ANN_SUSPENDED) == "true"
    repository = labels.get(LABEL_REPOSITORY, DEFAULT_REPOSITORY)
    try:
        payload = json.loads(cm.get("data", {}).get(INVENTORY_KEY, "{}"))
        entries = {ObjectRef(o["kind"], o["namespace"], o["name"]): Entry(o.get("applied", ""), o.get("fields", ""))
                   for o in payload.get("objects", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return Inventory(unit, suspended=suspended, repository=repository)
    return Inventory(unit, entries, str(payload.get("revision", "")), suspended, repository)
