"""Each unit's inventory: what it applied, stored in the cluster next to its objects.

A ConfigMap `flower-syncer.<kind>.<name>` in the unit's namespace holds one entry per object:
its reference, the fingerprint of what was applied and the hash of the fields we own. A restarted
agent (or a one-shot CLI run) learns from it what it owns, what to prune, and which objects are
known unchanged without a request per object.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from syncer.identity import (
    ANN_SUSPENDED,
    APPLY_ORDER,
    DEFAULT_REPOSITORY,
    LABEL_INVENTORY,
    LABEL_REPOSITORY,
    ObjectRef,
    Unit,
)

INVENTORY_KEY = "inventory.json"
STATUS_KEY = "status.json"  # the unit's last sync outcome, a metav1.Condition-style record
HISTORY_KEY = "history.json"  # the last revisions applied to the unit (newest first)
HISTORY_LIMIT = 10
NODE_KEYS_KEY = "nodekeys.json"  # SuperNode keys this federation registered with its SuperLink (engine/nodekeys.py)


@dataclass(frozen=True)
class OwnedKeys:
    """The SuperNode keys a federation registered itself, at one Control API: the only ones it
    ever unregisters (another federation's keys, or keys registered by hand, are left alone)."""

    address: str
    nodes: tuple[tuple[int, str], ...] = ()  # (node id, "sha256:<hex>" of the key's PEM), sorted
    pending: tuple[str, ...] = ()
    """Digests of keys whose registration was cut before the SuperLink answered (a deadline, a
    dropped connection): the SuperLink may have registered them. One it lists later is this
    federation's own (engine.nodekeys), so it is never left registered when Git drops it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"address": self.address, "nodes": [{"id": n, "key": k} for n, k in self.nodes]}
        if self.pending:
            out["pending"] = list(self.pending)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> OwnedKeys | None:
        if not isinstance(d, dict) or not isinstance(d.get("address"), str) or not isinstance(d.get("nodes"), list):
            return None
        nodes = sorted((n["id"], n["key"]) for n in d["nodes"] if isinstance(n, dict) and isinstance(n.get("id"), int)
                       and isinstance(n.get("key"), str))
        raw = d.get("pending")
        pending = sorted({k for k in raw if isinstance(k, str)}) if isinstance(raw, list) else []
        return cls(d["address"], tuple(nodes), tuple(pending))


@dataclass(frozen=True)
class Applied:
    """One revision applied to a unit: when, by whom, and what it changed."""

    revision: str
    at: str  # RFC 3339
    by: str  # the agent's identity, or "cli"
    counts: tuple[tuple[str, int], ...] = ()  # (action, objects), e.g. ("configured", 2)

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "appliedAt": self.at, "by": self.by, "changes": dict(self.counts)}

    @classmethod
    def from_dict(cls, d: Any) -> Applied | None:
        if not isinstance(d, dict):
            return None
        raw = d.get("changes")
        changes: dict[Any, Any] = raw if isinstance(raw, dict) else {}
        return cls(str(d.get("revision", "")), str(d.get("appliedAt", "")), str(d.get("by", "")),
                   tuple(sorted((str(k), int(v)) for k, v in changes.items() if isinstance(v, int))))


@dataclass(frozen=True)
class Condition:
    """The outcome of the unit's last sync, kept on its inventory so that `flower-syncer status`
    shows it without asking the agent, and it survives restarts: the unit's Synced condition as
    its last sync saw it (syncer.observe.conditions; health is never recorded, it is looked at).
    Written only when `ready`, `reason` or `message` change (messages name objects and files,
    never volatile server text), so a repository that stays as it is causes no writes."""

    ready: bool
    reason: str  # Synced, SyncFailed, Conflict, ConfigError
    message: str = ""
    since: str = ""  # when ready/reason/message last changed (RFC 3339)
    revision: str = ""  # the revision it was observed at

    def same(self, other: Condition | None) -> bool:
        return other is not None and (self.ready, self.reason, self.message) == (
            other.ready, other.reason, other.message)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "Synced", "status": "True" if self.ready else "False", "reason": self.reason,
                "message": self.message, "lastTransitionTime": self.since, "observedRevision": self.revision}

    @classmethod
    def from_dict(cls, d: Any) -> Condition | None:
        if not isinstance(d, dict) or d.get("type") not in ("Synced", "Ready"):  # Ready: as recorded before
            return None
        return cls(d.get("status") == "True", str(d.get("reason", "")), str(d.get("message", "")),
                   str(d.get("lastTransitionTime", "")), str(d.get("observedRevision", "")))


@dataclass(frozen=True, slots=True)
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
    ignored: tuple[str, ...] = ()
    """Entries that were not understood (e.g. a kind flower-syncer does not manage): left alone in
    the cluster and dropped from the inventory the next time it is written."""
    condition: Condition | None = None
    history: tuple[Applied, ...] = ()  # newest first, at most HISTORY_LIMIT
    source: str = ""
    """Where the repository that applied it comes from (identity.source_key); "" when recorded
    before sources were (its owner's next sync records it)."""
    node_keys: OwnedKeys | None = None

    def name(self) -> str:
        return inventory_name(self.unit)

    def encode(self) -> str:
        payload = {
            "unit": self.unit.id,
            "revision": self.revision,
            **({"source": self.source} if self.source else {}),
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
            "data": {INVENTORY_KEY: self.encode(),
                     **({STATUS_KEY: json.dumps(self.condition.to_dict(), indent=1, sort_keys=True)}
                        if self.condition is not None else {}),
                     **({HISTORY_KEY: json.dumps([h.to_dict() for h in self.history[:HISTORY_LIMIT]], indent=1,
                                                 sort_keys=True)} if self.history else {}),
                     **({NODE_KEYS_KEY: json.dumps(self.node_keys.to_dict(), indent=1, sort_keys=True)}
                        if self.node_keys is not None else {})},
        }


def inventory_name(unit: Unit) -> str:
    return f"flower-syncer.{unit.kind}.{unit.name}"


def inventory_ref(unit: Unit) -> ObjectRef:
    return ObjectRef("ConfigMap", unit.namespace, inventory_name(unit))


def decode(cm: dict[str, Any]) -> Inventory | None:
    """An inventory from its ConfigMap, or None if it is not one of ours or is unreadable."""
    labels = cm.get("metadata", {}).get("labels", {})
    unit = Unit.from_labels(cm["metadata"].get("namespace", ""), labels)
    if unit is None:
        return None
    suspended = cm["metadata"].get("annotations", {}).get(ANN_SUSPENDED) == "true"
    repository = labels.get(LABEL_REPOSITORY, DEFAULT_REPOSITORY)
    try:
        condition = Condition.from_dict(json.loads(cm.get("data", {}).get(STATUS_KEY, "null")))
    except ValueError:
        condition = None
    try:
        raw_history = json.loads(cm.get("data", {}).get(HISTORY_KEY, "[]"))
        history = tuple(h for h in map(Applied.from_dict, raw_history if isinstance(raw_history, list) else [])
                        if h is not None)[:HISTORY_LIMIT]
    except (ValueError, TypeError):
        history = ()
    try:
        node_keys = OwnedKeys.from_dict(json.loads(cm.get("data", {}).get(NODE_KEYS_KEY, "null")))
    except (ValueError, TypeError):
        node_keys = None
    try:
        payload = json.loads(cm.get("data", {}).get(INVENTORY_KEY, "{}"))
        objects = payload.get("objects", [])
        if not isinstance(objects, list):
            raise TypeError("objects is not a list")
    except (ValueError, TypeError, AttributeError):
        return Inventory(unit, suspended=suspended, repository=repository, condition=condition, history=history,
                         node_keys=node_keys)
    entries: dict[ObjectRef, Entry] = {}
    ignored: list[str] = []
    for o in objects:
        ref = _entry_ref(o)
        if ref is None:
            ignored.append(json.dumps(o, sort_keys=True)[:200])
            continue
        # an agent holds every unit's entries: the hash of a field set is shared by the objects of a kind
        entries[ref] = Entry(str(o.get("applied", "")), sys.intern(str(o.get("fields", ""))))
    source = payload.get("source", "") if isinstance(payload, dict) else ""
    return Inventory(unit, entries, str(payload.get("revision", "")), suspended, repository, tuple(ignored),
                     condition, history, source if isinstance(source, str) else "", node_keys)


def _entry_ref(o: Any) -> ObjectRef | None:
    """An inventory entry's object, if it names one flower-syncer manages (a namespaced kind of
    ours, with string names): anything else would be an object we cannot address or must not touch."""
    if not isinstance(o, dict):
        return None
    kind, namespace, name = o.get("kind"), o.get("namespace"), o.get("name")
    if kind not in APPLY_ORDER or kind == "Namespace":
        return None
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        return None
    return ObjectRef.shared(kind, namespace, name)
