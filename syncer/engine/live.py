"""A snapshot of what flower-syncer manages in the cluster: one LIST per kind, not a GET per object."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from syncer.cluster.client import Kube
from syncer.engine.inventory import INVENTORY_SELECTOR, Inventory, ObjectRef, decode
from syncer.render.common import APPLY_ORDER, LABEL_MANAGED_BY, MANAGED_BY, Unit

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
MANAGED_KINDS = tuple(k for k in APPLY_ORDER if k != "Namespace")


@dataclass
class LiveState:
    objects: dict[ObjectRef, dict[str, Any]] = field(default_factory=dict)
    inventories: dict[Unit, Inventory] = field(default_factory=dict)

    @classmethod
    def load(cls, kube: Kube, namespaces: Iterable[str] | None = None,
             kinds: Iterable[str] = MANAGED_KINDS) -> LiveState:
        """Everything labelled managed-by flower-syncer: cluster-wide, or in the given namespaces
        (for an agent whose RBAC is limited to them)."""
        state = cls()
        scopes: list[str | None] = [*sorted(set(namespaces))] if namespaces is not None else [None]
        for ns in scopes:
            for kind in kinds:
                items, _ = kube.list(kind, ns, labels=MANAGED_SELECTOR)
                for item in items:
                    state.objects[ObjectRef.of(item)] = item
            cms, _ = kube.list("ConfigMap", ns, labels=INVENTORY_SELECTOR)
            for cm in cms:
                inv = decode(cm)
                if inv is not None:
                    state.inventories[inv.unit] = inv
        return state
