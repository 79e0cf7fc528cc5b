"""Which units a repository applied that left Git, and where each unit's repository comes from.

A unit is the repository's to prune when its inventory (or, where that was deleted, the labels of
its objects) names the repository, under its name or a former one, and was recorded from the
repository's own source (identity.source_key): a second repository claiming the same name does
not get the first one's units pruned.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from syncer.engine.inventory import Inventory
from syncer.engine.live import LiveState
from syncer.engine.ownership import owner_of
from syncer.identity import Unit
from syncer.ours import Ours


def vanished_units(live: LiveState, repository: str, former: Collection[str] = (),
                   in_git: Callable[[Unit], bool] | None = None, *,
                   foreign: Callable[[str, str], bool] | None = None) -> list[Unit]:
    """Units this repository (under its name or a `former` one) applied, known from their
    inventories or, where an inventory was deleted, from objects labelled with the unit and it;
    without those `in_git` says are still in Git (left out before sorting: sorting all of them
    was most of the time when there are thousands), and without those `foreign(repository, source)`
    says another source recorded under one of our names."""
    ours = Ours(repository, frozenset(former)).names  # the one rule (syncer.ours)
    units = {u for u, inv in live.inventories.items() if inv.repository in ours and not (in_git and in_git(u))
             and not (foreign and foreign(inv.repository, recorded_source(live, u, inv)))}
    for unit in live.objects.labelled_units():
        if unit not in live.inventories and not (in_git and in_git(unit)) and any(
                (owner := owner_of(obj)) is not None and owner.repository in ours
                and not (foreign and foreign(owner.repository, recorded_source(live, unit, None, owner.repository)))
                for _, obj in live.objects.owned_by(unit)):
            units.add(unit)
    return sorted(units)


def recorded_source(live: LiveState, unit: Unit, inv: Inventory | None, repository: str = "") -> str:
    """Where the repository that applied `unit` comes from, as recorded: on its inventory, or
    (an inventory rebuilt from labels) on that repository's checked record in the unit's
    namespace; "" when nothing says."""
    if inv is not None and inv.source:
        return inv.source
    repository = repository or (inv.repository if inv is not None else "")
    record = live.checked.get((unit.namespace, repository)) if repository else None
    return record.source if record is not None else ""
