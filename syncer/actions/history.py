"""`history`: the last revisions applied to a unit, from its inventory (when, by which agent,
what changed). Rollback stays `git revert`: the history says which commit to revert to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from syncer.cluster.client import Kube
from syncer.engine.inventory import Applied, Inventory, decode
from syncer.identity import INVENTORY_SELECTOR, Unit, UnknownUnit, unit_matches


@dataclass(frozen=True)
class HistoryResult:
    unit: Unit
    entries: tuple[Applied, ...]  # newest first

    def to_dict(self) -> dict[str, object]:
        return {"unit": self.unit.id, "history": [e.to_dict() for e in self.entries]}


def find_inventory(kube: Kube, selector: str, namespaces: Sequence[str] | None = None) -> Inventory:
    """The inventory of the one applied unit `selector` matches; UnknownUnit otherwise."""
    scopes: list[str | None] = list(namespaces) if namespaces else [None]
    found = [inv for ns in scopes for cm in kube.list("ConfigMap", ns, labels=INVENTORY_SELECTOR)[0]
             if (inv := decode(cm)) is not None and unit_matches(inv.unit, selector)]
    if len(found) != 1:
        raise UnknownUnit(selector, (inv.unit for inv in found))
    return found[0]


def history(kube: Kube, selector: str, namespaces: Sequence[str] | None = None) -> HistoryResult:
    inv = find_inventory(kube, selector, namespaces)
    return HistoryResult(inv.unit, inv.history)
