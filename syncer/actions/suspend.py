"""`suspend` and `resume`: record on a unit's inventory that it must not be applied or healed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from syncer.actions.history import find_inventory
from syncer.cluster.client import Kube, path_for
from syncer.engine.inventory import Inventory
from syncer.identity import ANN_SUSPENDED, Unit

FIELD_MANAGER_CLI = "flower-syncer-cli"


@dataclass(frozen=True)
class SuspendResult:
    unit: Unit
    suspended: bool  # the state now
    changed: bool  # False when it already was in that state


def set_suspended(kube: Kube, selector: str, suspended: bool,
                  namespaces: Sequence[str] | None = None) -> SuspendResult:
    """Suspend (or resume) the one applied unit `selector` matches. Raises UnknownUnit when it
    matches none or several, ApiError/ClusterUnreachable when the cluster says no."""
    return suspend_inventory(kube, find_inventory(kube, selector, namespaces), suspended)


def suspend_inventory(kube: Kube, inv: Inventory, suspended: bool) -> SuspendResult:
    """Suspend (or resume) the unit of the inventory `inv` already read."""
    if inv.suspended == suspended:
        return SuspendResult(inv.unit, suspended, changed=False)
    patch = {"metadata": {"annotations": {ANN_SUSPENDED: "true" if suspended else None}}}
    kube.request("PATCH", path_for("ConfigMap", inv.unit.namespace, inv.name()), body=patch,
                 content_type="application/merge-patch+json", query={"fieldManager": FIELD_MANAGER_CLI})
    return SuspendResult(inv.unit, suspended, changed=True)
