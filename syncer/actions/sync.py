"""`sync` and `diff`: apply a loaded repository to the cluster once, or compare it with the
cluster (a server-side dry-run with diffs: no writes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from syncer.actions.load import Loaded
from syncer.cluster.client import Kube
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.observe.wait import WaitResult, wait_healthy


def sync(kube: Kube, loaded: Loaded, opts: SyncOptions, *, revision: str = "",
         progress: Callable[[str], None] | None = None) -> SyncReport:
    """Apply, prune and record inventories. Raises ClusterUnreachable/ApiError when the cluster
    cannot be used at all; per-object failures are in the report."""
    engine = Engine(kube, progress=progress)
    try:
        return engine.sync(loaded.plan(revision), opts)
    finally:
        engine.close()


def diff(kube: Kube, loaded: Loaded, namespaces: Sequence[str] | None = None) -> SyncReport:
    """What a sync would change, with a unified diff per changed object (Secret values masked)."""
    opts = SyncOptions(dry_run=True, with_diff=True, namespaces=list(namespaces) if namespaces else None,
                       include_suspended=True)
    return sync(kube, loaded, opts)


def wait(kube: Kube, loaded: Loaded, timeout: float,
         progress: Callable[[str], None] | None = None) -> WaitResult:
    """Wait until every pool of the selected units is ready (or `timeout` seconds passed)."""
    return wait_healthy(kube, loaded.units, timeout=timeout, progress=progress)
