"""`status`: readiness, pod problems, GPUs and drift of the units, from the cluster alone or
compared with a config repository (a dry-run sync: no writes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from syncer.cluster.client import Kube
from syncer.diagnostics import Diagnostic
from syncer.engine.outcome import config_error_condition
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import Manifest, Unit, unit_matches
from syncer.observe.status import (
    StatusReport,
    Target,
    attach_flower,
    collect_status,
    discover_units,
    drift_counts,
    resolve_targets,
    status,
    unloaded_units,
)
from syncer.plan import Plan


@dataclass(frozen=True)
class StatusResult:
    report: StatusReport
    errors: list[Diagnostic] = field(default_factory=list)  # configuration errors of the repository
    sync_errors: dict[str, list[str]] = field(default_factory=dict)  # per unit id, from the dry-run

    @property
    def clean(self) -> bool:
        """Every unit Synced and Healthy, nothing drifted, no configuration or sync error."""
        return self.report.settled and not self.report.drifted and not self.errors and not self.sync_errors


def cluster_status(kube: Kube, selectors: Sequence[str] = (),
                   namespaces: Sequence[str] | None = None) -> StatusResult:
    """The units flower-syncer has applied (found by their inventories), and those in Git that
    never loaded (no inventory; their FlowerUnit says why)."""
    units = list(discover_units(kube, namespaces)) if namespaces else None
    targets = resolve_targets(kube, units, selectors)
    known = {t.unit for t in targets}
    for unit, condition in unloaded_units(kube, namespaces).items():
        if unit not in known and (not selectors or any(unit_matches(unit, s) for s in selectors)):
            targets.append(Target(unit, {}, condition=condition))
    report = collect_status(kube, sorted(targets, key=lambda t: t.unit))
    attach_flower(kube, report)  # the federations' SuperNodes and runs, as the agent recorded them
    return StatusResult(report)


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
    for u in report.units:  # the repository is the truth here: its configuration errors, not the recorded ones
        unit = Unit.parse(u.unit)
        if unit in plan.errors:
            u.condition = config_error_condition(plan.errors[unit], plan.revision,
                                                 decryption=unit in plan.undecryptable)
    return StatusResult(report, list(errors), sync_errors)
