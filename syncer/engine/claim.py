"""A new unit's claim, made before anything of it is applied.

A unit's inventory ConfigMap records which repository applied it, and from which source
(identity.source_key); a repository never takes the units another source recorded under the same
name (engine.sync `_begin`). But a unit nobody applied yet has no inventory: two sources that claim
one repository name and render one unit, synced at the same moment, both found nothing recorded,
both applied, and each then recorded itself (issue 39). So a new unit is claimed first, by
*creating* its inventory, empty, with the repository and source: the API server creates an object
once, so of two sources one gets the unit and the other is told it is taken and applies nothing.

An inventory that was claimed and never recorded (the sync stopped before its end) has no entries
and no revision: the next sync rebuilds its entries from the labelled objects, as for a lost one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from syncer.cluster.client import ApiError, Kube
from syncer.engine.changeset import Cause
from syncer.engine.inventory import Inventory, decode
from syncer.engine.live import LiveState
from syncer.plan import Plan


def never_recorded(inv: Inventory) -> bool:
    """A claim that no sync completed yet: no entries, no revision, no history."""
    return not inv.entries and not inv.revision and not inv.history


@dataclass(frozen=True)
class Refused:
    """Why a unit may not be applied: its claim failed."""

    cause: Cause
    reason: str


def claim(kube: Kube, inv: Inventory, plan: Plan, live: LiveState) -> Refused | None:
    """Claim the unit of `inv` (a new one: `live` knows no inventory of it) for `plan`'s repository
    and source, and note the claim in `live`. Returns why not when another repository or source
    has it (nothing of the unit may be applied then), else None: claimed, or already ours (the
    watch had not delivered it yet), or the API server refused the claim itself (RBAC, say): the
    sync goes on as without one, and its objects' writes and the inventory's at its end say what
    is refused."""
    mine = dataclasses.replace(inv, source=plan.source, repository=plan.repository)
    name = mine.name()
    try:
        kube.create(mine.manifest())
        live.inventories[inv.unit] = mine
        return None
    except ApiError as exc:
        if not exc.conflict:
            return None
    found = kube.get("ConfigMap", inv.unit.namespace, name)
    if found is None:  # deleted again meanwhile: the next sync claims it
        return Refused(Cause.API_ERROR, f"the unit's inventory {name} was made and deleted meanwhile; trying again")
    theirs = decode(found)
    if theirs is None:
        return Refused(Cause.OTHER_MANAGER, f"the ConfigMap {name}, where flower-syncer records the unit, exists and "
                       "is not an inventory of flower-syncer: nothing of the unit is applied; rename or delete it")
    if plan.owns(theirs.repository) and plan.foreign_source(theirs.repository, theirs.source):
        return Refused(Cause.OTHER_REPOSITORY, f"{inv.unit.id} was claimed by the repository {theirs.repository!r} "
                       f"from another source ({theirs.source}), not from this one ({plan.source}): two sources "
                       "claim one repository name, and nothing of the unit is applied from this one. Give one of "
                       "them another name (`name` in flower-syncer.yaml)")
    if not plan.owns_record(theirs.repository, theirs.source, in_git=True):
        return Refused(Cause.OTHER_REPOSITORY, f"{inv.unit.id} was claimed by the repository "
                       f"{theirs.repository!r}, not by this one ({plan.repository!r}): nothing of it is applied. "
                       "Rename the unit in one of them")
    live.inventories[inv.unit] = theirs  # ours
    return None
