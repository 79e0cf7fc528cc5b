"""What a sync did, object by object: one result type for the CLI, logs, metrics and tests.

Modelled on fluxcd/pkg/ssa's ChangeSetEntry: each entry names its object (an ObjectRef), the
action, and an optional message and diff; results answer questions through predicates
(`Action.is_change`, `UnitResult.ok`, `SkipReason.suspended`) so no caller compares strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

from syncer.identity import ObjectRef

if TYPE_CHECKING:
    from syncer.engine.nodekeys import NodeKeyResult


class Action(StrEnum):
    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    RECREATED = "recreated"
    SKIPPED = "skipped"
    FAILED = "failed"

    @property
    def is_change(self) -> bool:
        """Anything but unchanged or skipped: the object was (or, in a dry run, would be) written,
        or the attempt failed, so live and Git differ."""
        return self not in (Action.UNCHANGED, Action.SKIPPED)


class SkipReason(Enum):
    """Why a whole unit was left as it is."""

    SUSPENDED_BY_CLI = "suspended (flower-syncer suspend)"
    SUSPENDED_IN_GIT = "suspended (policy in Git)"
    NOT_PRUNED_REPO_HAS_ERRORS = "removed from Git, but not pruned: the repository has errors"
    NOT_PRUNED_PRUNING_DISABLED = "removed from Git; pruning is disabled"

    @property
    def suspended(self) -> bool:
        return self in (SkipReason.SUSPENDED_BY_CLI, SkipReason.SUSPENDED_IN_GIT)

    def __str__(self) -> str:
        return self.value


@dataclass
class Change:
    ref: ObjectRef
    action: Action
    message: str = ""
    diff: str = ""
    drift: bool = False  # the live object differed from what was last applied (someone changed it)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"object": str(self.ref), "action": self.action.value}
        if self.message:
            out["message"] = self.message
        if self.drift:
            out["drift"] = True
        if self.diff:
            out["diff"] = self.diff
        return out


@dataclass
class UnitResult:
    unit: str
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: SkipReason | None = None
    suspended: SkipReason | None = None
    """Set on a dry-run that measured a suspended unit's drift anyway (`diff`, `status`)."""
    node_keys: NodeKeyResult | None = None
    """For a Federation with SuperNode authentication: its keys on the SuperLink (engine/nodekeys.py)."""

    @property
    def ok(self) -> bool:
        return not self.errors and not any(c.action is Action.FAILED for c in self.changes)

    @property
    def changed(self) -> bool:
        return any(c.action.is_change for c in self.changes)

    def count(self, *actions: Action) -> int:
        return sum(1 for c in self.changes if c.action in actions)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "ok": self.ok, "changes": [c.to_dict() for c in self.changes]}
        if self.errors:
            out["errors"] = self.errors
        if self.skipped is not None:
            out["skipped"] = str(self.skipped)
        if self.suspended is not None:
            out["suspended"] = str(self.suspended)
        if self.node_keys is not None:
            out["nodeKeys"] = self.node_keys.to_dict()
        return out
