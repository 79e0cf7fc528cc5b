"""A unit's Events and what its next sync would change, for the web view's unit page
(`syncer.observe.view.UnitActivity`). Computed only when that page is requested: never by the event
streams (`syncer.http.webview`), never while no one asks; bounded in what it reads, keeps and shows.

- **Events**: `syncer.cluster.events.recent`, two reads the API server selects (those about the
  unit's inventory, those labelled with the unit), newest ``MAX_EVENTS`` first, read with the
  agent's own rights (the ones it posts them with).
- **The next sync**: a dry-run of the unit with diffs, the one `flower-syncer diff` runs
  (`Engine.sync_unit` with ``dry_run`` and ``with_diff``, suspended units included: then it is what
  resuming does), from the installed revision against the agent's live cache: no request for an
  object known unchanged (its fingerprint and field set as recorded), a read and a server-side
  dry-run apply for each other one, and no write. Its diffs come masked by the engine
  (`syncer.engine.apply.unified_diff`: Secret values as ``***``) and are redacted as the CLI
  redacts them (`redact_text` with the plaintext of every encrypted file the agent installed,
  which is `Supervisor.scrub`), messages too.
- **Bounds**: ``MAX_RUNNING`` computations at once (a page asking beyond waits ``WAIT`` seconds,
  then says so); a result is kept ``TTL`` seconds for the next request of the same unit unless the
  unit's state changed meanwhile (`syncer.observe.view.Changes`); at most ``MAX_CHANGES`` objects
  shown, each diff cut to ``MAX_DIFF`` characters and all of them to ``MAX_TOTAL``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube
from syncer.cluster.events import recent
from syncer.engine.changeset import Change
from syncer.engine.inventory import inventory_ref
from syncer.engine.options import SyncOptions
from syncer.identity import MANAGED_BY, Unit
from syncer.observe.view import EventRow, PlannedChange, UnitActivity

if TYPE_CHECKING:
    from syncer.agent.agent import Agent

MAX_EVENTS = 20
MAX_CHANGES = 50
MAX_DIFF = 8_000  # characters of one object's diff
MAX_TOTAL = 64_000  # characters of all the diffs of a page
MAX_RUNNING = 2
WAIT = 10.0  # seconds a page waits for a computation slot
TTL = 5.0  # seconds a result is kept for the next request of the same unit (unless the unit changed)
MAX_KEPT = 64


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _shown(at: str) -> str:
    """An API time (RFC 3339, UTC) as the page shows times: to the second."""
    return f"{at[:10]} {at[11:19]} UTC" if len(at) >= 19 and at[10:11] == "T" else at


class Activity:
    """The unit pages' activity of one agent: `of(unit)` computes it, or hands out a recent one."""

    def __init__(self, agent: Agent, kube: Kube, *, ttl: float = TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._agent = agent
        self._kube = kube  # the agent's own rights: it posts the Events with them
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_RUNNING)
        self._kept: dict[Unit, tuple[float, int, UnitActivity]] = {}
        self.computed = 0  # how many were computed (tests, the benchmark)

    def of(self, unit: Unit) -> UnitActivity:
        changes = self._agent.changes
        version = changes.version  # before reading: a change while computing is computed again next time
        now = self._clock()
        with self._lock:
            kept = self._kept.get(unit)
            if kept is not None and now - kept[0] < self._ttl and not changes.touched_after(unit.id, kept[1]):
                return kept[2]
        if not self._slots.acquire(timeout=WAIT):
            busy = "other pages are being computed; reload in a moment"
            return UnitActivity(events_error=busy, plan_error=busy, at=_utc(time.time()))
        try:
            activity = unit_activity(self._agent, self._kube, unit)
            self.computed += 1
        finally:
            self._slots.release()
        with self._lock:
            if len(self._kept) >= MAX_KEPT:
                self._kept = {u: k for u, k in self._kept.items() if now - k[0] < self._ttl}
            self._kept[unit] = (now, version, activity)
        return activity


def unit_activity(agent: Agent, kube: Kube, unit: Unit) -> UnitActivity:
    """The unit's Events and the changes its next sync would make, now (see the module)."""
    scrub = agent.supervisor.scrub
    try:
        labels = ",".join(f"{k}={v}" for k, v in unit.labels().items() if v != MANAGED_BY)
        events = tuple(EventRow(_shown(e.at), e.type, e.reason, e.regarding, scrub(e.note), e.count)
                       for e in recent(kube, inventory_ref(unit), labels, MAX_EVENTS))
        events_error = ""
    except (ApiError, ClusterUnreachable, OSError) as exc:
        events, events_error = (), scrub(f"the Events could not be read: {exc}")
    plan = agent.installed.plan
    desired = plan.units.get(unit)
    base = UnitActivity(events=events, events_error=events_error, at=_utc(time.time()))
    if desired is None:
        why = ("it failed to load: the errors above say why" if unit in plan.failed
               else "it is not in Git at the installed revision: the next sync prunes what it owns")
        return UnitActivity(events=events, events_error=events_error, plan_error=why, at=base.at)
    if not agent.cache.synced.is_set():
        return UnitActivity(events=events, events_error=events_error, at=base.at,
                            plan_error="the cluster's objects are not listed yet")
    opts = SyncOptions(dry_run=True, with_diff=True, include_suspended=True, prune=agent.options.prune)
    try:
        result = agent.engine.sync_unit(desired, agent.cache.state, opts, plan)
    except (ApiError, ClusterUnreachable, OSError) as exc:
        return UnitActivity(events=events, events_error=events_error, at=base.at,
                            plan_error=scrub(f"the dry-run failed: {exc}"))
    changed = [c for c in result.changes if c.action.is_change]
    shown, budget = [], MAX_TOTAL
    for c in changed[:MAX_CHANGES]:
        planned = _planned(c, scrub, min(MAX_DIFF, budget))
        budget -= len(planned.diff)
        shown.append(planned)
    errors = dict.fromkeys(result.errors)  # the unit's own (a failed object's is beside it, too)
    return UnitActivity(events=events, events_error=events_error, changes=tuple(shown),
                        more_changes=len(changed) - len(shown), planned=True,
                        plan_error=scrub("; ".join(errors)), suspended=result.suspended is not None, at=base.at)


def _planned(change: Change, scrub: Callable[[str], str], limit: int) -> PlannedChange:
    diff = scrub(change.diff)  # masked by the engine, redacted here: as `flower-syncer diff` prints it
    cut = len(diff) > limit
    return PlannedChange(ref=str(change.ref), action=change.action.value, message=scrub(change.message),
                         diff=diff[:max(limit, 0)], cut=cut)
