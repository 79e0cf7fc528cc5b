"""Plan before apply and holds against a real API server: the server-side dry-run's defaulted pod
templates compare equal when nothing changed and name the changed field when something did; a
held restart keeps the live StatefulSet while the rest of the unit applies, and goes ahead after."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.engine.disruption import Disruption
from syncer.engine.sync import Engine, SyncOptions
from syncer.plan import Plan
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests import builders

pytestmark = pytest.mark.cluster


def _write(repo: Path, namespace: str, *, superlink: str = "", replicas: int = 1) -> None:
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    (repo / "federations" / "fed.yaml").write_text(
        builders.federation("fed", builders.pool("a", replicas), superlink=superlink))


def _plan(repo: Path) -> Plan:
    state = load_repo(repo)
    return plan_repo(state, render_repo(state))


def test_the_dry_run_names_the_restart_and_a_held_restart_waits(kube: Kube, namespace: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, namespace)
    engine = Engine(kube)
    try:
        assert engine.sync(_plan(repo), SyncOptions()).ok
        # nothing changed: the server's defaults on both sides, no disruption
        same = engine.sync(_plan(repo), SyncOptions(dry_run=True))
        assert same.ok and not any(u.disruptions for u in same.units)
        _write(repo, namespace, superlink="    extraArgs: [--fab-state-dir=/tmp]\n", replicas=3)
        plan = _plan(repo)
        dry = engine.sync(plan, SyncOptions(dry_run=True))
        assert [d.describe() for u in dry.units for d in u.disruptions] == [
            "restarts the SuperLink (pod template: spec.containers[superlink].args)"]
        asked: list[Disruption] = []

        def gate(d: Disruption) -> str:
            asked.append(d)
            return "held for the test"

        held = engine.sync(plan, SyncOptions(gate=gate))
        assert held.ok and [d.target for u in held.units for d in u.held] == ["superlink"]
        superlink = kube.get("StatefulSet", namespace, "fed-superlink")
        assert superlink is not None and "--fab-state-dir=/tmp" not in str(superlink["spec"]["template"])
        pool = kube.get("StatefulSet", namespace, "fed-supernode-a")
        assert pool is not None and pool["spec"]["replicas"] == 3  # applied at once
        writes = kube.writes
        assert engine.sync(plan, SyncOptions(gate=gate)).units[0].is_held() and kube.writes == writes
        assert engine.sync(plan, SyncOptions()).ok
        superlink = kube.get("StatefulSet", namespace, "fed-superlink")
        assert superlink is not None and "--fab-state-dir=/tmp" in str(superlink["spec"]["template"])
    finally:
        engine.close()
