"""What a sync tells an operator as Kubernetes Events (pure: results in, events out).

Unit-level events are attached to the unit's inventory ConfigMap, object-level ones (drift put
back, a conflict) to the object itself, so `kubectl events --for configmap/flower-syncer.federation.x`
and `kubectl events --for statefulset/x` both tell the story.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from syncer.cluster.events import Event
from syncer.engine.changeset import Action, UnitResult
from syncer.engine.inventory import inventory_ref
from syncer.identity import ObjectRef, Unit

_CORRECTING = frozenset({Action.CONFIGURED, Action.RECREATED})


def sync_events(unit: Unit, result: UnitResult, known: Collection[ObjectRef], revision: str) -> list[Event]:
    """Events for one finished (not dry-run) sync of `unit`; none when nothing happened."""
    if result.skipped is not None:
        return []
    inv = inventory_ref(unit)
    rev = revision[:12] or "(no revision)"
    events: list[Event] = []
    for c in result.changes:
        if (c.drift and c.action in _CORRECTING) or (c.action is Action.CREATED and c.ref in known):
            what = "deleted" if c.action is Action.CREATED else "changed"
            events.append(Event(c.ref, "Normal", "DriftCorrected", "Apply",
                                f"{c.ref} was {what} outside Git; put back to revision {rev}", unit))
        elif c.is_conflict():
            events.append(Event(c.ref, "Warning", "Conflict", "Apply", f"{c.ref} not applied: {c.message}", unit))
        elif c.action is Action.DELETED:
            events.append(Event(inv, "Normal", "Pruned", "Prune", f"{c.ref} left Git and was deleted"))
    counts = Counter(c.action.value for c in result.changes if c.action.is_change and c.action is not Action.FAILED)
    if not result.ok:
        failed = result.failures()
        first = result.first_error()
        events.append(Event(inv, "Warning", "SyncFailed", "Sync",
                            f"revision {rev}: {len(failed)} object(s) failed; {first}".rstrip("; ")))
    elif counts:
        summary = ", ".join(f"{n} {action}" for action, n in sorted(counts.items()))
        events.append(Event(inv, "Normal", "Synced", "Sync", f"revision {rev}: {summary}"))
    return events


def config_error_event(unit: Unit, first_error: str) -> Event:
    return Event(inventory_ref(unit), "Warning", "ConfigError", "Validate",
                 f"not applied, the last good state stays: {first_error}")


def unverified_event(unit: Unit, refusal: str) -> Event:
    """The newest revision is not signed as the admin's policy requires: nothing of it is applied."""
    return Event(inventory_ref(unit), "Warning", "Unverified", "Verify",
                 f"not applied, the last good state stays: {refusal}")


def recovered_event(unit: Unit, was: str, revision: str) -> Event:
    """The unit is Synced again after `was` (a reason of syncer.observe.conditions): the Event that
    follows the unit's last Warning, so that `kubectl events` never ends on a reason already gone."""
    return Event(inventory_ref(unit), "Normal", "Synced", "Sync",
                 f"revision {revision[:12] or '(no revision)'} applied; no longer {was}")


def suspension_event(unit: Unit, suspended: bool) -> Event:
    return (Event(inventory_ref(unit), "Normal", "Suspended", "Suspend", "no longer applied or healed until resumed")
            if suspended else Event(inventory_ref(unit), "Normal", "Resumed", "Suspend", "applied and healed again"))


def internal_error_event(unit: Unit, text: str) -> Event:
    """The agent failed on something about `unit` (a bug, not the unit's config): it goes on and
    syncs the unit again."""
    return Event(inventory_ref(unit), "Warning", "InternalError", "Agent",
                 f"the agent failed handling a change and will sync again: {text}")
