"""What a sync did, object by object: one result type for the CLI, logs, metrics and tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Action(StrEnum):
    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    RECREATED = "recreated"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class Change:
    ref: str  # Kind/namespace/name
    action: Action
    message: str = ""
    diff: str = ""
    drift: bool = False  # the live object differed from what was last applied (someone changed it)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"object": self.ref, "action": self.action.value}
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
    skipped_reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors and not any(c.action is Action.FAILED for c in self.changes)

    def count(self, *actions: Action) -> int:
        return sum(1 for c in self.changes if c.action in actions)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "ok": self.ok, "changes": [c.to_dict() for c in self.changes]}
        if self.errors:
            out["errors"] = self.errors
        if self.skipped_reason:
            out["skipped"] = self.skipped_reason
        return out
