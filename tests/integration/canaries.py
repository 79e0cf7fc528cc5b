"""Shared by the canary tests on the local control plane (test_canary*.py): one sync of the
repository's single unit, the wait for its canary to fail, and whether a pod is Ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.engine.changeset import UnitResult
from syncer.engine.sync import Engine, SyncOptions
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.conftest import wait_until


def sync_unit(engine: Engine, repo: Path) -> UnitResult:
    """Load, render and sync `repo` (one unit, which must load) with `engine`; its result."""
    state = load_repo(repo)
    assert not state.failed, state.diagnostics
    report = engine.sync(plan_repo(state, render_repo(state)), SyncOptions())
    return report.units[0]


def until_canary_failed(engine: Engine, repo: Path) -> UnitResult:
    """Sync until the unit fails (its canary's deadline passed); that sync's result."""
    def failed() -> UnitResult | None:
        result = sync_unit(engine, repo)
        return result if not result.ok else None
    result: UnitResult = wait_until("the canary to fail at its deadline", failed, timeout=90, interval=1)
    return result


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
