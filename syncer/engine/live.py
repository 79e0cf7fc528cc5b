"""A snapshot of what flower-syncer manages in the cluster: one LIST per kind, not a GET per object."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from syncer.cluster.client import Kube
from syncer.engine.inventory import INVENTORY_SELECTOR, Inventory, ObjectRef, decode
from syncer.render.common import APPLY_ORDER, LABEL_MANAGED_BY, MANAGED_BY, Unit

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
MANAGED_KINDS = tuple(k for k in APPLY_ORDER if k != "Namespace")


@dataclass
class LiveState:
    """Metadata (labels, annotations, managedFields, uid) of every managed object, and the
    inventories. Full objects are fetched only for the few that need a closer look."""

    objects: dict[ObjectRef, dict[str, Any]] = field(default_factory=dict)
    inventories: dict[Unit, Inventory] = field(default_factory=dict)

    @classmethod
    def load(cls, kube: Kube, namespaces: Iterable[str] | None = None,
             kinds: Iterable[str] = MANAGED_KINDS) -> LiveState:
        """Everything labelled managed-by flower-syncer: cluster-wide, or in the given namespaces
        (for an agent whose RBAC is limited to them)."""
        state = cls()
        scopes: list[str | None] = [*sorted(set(namespaces))] if namespaces is not None else [None]
        queries = [(kind, ns, MANAGED_SELECTOR) for ns in scopes for kind in kinds]
        queries += [("ConfigMap", ns, INVENTORY_SELECTOR) for ns in scopes]
        # the server serialises one list while we parse another; inventories need their data
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda q: kube.list(q[0], q[1], labels=q[2],
                                                        metadata_only=q[2] != INVENTORY_SELECTOR)[0], queries))
        for (_, _, selector), items in zip(queries, results, strict=True):
            if selector == INVENTORY_SELECTOR:
                for cm in items:
                    inv = decode(cm)
                    if inv is not None:
                        state.inventories[inv.unit] = inv
            else:
                for item in items:
                    state.objects[ObjectRef.of(item)] = item
        return state
