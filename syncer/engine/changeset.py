"""What a sync did, object by object: one result type for the CLI, logs, metrics and tests.

Modelled on fluxcd/pkg/ssa's ChangeSetEntry: each entry names its object (an ObjectRef), the
action, and an optional message and diff; a failed entry also names its `Cause`, set where the
error is caught, so consumers (the Ready condition, Events, notifications, metrics, the CLI) decide
on the cause and show the message. Results answer questions through predicates (`Action.is_change`,
`Change.is_conflict()`, `UnitResult.failed()`, `SkipReason.suspended`) so no caller compares strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

from syncer.identity import ObjectRef, Unit

if TYPE_CHECKING:
    from syncer.engine.canary import CanaryNote
    from syncer.engine.disruption import Disruption
    from syncer.engine.keyresult import NodeKeyResult


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


class Cause(StrEnum):
    """Why an object or a unit was not applied: the fixed set of places a sync catches an error.
    The message says it for people; decisions read the cause."""

    CONFLICT = "Conflict"  # fields are owned by another server-side applier (engine.apply.ConflictError)
    IMMUTABLE_FIELD = "ImmutableField"  # the change needs a recreate the unit does not allow
    RECREATE_TIMEOUT = "RecreateTimeout"  # deleted for recreation, but still there (finalizers?)
    OTHER_REPOSITORY = "OwnedByOtherRepository"  # the object or unit belongs to another repository
    OTHER_UNIT = "OwnedByOtherUnit"  # another unit of this repository renders (or may want) the object
    OTHER_MANAGER = "OwnedByOtherManager"  # Helm's, the agent's own or another's Secret: never adopted by force
    MISSING_SECRET_KEY = "MissingSecretKey"  # a Secret to mount or copy from lacks the key (or is absent)
    SECRET_NOT_APPLIED = "SecretNotApplied"  # a workload reads a Secret of its unit that failed to apply
    DIGEST_KEY = "DigestKeyUnavailable"  # the namespace's key for fingerprinting Secrets from Git (engine.digestkey)
    FORBIDDEN = "Forbidden"  # the API server said 403
    INVALID = "Invalid"  # the API server said 422
    MISSING_CRD = "MissingCRD"  # the API server serves no such kind: its CustomResourceDefinition is not installed
    API_ERROR = "ApiError"  # any other answer of the API server
    UNREACHABLE = "Unreachable"  # the API server could not be reached (network, TLS, credentials)
    WOULD_PRUNE_ALL = "WouldPruneAll"  # refused: the repository or unit renders nothing (see --allow-empty)
    CONFIG_ERROR = "ConfigError"  # the unit's configuration has errors; nothing was applied
    NODE_KEYS = "NodeKeys"  # registering SuperNode keys on the SuperLink failed (engine.nodekeys)
    CANARY_FAILED = "CanaryFailed"  # a canary pool's first SuperNodes did not become healthy (engine.canary)
    CRASHED = "Crashed"  # a bug: the agent's sync raised something unexpected

    @staticmethod
    def of_status(status: int) -> Cause:
        """The cause of a failed API request, from its HTTP status."""
        return {403: Cause.FORBIDDEN, 422: Cause.INVALID}.get(status, Cause.API_ERROR)


@dataclass(slots=True)  # one per object, held as the units' last results: slots make each smaller
class Change:
    ref: ObjectRef
    action: Action
    message: str = ""
    diff: str = ""
    drift: bool = False  # the live object differed from what was last applied (someone changed it)
    cause: Cause | None = None  # why it failed: set exactly when the action is FAILED

    def __post_init__(self) -> None:
        if (self.cause is None) == (self.action is Action.FAILED):
            raise ValueError(f"a change has a cause exactly when it failed: {self.action} with cause {self.cause}")

    def failed(self) -> bool:
        return self.action is Action.FAILED

    def is_conflict(self) -> bool:
        """Not applied because another server-side applier owns some of its fields."""
        return self.cause is Cause.CONFLICT

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"object": str(self.ref), "action": self.action.value}
        if self.cause is not None:
            out["cause"] = self.cause.value
        if self.message:
            out["message"] = self.message
        if self.drift:
            out["drift"] = True
        if self.diff:
            out["diff"] = self.diff
        return out


@dataclass
class UnitResult:
    unit: Unit
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """What went wrong outside any one object, for people; add with `fail`, which records the cause."""
    cause: Cause | None = None
    """Why the unit itself failed (the first of its `errors`); None when it did not."""
    skipped: SkipReason | None = None
    suspended: SkipReason | None = None
    """Set on a dry-run that measured a suspended unit's drift anyway (`diff`, `status`)."""
    node_keys: NodeKeyResult | None = None
    """For a Federation with SuperNode authentication: its keys on the SuperLink (engine/nodekeys.py)."""
    disruptions: list[Disruption] = field(default_factory=list)
    """What its changes do (or would do) to running pods, applied or held (engine/disruption.py)."""
    held: list[Disruption] = field(default_factory=list)
    """The changes that would stop pods and wait for the federation's runs (engine/holds.py): their
    workloads keep their live spec."""

    canaries: list[CanaryNote] = field(default_factory=list)
    """Canary pools whose rollout this sync started, looked at, passed or failed (engine/canary.py)."""

    def waiting_canaries(self) -> list[CanaryNote]:
        """Canary pools whose change reached the canary and waits for it (not failed, not passed)."""
        return [n for n in self.canaries if n.step in ("Started", "Waiting")]

    def note_disruption(self, disruption: Disruption | None, *, held: bool = False) -> None:
        """What one change does to running pods (None: nothing), and whether the gate held it."""
        if disruption is not None:
            self.disruptions.append(disruption)
            if held:
                self.held.append(disruption)

    def is_held(self) -> bool:
        return bool(self.held)

    def hold_message(self) -> str:
        """Why the first held change waits, as the gate said it, and what else is held."""
        refs = {d.ref for d in self.held}
        first = next((c.message.removeprefix("held: ") for c in self.changes
                      if c.ref in refs and c.action is Action.SKIPPED), "")
        more = list(dict.fromkeys(d.subject() for d in self.held[1:]))
        return first + (f"; also held: {', '.join(more)}" if more and first else "")

    @property
    def ok(self) -> bool:
        return not self.errors and not any(c.action is Action.FAILED for c in self.changes)

    def failed(self) -> bool:
        return not self.ok

    def fail(self, cause: Cause, message: str) -> None:
        """Record an error of the unit (not of one object) and, if it is the first, its cause."""
        self.errors.append(message)
        if self.cause is None:
            self.cause = cause

    def failures(self) -> list[Change]:
        """The changes that failed."""
        return [c for c in self.changes if c.action is Action.FAILED]

    def first_error(self) -> str:
        """What to show first of a failed result (status, Events, the log): an object whose kind the
        cluster does not serve, as what else fails follows from it (the Secret cert-manager would
        write for a Certificate), then the unit's own first error, then the first failed object."""
        failed = self.failures()
        shown = [c for c in failed if c.cause is Cause.MISSING_CRD] or ([] if self.errors else failed)
        if shown:
            return f"{shown[0].ref}: {shown[0].message}"
        return self.errors[0] if self.errors else ""

    def conflicts(self) -> list[Change]:
        """The changes not applied because another server-side applier owns some of their fields."""
        return [c for c in self.changes if c.is_conflict()]

    def is_conflict(self) -> bool:
        return any(c.is_conflict() for c in self.changes)

    def causes(self) -> list[Cause]:
        """Every cause of this result's failure, the unit's own first, each once."""
        found = [] if self.cause is None else [self.cause]
        found.extend(c.cause for c in self.changes if c.cause is not None)
        return list(dict.fromkeys(found))

    @property
    def changed(self) -> bool:
        return any(c.action.is_change for c in self.changes)

    def count(self, *actions: Action) -> int:
        return sum(1 for c in self.changes if c.action in actions)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit.id, "ok": self.ok, "changes": [c.to_dict() for c in self.changes]}
        if self.errors:
            out["errors"] = self.errors
        if self.cause is not None:
            out["cause"] = self.cause.value
        if self.skipped is not None:
            out["skipped"] = str(self.skipped)
        if self.suspended is not None:
            out["suspended"] = str(self.suspended)
        if self.node_keys is not None:
            out["nodeKeys"] = self.node_keys.to_dict()
        if self.disruptions:
            out["disruptions"] = [d.to_dict() | {"held": d in self.held} for d in self.disruptions]
        if self.held:
            out["held"] = self.hold_message()
        if self.canaries:
            out["canaries"] = [n.to_dict() for n in self.canaries]
        return out
