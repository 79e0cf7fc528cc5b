"""The messages of the agent's one event queue: what the watchers, the fetch loop, the HTTP API and
the workers tell the dispatcher. Plain data."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from syncer.engine.changeset import UnitResult
from syncer.engine.inventory import Inventory
from syncer.identity import ObjectRef, Unit
from syncer.source.git import Checkout
from syncer.source.refs import SourceError


@dataclass(frozen=True)
class DriftCheckDue:
    """Time to measure the drift of suspended units (they are not healed, so it can last)."""


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
class KeysForgotten:
    """Flower-level health saw a federation's SuperLink that no longer knows keys Git lists: sync
    the unit now (its key registration), not at the next drift check."""

    unit: Unit


@dataclass(frozen=True)
class Stop:
    pass


Event = (DriftCheckDue | FetchRequested | RevisionFetched | FetchFailed | ObjectChanged | InventoryChanged
         | InventoryDeleted | ResyncRequested | UnitSynced | KeysForgotten | Stop)


@dataclass
class Waiter:
    """Someone (the resync API) waiting for a set of units to be synced after a fetch."""

    done: threading.Event = field(default_factory=threading.Event)
    units: set[Unit] | None = None  # filled in once the fetch is done
    selector: str | None = None
    # each unit's result as it comes; turned into the answer's dicts only once all are in
    # (`answer`): built along the way, a small dict per object was allocated among what the agent
    # keeps, and the memory freed after the answer stayed scattered over the heap
    results: dict[str, UnitResult] = field(default_factory=dict)
    revision: str = ""
    error: str = ""
    unknown_unit: bool = False
    fetched: threading.Event = field(default_factory=threading.Event)  # units known (or none matched), or failed

    def answer(self) -> dict[str, dict[str, Any]]:
        """The results, by unit id, as the resync API answers them."""
        return {unit: result.to_dict() for unit, result in self.results.items()}

    def finish(self, error: str = "") -> None:
        if error:
            self.error = error
        self.fetched.set()
        self.done.set()
