"""Shared by the canary tests on the local control plane (test_canary*.py): one sync of the
repository's single unit, and the wait for its canary to fail."""

from __future__ import annotations

from pathlib import Path

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
