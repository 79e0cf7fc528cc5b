"""The Ready condition a unit's inventory records: what its last sync (or its configuration)
means for it. Decided on the result's causes (engine.changeset.Cause), never on message text; the
message names objects, never volatile server text, so the same failure gives the same condition
(and no new write)."""

from __future__ import annotations

from datetime import UTC, datetime

from syncer.engine.canary import CANARY
from syncer.engine.changeset import Cause, UnitResult
from syncer.engine.holds import HELD, held_condition
from syncer.engine.inventory import Condition


def outcome_condition(res: UnitResult, revision: str) -> Condition:
    """The Ready condition a sync result stands for: Synced, Held (applied but for changes that
    would restart pods during Flower runs), Conflict (another applier owns fields of some objects;
    it wins over other failures) or SyncFailed."""
    if res.ok and res.held:  # the rest is applied; the restarts wait for the federation's runs (their ids)
        return Condition(False, HELD, short(res.hold_message() or held_condition(res.held)), utc_now(), revision)
    waiting = res.waiting_canaries()
    if res.ok and waiting:  # stable words (no counts, no times): the record is written when they change
        pools = ", ".join(dict.fromkeys(n.pool for n in waiting))
        return Condition(False, CANARY, short(f"the change of pool {pools} reached its canary; the rest of the pool "
                                              "waits for it to be healthy"), utc_now(), revision)
    if res.ok:
        return Condition(True, "Synced", "in sync with Git", utc_now(), revision)
    failed = res.failures()
    canaries = [c.ref for c in failed if c.cause is Cause.CANARY_FAILED]
    if canaries:
        return Condition(False, "CanaryFailed", short(f"the canary of {', '.join(map(str, canaries[:3]))} failed; the "
                                                      "rest of the pool stays on its last good revision"), utc_now(),
                         revision)
    conflicts = [c.ref for c in res.conflicts()]
    if conflicts:
        return Condition(False, "Conflict", short(f"{len(conflicts)} object(s) have fields another manager "
                                                  f"owns: {', '.join(map(str, conflicts[:3]))}"), utc_now(), revision)
    if failed:
        listed = ", ".join(str(c.ref) for c in failed[:3])
        # a missing CustomResourceDefinition is named (the text is ours, so it stays the same from sync
        # to sync; the API server's own messages are left out: a record changes only when the state does)
        missing = [c for c in failed if c.cause is Cause.MISSING_CRD]
        why = f"; {missing[0].ref}: {missing[0].message}" if missing else ""
        return Condition(False, "SyncFailed", short(f"{len(failed)} object(s) failed: {listed}{why}"), utc_now(),
                         revision)
    return Condition(False, "SyncFailed", short(res.errors[0] if res.errors else "the sync failed"), utc_now(),
                     revision)


def held_since(condition: Condition, before: Condition | None) -> Condition:
    """`condition`, with the time of `before` when both are Held: the record's `since` is when the
    hold began (the agent's deadline counts from it), even as the runs it waits for change."""
    if before is not None and condition.reason == HELD == before.reason and before.since:
        return Condition(condition.ready, condition.reason, condition.message, before.since, condition.revision)
    return condition


def config_error_condition(message: str, revision: str, *, decryption: bool = False) -> Condition:
    """The condition of a unit whose configuration has errors (its last applied state stays):
    ConfigError, or Decryption when its primary error is a file that cannot be decrypted."""
    return Condition(False, "Decryption" if decryption else "ConfigError", short(message), utc_now(), revision)


def short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
