"""What a sync is asked to do besides the Plan (`SyncOptions`), and what a whole sync did
(`SyncReport`): the engine's inputs and output, which the CLI's actions and the agent build and read
without the engine's machinery."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from syncer.engine.changeset import UnitResult
from syncer.engine.holds import Gate
from syncer.engine.rollout import FlowerOf


@dataclass
class SyncOptions:
    """How to run a sync (what to sync is the Plan)."""

    dry_run: bool = False
    with_diff: bool = False
    force_conflicts: bool = False
    prune: bool = True
    allow_empty: bool = False
    namespaces: list[str] | None = None  # limit cluster reads to these namespaces (namespaced RBAC)
    include_suspended: bool = False  # a dry-run measures suspended units too (diff, status)
    gate: Gate | None = None  # asked before a change that stops running pods (engine.holds; the agent's, per unit)
    canary_health: FlowerOf | None = None  # what Flower-level health saw of a canary pool (the agent's; engine.rollout)


@dataclass
class SyncReport:
    units: list[UnitResult] = field(default_factory=list)
    requests: int = 0
    writes: int = 0
    throttled: int = 0  # requests the API server turned away with 429 and that were tried again
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(u.ok for u in self.units)

    @property
    def changed(self) -> bool:
        return any(u.changed for u in self.units)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "changed": self.changed, "requests": self.requests, "writes": self.writes,
                "throttled": self.throttled, "seconds": round(self.seconds, 3),
                "units": [u.to_dict() for u in self.units]}
