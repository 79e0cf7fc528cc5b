"""The agent's events (everything that happens goes through its one queue) and its state."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import UnitResult
from syncer.engine.inventory import Inventory
from syncer.identity import ObjectRef, Unit
from syncer.plan import Plan
from syncer.source.git import Checkout
from syncer.source.refs import SourceError

# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchRequested:
    reason: str  # "watch", "webhook", "poll", "resync", "start"


@dataclass(frozen=True)
class RevisionFetched:
    checkout: Checkout
    seen_at: float


@dataclass(frozen=True)
class FetchFailed:
    error: SourceError


@dataclass(frozen=True)
class ObjectChanged:
    unit: Unit
    ref: ObjectRef
    obj: dict[str, Any] | None  # None: deleted


@dataclass(frozen=True)
class InventoryChanged:
    inventory: Inventory


@dataclass(frozen=True)
class InventoryDeleted:
    unit: Unit


@dataclass(frozen=True)
class ResyncRequested:
    unit: str | None
    waiter: Waiter | None


@dataclass(frozen=True)
class UnitSynced:
    unit: Unit
    result: UnitResult
    seconds: float
    revision: str


@dataclass(frozen=True)
class DriftMeasureRequested:
    """The status timer: measure the drift of suspended units (a dry-run, on the dispatcher)."""


@dataclass(frozen=True)
class Stop:
    pass


Event = (FetchRequested | RevisionFetched | FetchFailed | ObjectChanged | InventoryChanged | InventoryDeleted
         | ResyncRequested | UnitSynced | DriftMeasureRequested | Stop)


@dataclass
class Waiter:
    """Someone (the resync API) waiting for a set of units to be synced after a fetch."""

    done: threading.Event = field(default_factory=threading.Event)
    units: set[Unit] | None = None  # filled in once the fetch is done
    selector: str | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    revision: str = ""
    error: str = ""
    unknown_unit: bool = False


# -- state ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """What one revision asks for, swapped in as a whole: a worker reads one snapshot, so the
    manifests it applies, the revision it records and the claims it checks always agree. Each unit
    keeps the revision its manifests were rendered from."""

    plan: Plan = field(default_factory=lambda: Plan(units={}, prune_allowed=False))
    digests: dict[Unit, str] = field(default_factory=dict)  # manifests + policy, to tell what changed


@dataclass
class UnitState:
    last_result: UnitResult | None = None
    last_sync: float = 0.0
    last_revision: str = ""
    config_errors: list[Diagnostic] = field(default_factory=list)
    drift_corrections: int = 0
