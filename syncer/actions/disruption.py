"""What `diff` and `sync --dry-run` say of the disruption a sync brings: per unit whose changes
stop running pods (engine.disruption), the Flower runs they would interrupt, as the agent last
recorded them on the federation's FlowerUnit (a SuperNode release's runs are those of the
federation whose SuperLink it dials)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncer.cluster.client import Kube
from syncer.engine.sync import SyncReport
from syncer.identity import Unit
from syncer.observe.flower_health import runs_in_progress
from syncer.observe.status import recorded_flower
from syncer.plan import Plan


def federation_of(plan: Plan) -> dict[str, str]:
    """Unit id -> the id of the federation whose SuperLink its SuperNodes dial (a federation's own)."""
    out: dict[str, str] = {}
    for fed, target in plan.flower.items():
        out[fed.id] = fed.id
        for pool in target.pools:
            out.setdefault(pool.unit, fed.id)
    return out


def runs_at_stake(kube: Kube, report: SyncReport, plan: Plan) -> dict[str, dict[str, Any]]:
    """Unit id -> {federation, runs (the phrase), recorded runs by state} for each unit whose
    changes stop pods; one LIST of FlowerUnits per namespace of such federations."""
    feds = federation_of(plan)
    stopping = [u.unit for u in report.units if any(d.stops_pods() for d in u.disruptions)]
    wanted = {u.id: feds.get(u.id, u.id if u.kind == "federation" else "") for u in stopping}
    namespaces = {Unit.parse(f).namespace for f in wanted.values() if f}
    recorded = recorded_flower(kube, namespaces) if namespaces else {}
    out: dict[str, dict[str, Any]] = {}
    for unit, fed in wanted.items():
        flower = recorded.get(fed) if fed else None
        runs: Mapping[str, Any] = (flower or {}).get("runs") or {}
        out[unit] = {"federation": fed or None,
                     "runs": runs_in_progress(flower) if fed else "runs unknown: no federation in Git serves it",
                     "running": runs.get("running") if flower and flower.get("reachable") else None,
                     "starting": runs.get("starting") if flower and flower.get("reachable") else None}
    return out


def with_runs(payload: dict[str, Any], runs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A report's JSON with each disrupting unit's runs at stake (`runsAtStake`)."""
    for unit in payload.get("units") or []:
        if unit.get("unit") in runs:
            unit["runsAtStake"] = runs[unit["unit"]]
    return payload
