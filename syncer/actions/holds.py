"""`resync --release-hold`: let a unit's held restarts go ahead now (agent.holding), by annotating
its FlowerUnit: `flower-syncer.io/release-hold` (releases the holds begun by then) and
`flower-syncer.io/requestedAt` (the agent syncs the unit at once, agent.reconcile_request)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from syncer.actions.history import find_inventory
from syncer.actions.suspend import FIELD_MANAGER_CLI
from syncer.cluster.client import Kube, path_for
from syncer.identity import ANN_RELEASE_HOLD, ANN_REQUESTED_AT, Unit


def release_hold(kube: Kube, selector: str, namespaces: Sequence[str] | None = None,
                 now: float | None = None) -> tuple[Unit, str]:
    """Release the holds of the one applied unit `selector` matches; returns it and the time
    written. Raises UnknownUnit, ApiError (404: no FlowerUnit, the CRD or the agent is missing)."""
    unit = find_inventory(kube, selector, namespaces).unit
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    patch = {"metadata": {"annotations": {ANN_RELEASE_HOLD: at, ANN_REQUESTED_AT: at}}}
    kube.request("PATCH", path_for("FlowerUnit", unit.namespace, f"{unit.kind}.{unit.name}"), body=patch,
                 content_type="application/merge-patch+json", query={"fieldManager": FIELD_MANAGER_CLI})
    return unit, at
