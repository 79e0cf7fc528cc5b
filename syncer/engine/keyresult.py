"""What a sync did to a federation's SuperNode keys: a typed result that the change set carries
(`UnitResult.node_keys`) and engine/nodekeys.py makes. Its own module so the change set does not
import the key registration that fills it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from syncer.cluster.flower_control import ControlErrorCode, Transport
from syncer.engine.inventory import OwnedKeys


class KeyOutcome(enum.StrEnum):
    IN_STEP = "in-step"  # every key of Git admitted, nothing to do
    CHANGED = "changed"  # this sync registered or unregistered keys, and every key of Git is admitted
    FAILED = "failed"  # a key is not admitted, or the Control API could not be asked
    # not asked by this sync: its namespace's federations already take their share of the sync
    # workers registering keys (engine.nodekeys.worker_share); the next status round asks again
    WAITING = "waiting"


@dataclass(frozen=True)
class NodeKeyResult:
    """A federation's SuperNode keys on its SuperLink after a sync."""

    outcome: KeyOutcome
    address: str
    transport: Transport
    admitted: int = 0  # keys of Git registered with the SuperLink now
    registered: tuple[str, ...] = ()  # labels registered by this sync
    unregistered: tuple[int, ...] = ()  # node ids of keys this federation registered and Git no longer lists
    foreign: int = 0  # active keys that neither Git lists nor this federation registered: left alone
    errors: tuple[str, ...] = ()
    error_codes: tuple[ControlErrorCode, ...] = ()
    owned: OwnedKeys | None = None  # what to record on the inventory (None: keep what it has)

    @property
    def changed(self) -> bool:
        return bool(self.registered or self.unregistered)

    @property
    def failing(self) -> int:
        return len(self.errors)

    @property
    def waiting(self) -> bool:
        """Not asked this time (its namespace's share of the workers was taken): nothing is known."""
        return self.outcome is KeyOutcome.WAITING

    @property
    def superlink_unreachable(self) -> bool:
        """Failed only because nothing answers at the Control API yet: a SuperLink that is still
        starting (or restarting), which clears by itself without a change in Git."""
        return (self.outcome is KeyOutcome.FAILED and bool(self.error_codes)
                and all(code is ControlErrorCode.UNAVAILABLE for code in self.error_codes))

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": str(self.outcome), "address": self.address, "transport": self.transport,
                "admitted": self.admitted, "registered": list(self.registered),
                "unregistered": list(self.unregistered), "foreign": self.foreign, "errors": list(self.errors)}
