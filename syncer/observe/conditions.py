"""One state per unit, the same wherever a user looks (`status`, `/api/v1/status`, metrics, Events,
notifications, logs): two conditions, after Argo CD's sync status and health.

- **Synced**: True when the unit's revision was applied; else False with a reason from the fixed
  set `SyncedReason` (ConfigError, Decryption, SyncFailed, Conflict, Suspended, ...).
- **Healthy**: Healthy, Progressing or Degraded (`HealthReason`), from its workloads' pods and
  pool readiness. Flower-level health (SuperNodes connected to their SuperLink) plugs in as a
  `HealthCheck`: it may only make a unit less healthy than its pods say.

Pure: results, diagnostics and pool figures in, conditions out. Every decision reads a typed value
(a `Cause`, a diagnostic's kind, a pool's figures), never message text. Each condition is computed
from scratch every time it is asked for, so nothing an earlier revision or sync said can stay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from syncer.diagnostics import DECRYPTION, Diagnostic, primary
from syncer.engine.changeset import Cause, UnitResult

if TYPE_CHECKING:
    from syncer.engine.inventory import Condition


class SyncedReason(StrEnum):
    """Why a unit is (or is not) Synced: the fixed set every view shows."""

    SYNCED = "Synced"  # the revision was applied
    PENDING = "Pending"  # not synced yet since the agent started or the unit changed
    CONFIG_ERROR = "ConfigError"  # the unit's configuration has errors; its last good state stays
    DECRYPTION = "Decryption"  # a SOPS-encrypted file of the unit cannot be decrypted
    CONFLICT = "Conflict"  # another server-side applier owns fields of some objects
    SYNC_FAILED = "SyncFailed"  # objects could not be applied (API errors, ownership, keys, ...)
    UNREACHABLE = "Unreachable"  # the API server could not be reached
    SUSPENDED = "Suspended"  # not applied nor healed until resumed
    HELD = "Held"  # applied, but for changes that would restart pods while Flower runs are in progress
    CANARY = "Canary"  # applied, but a pool's change reached only its canary, which the rest of the pool waits for
    CANARY_FAILED = "CanaryFailed"  # a pool's canary did not become healthy: the rest stays on the last good revision
    INTERNAL_ERROR = "InternalError"  # the agent failed on the unit (a bug); it syncs again
    UNVERIFIED = "Unverified"  # the newest revision is not signed as the admin's policy requires; not applied


class HealthReason(StrEnum):
    HEALTHY = "Healthy"  # every workload reached its goal
    PROGRESSING = "Progressing"  # rolling out, starting, or not applied yet: may still become healthy
    DEGRADED = "Degraded"  # a workload's pods fail (crash loop, image pull, unschedulable, stalled)
    UNKNOWN = "Unknown"  # nothing of the unit was looked at (e.g. the agent has no pod figures)


@dataclass(frozen=True)
class UnitCondition:
    type: str  # "Synced" or "Healthy"
    status: bool
    reason: str  # a SyncedReason or HealthReason value
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "status": "True" if self.status else "False", "reason": str(self.reason),
                "message": self.message}


@dataclass(frozen=True)
class UnitConditions:
    """The two conditions of one unit. `ready` is both: the one answer the top-level JSON `ready`,
    the exit code and a READY column give."""

    synced: UnitCondition
    healthy: UnitCondition
    revision: str = ""

    @property
    def ready(self) -> bool:
        return self.synced.status and self.healthy.status

    def to_dict(self) -> dict[str, Any]:
        return {"ready": self.ready, "synced": str(self.synced.reason), "health": str(self.healthy.reason),
                "revision": self.revision, "conditions": [self.synced.to_dict(), self.healthy.to_dict()]}


# -- Synced --------------------------------------------------------------------------------------

def is_decryption(d: Diagnostic) -> bool:
    return d.code == DECRYPTION


def describe(d: Diagnostic) -> str:
    """`file:line: field: message (hint)`: what a log line, an Event and a status row say."""
    where = f"{d.file}:{d.line}" if d.line else d.file
    text = f"{where}: {d.path}: {d.message}" if d.path and not is_decryption(d) else f"{where}: {d.message}"
    return f"{text} ({d.hint})" if d.hint else text


_BY_CAUSE = {Cause.CONFLICT: SyncedReason.CONFLICT, Cause.UNREACHABLE: SyncedReason.UNREACHABLE,
             Cause.CRASHED: SyncedReason.INTERNAL_ERROR, Cause.CONFIG_ERROR: SyncedReason.CONFIG_ERROR,
             Cause.CANARY_FAILED: SyncedReason.CANARY_FAILED}


def synced_condition(*, config_errors: Sequence[Diagnostic] = (), result: UnitResult | None = None,
                     suspended: bool = False, internal_error: str = "", in_git: bool = True,
                     refused: str = "") -> UnitCondition:
    """Synced from what is known of the unit now: a newer revision the source refused (`refused`:
    why; not signed as the admin requires) first, then its configuration errors of the installed
    revision (its last good state stays applied, but not this revision), then suspension, then its
    last sync's result. Every input is the current one: nothing is carried over."""
    if refused:
        return UnitCondition("Synced", False, SyncedReason.UNVERIFIED,
                             f"the newest revision was not applied, the last good one stays: {refused}")
    first = primary(config_errors)
    if first is not None:
        reason = SyncedReason.DECRYPTION if is_decryption(first) else SyncedReason.CONFIG_ERROR
        more = len([d for d in config_errors if d.severity == "error"]) - 1
        return UnitCondition("Synced", False, reason, describe(first) + (f" (and {more} more)" if more else ""))
    if suspended:
        return UnitCondition("Synced", False, SyncedReason.SUSPENDED, "not applied nor healed until resumed")
    if internal_error:
        return UnitCondition("Synced", False, SyncedReason.INTERNAL_ERROR, internal_error)
    if not in_git and (result is None or result.ok):  # what it last applied stays until it is pruned
        return UnitCondition("Synced", False, SyncedReason.PENDING, "removed from Git; not pruned yet")
    if result is None:
        return UnitCondition("Synced", False, SyncedReason.PENDING, "not synced yet")
    if result.skipped is not None and result.skipped.suspended:  # resumed since: its next sync is due
        return UnitCondition("Synced", False, SyncedReason.PENDING, "resumed; not synced yet")
    if result.ok and result.is_held():  # the restarts wait for the runs (engine.holds)
        return UnitCondition("Synced", False, SyncedReason.HELD, result.hold_message())
    if result.ok and result.waiting_canaries():  # the rest of a pool waits for its canary (engine.canary)
        return UnitCondition("Synced", False, SyncedReason.CANARY,
                             "; ".join(n.message for n in result.waiting_canaries()))
    if result.ok:
        return UnitCondition("Synced", True, SyncedReason.SYNCED, "the revision was applied")
    conflicts = result.conflicts()
    if conflicts:
        return UnitCondition("Synced", False, SyncedReason.CONFLICT,
                             f"{len(conflicts)} object(s) have fields another manager owns: "
                             + ", ".join(str(c.ref) for c in conflicts[:3]))
    failed = result.failures()
    cause = result.cause or (Cause.CANARY_FAILED if any(c.cause is Cause.CANARY_FAILED for c in failed) else None)
    reason = _BY_CAUSE.get(cause, SyncedReason.SYNC_FAILED) if cause else SyncedReason.SYNC_FAILED
    message = (result.first_error() if result.errors or any(c.cause is Cause.MISSING_CRD for c in failed) else
               "; ".join(f"{c.ref}: {c.message}" for c in failed[:3]) or "the sync failed")
    return UnitCondition("Synced", False, reason, message)


def synced_from_record(condition: Condition | None, *, suspended: bool = False) -> UnitCondition:
    """Synced as a unit's inventory records it (`status` without the agent): the reason the last
    sync wrote there, mapped onto the fixed set. A configuration error comes first (as in
    `synced_condition`): it is recorded on each revision, suspended or not."""
    config = (SyncedReason.CONFIG_ERROR.value, SyncedReason.DECRYPTION.value)
    if condition is not None and not condition.ready and condition.reason in config:
        return UnitCondition("Synced", False, condition.reason, condition.message)
    if suspended:
        return UnitCondition("Synced", False, SyncedReason.SUSPENDED, "not applied nor healed until resumed")
    if condition is None:
        return UnitCondition("Synced", False, SyncedReason.PENDING, "no sync recorded yet")
    if condition.ready:
        return UnitCondition("Synced", True, SyncedReason.SYNCED, condition.message)
    known = {r.value for r in SyncedReason}
    reason = condition.reason if condition.reason in known else SyncedReason.SYNC_FAILED.value
    return UnitCondition("Synced", False, reason, condition.message)


# -- Healthy -------------------------------------------------------------------------------------

HealthCheck = Callable[[Any], "UnitCondition | None"]
"""A further health check of a unit (e.g. Flower's: SuperNodes connected to the SuperLink): given
what `healthy_condition` is given, a Degraded or Progressing condition, or None when it has nothing
to say. Such checks may only make a unit less healthy than its pods say."""


class PoolFigures(Protocol):
    """What Healthy reads of a workload (observe.status.PoolStatus has it; that module builds on
    this one, so this one names only the figures)."""

    @property
    def pool(self) -> str: ...
    @property
    def desired(self) -> int: ...
    @property
    def ready(self) -> int: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def stalled(self) -> bool: ...
    @property
    def problem(self) -> object | None: ...
    @property
    def summary(self) -> str: ...


def healthy_condition(pools: Sequence[PoolFigures] | None, *, found: bool = True,
                      checks: Sequence[HealthCheck] = (), subject: Any = None) -> UnitCondition:
    """Healthy from the unit's workloads: Degraded when a pool's pods visibly fail or its rollout
    stalled, Progressing while a pool is not yet at its goal (or nothing was applied yet), else
    Healthy; then each extra check may lower it."""
    if pools is None:
        return UnitCondition("Healthy", False, HealthReason.UNKNOWN, "no workload figures")
    if not found:
        return UnitCondition("Healthy", False, HealthReason.PROGRESSING, "no workloads found in the cluster")
    degraded = [p for p in pools if not p.healthy and (p.problem is not None or p.stalled)]
    waiting = [p for p in pools if not p.healthy]
    if degraded:
        cond = UnitCondition("Healthy", False, HealthReason.DEGRADED,
                             "; ".join(f"{p.pool}: {p.summary or 'stalled'}" for p in degraded[:3]))
    elif waiting:
        cond = UnitCondition("Healthy", False, HealthReason.PROGRESSING,
                             "; ".join(f"{p.pool}: {p.ready}/{p.desired} ready" + (f" ({p.summary})" if p.summary
                                                                                   else "") for p in waiting[:3]))
    else:
        cond = UnitCondition("Healthy", True, HealthReason.HEALTHY, f"{len(pools)} workload(s) ready")
    for check in checks:
        other = check(subject)
        if other is not None and _rank(other) > _rank(cond):
            cond = other
    return cond


def _rank(c: UnitCondition) -> int:
    ranks: dict[str, int] = {HealthReason.HEALTHY: 0, HealthReason.UNKNOWN: 1, HealthReason.PROGRESSING: 2,
                             HealthReason.DEGRADED: 3}
    return ranks.get(str(c.reason), 1)  # a check's own reason ranks as Unknown


