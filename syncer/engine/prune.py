"""Delete what left Git, and nothing else.

An object is deleted only if it is in the unit's inventory, is no longer desired, and the live
object still carries our managed-by and unit labels. Never deleted: objects annotated
`flower-syncer.io/prune: disabled`, PersistentVolumeClaims, Secrets holding data another
manager wrote, Helm-managed objects and the agent's own.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from syncer.cluster.client import FIELD_MANAGER, ApiError, Kube
from syncer.engine.changeset import Action, Change
from syncer.engine.ownership import foreign_manager
from syncer.identity import ANN_PRUNE, LABEL_MANAGED_BY, LABEL_REPOSITORY, MANAGED_BY, ObjectRef, Unit, apply_level

NEVER_PRUNED = frozenset({"PersistentVolumeClaim", "PersistentVolume", "Namespace"})


# A Secret's data can be written as `data` or as write-only `stringData`; managedFields name either.
_SECRET_DATA_FIELDS = ("f:data", "f:stringData")


def prune_blocker(unit: Unit, live: dict[str, Any], ours: Collection[str] | None = None) -> str:
    """Why this live object must not be pruned, or "" if it may be. With `ours` (the repository's
    name and former names), an object labelled as another repository's is kept too."""
    meta = live.get("metadata", {})
    labels = meta.get("labels", {})
    if live.get("kind") in NEVER_PRUNED:
        return f"{live.get('kind')} objects are never pruned"
    if meta.get("annotations", {}).get(ANN_PRUNE) == "disabled":
        return f"kept: annotated {ANN_PRUNE}: disabled"
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or unit.labels().items() - labels.items():
        return "kept: it no longer carries this unit's labels"
    foreign = foreign_manager(live)
    if foreign:
        return f"kept: {foreign}"
    owner_repo = labels.get(LABEL_REPOSITORY)
    if ours is not None and owner_repo and owner_repo not in ours:
        return f"kept: it belongs to the repository {owner_repo!r}"
    if live.get("kind") == "Secret":
        for entry in meta.get("managedFields", []):
            fields = entry.get("fieldsV1", {})
            if entry.get("manager") != FIELD_MANAGER and any(f in fields for f in _SECRET_DATA_FIELDS):
                return f"kept: Secret data was written by {entry.get('manager')!r}"
    return ""


def prune(kube: Kube, unit: Unit, refs: list[ObjectRef], live: dict[ObjectRef, dict[str, Any]], *,
          dry_run: bool, ours: Collection[str] | None = None) -> tuple[list[Change], list[ObjectRef]]:
    """Delete the given inventory entries (workloads first). Returns the changes and the refs that
    must stay in the inventory (deletion failed; they are retried next time)."""
    changes: list[Change] = []
    keep: list[ObjectRef] = []
    for ref in sorted(refs, key=lambda r: (-apply_level(r.kind), r.kind, r.namespace, r.name)):
        obj = live.get(ref) or kube.get(ref.kind, ref.namespace, ref.name)
        if obj is None:
            continue  # already gone
        blocker = prune_blocker(unit, obj, ours)
        if blocker:
            changes.append(Change(ref, Action.SKIPPED, blocker))
            continue
        if dry_run:
            changes.append(Change(ref, Action.DELETED, "would delete"))
            continue
        try:
            kube.delete(ref.kind, ref.namespace, ref.name, uid=obj["metadata"].get("uid"))
        except ApiError as exc:
            if exc.conflict:  # the uid precondition failed: someone recreated it; not ours to delete
                changes.append(Change(ref, Action.SKIPPED, "kept: it was replaced by a new object"))
                continue
            changes.append(Change(ref, Action.FAILED, f"delete failed: {exc.message}"))
            keep.append(ref)
            continue
        changes.append(Change(ref, Action.DELETED))
    return changes, keep
