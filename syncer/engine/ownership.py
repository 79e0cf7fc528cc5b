"""Who owns a live object, and whether a unit may write it. Pure functions over labels.

Every object flower-syncer applies carries its unit's labels and the repository that applied it
(`flower-syncer.io/repository`). A unit may apply an object only if the live object is
- not managed by flower-syncer at all (a new object, or one made by hand: adopted, and said so),
- already its own (same unit, same repository), or
- left behind by another unit of the same repository that no longer renders it (moved in Git
  from one unit to another: a hand-over), while that unit loaded cleanly.
Anything else (another repository's object, or an object another unit of ours still wants or may
still want) is a conflict: reported, never adopted, never recreated, never pruned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from syncer.engine.changeset import Action, Cause, Change
from syncer.engine.inventory import Entry, Inventory
from syncer.engine.normalize import managed_fields_hash
from syncer.identity import (
    ANN_APPLIED_HASH,
    DEFAULT_REPOSITORY,
    LABEL_MANAGED_BY,
    LABEL_REPOSITORY,
    MANAGED_BY,
    Manifest,
    ObjectRef,
    Unit,
)
from syncer.plan import Claims


@dataclass(frozen=True)
class Owner:
    """The unit and repository named by a live object's labels (repository "" when unlabelled:
    objects applied before repositories were recorded on objects)."""

    unit: Unit
    repository: str


def owner_of(obj: Mapping[str, Any] | None) -> Owner | None:
    """The flower-syncer unit that owns `obj`, or None when flower-syncer does not manage it."""
    if not obj:
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        return None
    unit = Unit.from_labels(meta.get("namespace", ""), labels)
    return Owner(unit, labels.get(LABEL_REPOSITORY, "")) if unit is not None else None


@dataclass(frozen=True)
class WriteConflict:
    """Why a unit must not apply over a live object: whose it is (`cause`: another repository's or
    another unit's) and, for people, `reason`."""

    cause: Cause
    reason: str


def write_conflict(unit: Unit, ours: Collection[str], live: Mapping[str, Any] | None, claims: Claims,
                   inventories: Mapping[Unit, Inventory], *, foreign: Callable[[str, Unit], bool] | None = None,
                   legacy: Collection[str] = ()) -> WriteConflict | None:
    """Why `unit` of the repository named `ours` (its name and former names) must not apply over
    `live`, or None if it may. `foreign(repository, owner unit)` says when a unit recorded under one
    of our names came from another source (a name claimed by two repositories: never taken);
    `legacy` are names earlier versions derived for us, whose objects only the same unit takes."""
    owner = owner_of(live)
    if owner is None:
        return None
    owner_repo = owner.repository or _recorded_repository(owner.unit, inventories)
    if owner_repo and owner_repo in legacy and owner_repo not in ours:
        if owner.unit == unit:
            return None
        return WriteConflict(Cause.OTHER_UNIT, f"it belongs to {owner.unit.id}, recorded under the name "
                             f"{owner_repo!r} this repository had before refs were part of derived names; only "
                             "that unit takes it over")
    if owner_repo and owner_repo not in ours:
        return WriteConflict(Cause.OTHER_REPOSITORY, f"it belongs to {owner.unit.id} of the repository "
                             f"{owner_repo!r}; flower-syncer never takes another repository's objects: rename it "
                             "in one of the repositories")
    if owner_repo and foreign is not None and foreign(owner_repo, owner.unit):
        return WriteConflict(Cause.OTHER_REPOSITORY, f"it belongs to {owner.unit.id}, applied under the name "
                             f"{owner_repo!r} by another source; a repository never takes the objects of a name "
                             "another source uses")
    if owner.unit == unit:
        return None
    if owner.unit in claims.failed:
        return WriteConflict(Cause.OTHER_UNIT, f"it belongs to {owner.unit.id}, which has configuration errors, "
                             "so it may still want it; fix that unit first")
    if live is not None and claims.claimant(ObjectRef.of(live)) == owner.unit:
        return WriteConflict(Cause.OTHER_UNIT, f"it belongs to {owner.unit.id}, which renders it too")
    return None  # left behind by a unit of ours that no longer renders it: hand-over


HELM_ANNOTATION_PREFIX = "meta.helm.sh/"
LABEL_PART_OF = "app.kubernetes.io/part-of"


def foreign_manager(obj: Mapping[str, Any] | None) -> str:
    """What makes `obj` another tool's beyond doubt: Helm's labels or annotations, or being part of
    the flower-syncer agent itself (its chart labels its objects `part-of: flower-syncer`); "" when
    nothing does."""
    meta = (obj or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if labels.get(LABEL_PART_OF) == MANAGED_BY:
        return "it is part of the flower-syncer agent itself"
    release = annotations.get(f"{HELM_ANNOTATION_PREFIX}release-name")
    if (labels.get(LABEL_MANAGED_BY) == "Helm" or "helm.sh/chart" in labels
            or any(k.startswith(HELM_ANNOTATION_PREFIX) for k in annotations)):
        return f"it is managed by Helm{f' (release {release!r})' if release else ''}"
    return ""


def adoption_blocker(live: Mapping[str, Any] | None) -> str:
    """Why an existing object that flower-syncer does not manage must not be taken over by force
    (`forceConflicts`), or "" if it may: Secrets made by anyone else (their data would be
    overwritten), Helm-managed objects, and the agent's own objects."""
    if not live or owner_of(live) is not None:
        return ""
    reason = foreign_manager(live)
    if reason:
        return reason
    if live.get("kind") == "Secret":
        return "it is a Secret another manager made"
    return ""


def _recorded_repository(unit: Unit, inventories: Mapping[Unit, Inventory]) -> str:
    inv = inventories.get(unit)
    return inv.repository if inv is not None else ""


_APPLIED_HASH_RE = re.compile(r"[0-9a-f]{32}")


def written_by_us(obj: Mapping[str, Any], field_manager: str) -> bool:
    """Whether flower-syncer applied `obj`, beyond its labels (which anyone may copy): its
    applied-hash annotation is there, in the form flower-syncer writes (engine.normalize
    `fingerprint`: 32 hex digits), and flower-syncer's apply manager owns it (a managedFields
    entry of `field_manager`, operation Apply, whose fields hold the annotation)."""
    meta = obj.get("metadata") or {}
    applied = (meta.get("annotations") or {}).get(ANN_APPLIED_HASH)
    if not isinstance(applied, str) or not _APPLIED_HASH_RE.fullmatch(applied):
        return False
    for entry in meta.get("managedFields") or []:
        if (not isinstance(entry, Mapping) or entry.get("manager") != field_manager
                or entry.get("operation") != "Apply" or entry.get("subresource")):
            continue
        fields = entry.get("fieldsV1") or {}
        annotations = (fields.get("f:metadata") or {}).get("f:annotations") if isinstance(fields, Mapping) else None
        if isinstance(annotations, Mapping) and f"f:{ANN_APPLIED_HASH}" in annotations:
            return True
    return False


@dataclass(frozen=True)
class Recovered:
    """An inventory rebuilt from labels (None when no object flower-syncer wrote names the unit),
    and the objects that carry the unit's labels but that flower-syncer did not write (see
    `written_by_us`): never counted, so never pruned or taken as the unit's."""

    inventory: Inventory | None
    not_ours: tuple[ObjectRef, ...] = ()

    def skipped(self) -> list[Change]:
        """What to report of the objects left alone, for the unit's result."""
        return [Change(ref, Action.SKIPPED, "carries the unit's labels but flower-syncer did not write it (no "
                       "applied-hash annotation owned by its apply manager): not counted in the rebuilt inventory, "
                       "left alone") for ref in self.not_ours]


def recover_inventory(unit: Unit, objects: Iterable[tuple[ObjectRef, Mapping[str, Any]]], repository: str,
                      field_manager: str, former: Collection[str] = ()) -> Recovered:
    """An inventory rebuilt from the live `objects` (pairs of reference and object; the unit's
    own, `LiveState.objects.owned_by(unit)`, suffice) that carry `unit`'s labels and this
    repository, one of its `former` names, or no repository label at all, for a unit whose
    inventory ConfigMap is gone; only objects flower-syncer wrote count (`written_by_us`): a
    hand-made copy of its labels is left out, and named."""
    entries: dict[ObjectRef, Entry] = {}
    not_ours: list[ObjectRef] = []
    for ref, obj in objects:
        owner = owner_of(obj)
        if owner is None or owner.unit != unit or owner.repository not in ("", repository, *former):
            continue
        if not written_by_us(obj, field_manager):
            not_ours.append(ref)
            continue
        applied = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_APPLIED_HASH, "")
        entries[ref] = Entry(applied, managed_fields_hash(dict(obj), field_manager))
    inventory = Inventory(unit, entries, repository=repository or DEFAULT_REPOSITORY) if entries else None
    return Recovered(inventory, tuple(sorted(not_ours)))


def stamp_repository(m: Manifest, repository: str) -> Manifest:
    """`m` with the repository label on its metadata (a new dict; `m` is not changed)."""
    meta = m["metadata"]
    return {**m, "metadata": {**meta, "labels": {**meta.get("labels", {}), LABEL_REPOSITORY: repository}}}
