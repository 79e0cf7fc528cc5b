"""`status`: readiness, pod problems, GPUs and drift of the units, from the cluster alone or
compared with a config repository (a dry-run sync: no writes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from syncer.cluster.client import Kube
from syncer.diagnostics import Diagnostic
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import Manifest, Unit
from syncer.observe.status import StatusReport, discover_units, drift_counts, status
from syncer.plan import Plan


@dataclass(frozen=True)
class StatusResult:
    report: StatusReport
    errors: list[Diagnostic] = field(default_factory=list)  # configuration errors of the repository
    sync_errors: dict[str, list[str]] = field(default_factory=dict)  # per unit id, from the dry-run

    @property
    def clean(self) -> bool:
        """Every unit ready, nothing drifted, no configuration or sync error."""
        return self.report.ready and not self.report.drifted and not self.errors and not self.sync_errors


def cluster_status(kube: Kube, selectors: Sequence[str] = (),
                   namespaces: Sequence[str] | None = None) -> StatusResult:
    """The units flower-syncer has applied (found by their inventories)."""
    units = list(discover_units(kube, namespaces)) if namespaces else None
    return StatusResult(status(kube, units, selectors=selectors))


def repo_status(kube: Kube, plan: Plan, errors: Sequence[Diagnostic] = ()) -> StatusResult:
    """The plan's units compared with the cluster: a dry-run sync counts what differs, then their
    readiness; units that failed to load or left Git are reported too."""
    engine = Engine(kube)
    try:
        dry = engine.sync(plan, SyncOptions(dry_run=True, include_suspended=True))  # as the agent's drift gauge
    finally:
        engine.close()
    counts, sync_errors = drift_counts(dry)
    units: dict[Unit, Sequence[Manifest] | None] = dict.fromkeys(u.unit for u in dry.units)
    units.update({u: p.manifests for u, p in plan.units.items()})
    report = status(kube, units, drift=counts, errors=sync_errors)
    return StatusResult(report, list(errors), sync_errors)
