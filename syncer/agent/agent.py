"""The long-running agent: one event queue drives everything.

Inputs become events on a single queue: a local commit or push (watchdog), a webhook, the poll
timer, an API resync, and changes to managed objects seen by the watches. The dispatcher (one
thread) turns them into decisions: fetch the source, load and render a new revision, and put
the units that need work on the work queue. Worker threads sync one unit at a time each with
the engine; a failing unit backs off without holding up the others. Only the leader writes.

    source ──events──▶ dispatcher ──units──▶ work queue ──▶ workers ──▶ engine ──▶ cluster
    watches ─events──▶     │                                   │
    http/api ─events─▶     └──────────── metrics / status ◀────┘
"""

from __future__ import annotations

import functools
import queue
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from syncer.agent.messages import (
    DriftCheckDue,
    Event,
    FetchFailed,
    FetchRequested,
    InventoryChanged,
    InventoryDeleted,
    KeysForgotten,
    ObjectChanged,
    ResyncRequested,
    RevisionFetched,
    Stop,
    UnitSynced,
)
from syncer.agent.parts import AgentParts
from syncer.agent.reporting import suspension_event
from syncer.agent.state import Installed, UnitState
from syncer.cluster.client import FIELD_MANAGER
from syncer.engine.live import LiveState
from syncer.engine.normalize import managed_fields_hash
from syncer.engine.units_left_git import vanished_units
from syncer.identity import ANN_APPLIED_HASH, ObjectRef, Unit, unit_matches
from syncer.observe.conditions import UnitConditions
from syncer.observe.status import UnitStatus
from syncer.plan import UnitPlan
from syncer.render.tenancy import Tenancy
from syncer.source.git import Checkout

log = structlog.get_logger("syncer.agent")


class Agent(AgentParts):
    """The dispatcher and the agent's lifecycle over its parts (agent.parts, made by
    agent.wiring.build_agent): every decision is taken on the dispatcher's thread, from one event
    at a time; the parts do the work."""

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.cache.start(self.stop, self.supervisor.spawn)
        self._spawn(self._dispatch, "dispatcher")
        self._spawn(self.fetcher.run, "source")
        for i in range(self.options.workers):
            self._spawn(self.syncs.run, f"worker-{i}")
        self.request_fetch("start")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        self.threads.append(self.supervisor.spawn(name, target))

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop taking work, let the syncs in flight finish, then stop every thread."""
        self.stop.set()
        self.work.shutdown()
        self.events.put(Stop())
        self.fetcher.wanted.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.checked.shutdown()
        self.engine.close()

    def healthy(self) -> bool:
        return self.supervisor.healthy()[0] and not self.stop.is_set() and not self.liveness.why()

    def ready(self) -> tuple[bool, str]:
        if not self.loaded.is_set():
            return False, "the first revision has not been loaded yet"
        if not self.cache.synced.is_set():
            return False, "the watch caches are not synced yet"
        if self.kube.unreachable:  # the last request (a watch, a sync, the status loop) did not get through
            return False, f"the API server is unreachable: {self.kube.unreachable}"
        blocked = next((why for check in self.readiness if (why := check())), "")
        return (False, blocked) if blocked else (True, "ok")

    def idle(self) -> bool:
        """Nothing in flight: no event to handle, no fetch wanted, no unit ready to sync or syncing
        (retries due later do not count). A moment to do slow housekeeping (agent.memory.Heap)."""
        return not (self.fetcher.busy or self.handling.is_set() or self.fetcher.wanted.is_set()
                    or not self.events.empty() or self.work.busy())

    def set_leading(self, leading: bool) -> None:
        if leading:
            self.leading.set()
            self.metrics.set_leader(True)
            for unit in list(self.desired) + list(self.cache.state.inventories):
                if self.ours(unit):
                    self.work.add(unit)  # catch up on what happened while we were not leading
        else:
            self.leading.clear()
            self.metrics.set_leader(False)
            dropped = self.work.clear()  # queued work is the next leader's; syncs in flight are fenced
            if dropped:
                log.info("stopped leading: dropped the queued work", units=dropped)

    # -- inputs (called from other threads; they only post events) -----------------------------

    def request_fetch(self, reason: str) -> None:
        self.events.put(FetchRequested(reason))

    def request_resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        known = unit is None or (self.leading.is_set() and any(
            unit_matches(u, unit) and self.ours(u) for u in [*self.desired, *self.cache.state.inventories.copy()]))
        return self.resyncs.request(unit, wait, timeout, known=known)

    def request_drift_check(self) -> None:
        self.events.put(DriftCheckDue())

    def request_key_registration(self, unit: Unit) -> None:
        self.events.put(KeysForgotten(unit))

    # -- what is installed, as the other parts and the web view read it ------------------------

    @property
    def installed(self) -> Installed:
        return self.current.installed

    @property
    def desired(self) -> Mapping[Unit, UnitPlan]:
        return self.current.plan.units

    @property
    def repository(self) -> str:
        return self.current.plan.repository

    def ours(self, unit: Unit) -> bool:
        return self.installer.ours(unit)

    @property
    def units(self) -> dict[Unit, UnitState]:
        return self.book.units

    @property
    def statuses(self) -> dict[Unit, UnitStatus]:
        return self.book.statuses

    @property
    def drifted(self) -> dict[Unit, tuple[ObjectRef, ...]]:
        return self.book.drifted

    # -- the dispatcher ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while not isinstance(event := self.events.get(), Stop):
            self.handling.set()
            try:
                self._dispatch_one(event)
            finally:
                self.handling.clear()

    def _dispatch_one(self, event: Event) -> None:
        # the agent survives anything a single event does; the error is reported where it belongs
        self.supervisor.guard("event handling", functools.partial(self.handle, event),
                              on_error=functools.partial(self.failures.event_failed, event),
                              about={"about": type(event).__name__})
        self.metrics.set_queue_depth(self.work.depth())

    def dispatch_pending(self) -> int:
        """Handle every event queued now on the caller's thread, as the dispatcher does (a failure is
        reported, never raised); returns how many. With `drain`, how tests step the agent."""
        count = 0
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return count
            if not isinstance(event, Stop):
                self._dispatch_one(event)
                count += 1

    def drain(self) -> int:
        """Work on every unit the queue hands out now, on the caller's thread (agent.syncing)."""
        return self.syncs.drain()

    def handle(self, event: Event) -> None:
        """The dispatcher's decision on one event (unguarded: `_dispatch` guards it)."""
        if isinstance(event, FetchRequested):
            self.fetcher.wanted.set()
        elif isinstance(event, RevisionFetched):
            self._on_revision(event.checkout, event.seen_at)
        elif isinstance(event, FetchFailed):
            self.installer.fetch_failed(event.error, self.source.describe())
            self.resyncs.fetch_failed(str(event.error))
        elif isinstance(event, ObjectChanged):
            if self.ours(event.unit) and touched(event, self.cache.state):
                self.work.add(event.unit)
        elif isinstance(event, InventoryChanged):
            unit = event.inventory.unit
            if self.ours(unit):
                if self.book.suspension_changed(unit, event.inventory.suspended):
                    self.reporter.report(unit, suspension_event(unit, event.inventory.suspended))
                self.work.add(unit)
        elif isinstance(event, DriftCheckDue):
            # suspended units go through the work queue like any other: the worker measures them;
            # so do federations with SuperNode keys, whose SuperLink no watch sees (a restart, a key
            # registered by hand): their objects are known unchanged, so only the keys are checked.
            # One that failed waits for its backoff: a SuperLink that keeps failing (a tenant's,
            # hostile or broken) is not dialled again every drift check
            for unit, desired in self.current.plan.units.items():
                inv = self.cache.state.inventories.get(unit)
                keys = desired.node_auth is not None and not self.work.failing(unit)
                if desired.policy.suspend or (inv is not None and inv.suspended) or keys:
                    self.work.add(unit)
        elif isinstance(event, InventoryDeleted):
            # rebuilt from the objects' labels by the next sync, so nothing becomes an orphan
            plan = self.current.plan
            if event.unit in self.desired or event.unit in vanished_units(
                    self.cache.state, plan.repository, plan.ours.former, plan.in_git, foreign=plan.foreign_source):
                log.warning("inventory deleted out of band; rebuilding it from the labelled objects",
                            unit=event.unit.id)
                self.work.add(event.unit)
        elif isinstance(event, ResyncRequested):
            if event.waiter is not None:
                self.resyncs.add(event.waiter)
            self.fetcher.wanted.set()
        elif isinstance(event, UnitSynced):
            self._on_synced(event)
        elif isinstance(event, KeysForgotten):  # at once, and without the backoff of a failed sync
            planned = self.current.plan.units.get(event.unit)
            if planned is not None and planned.node_auth is not None:
                self.work.forget(event.unit)
                self.work.add(event.unit)

    def _on_revision(self, checkout: Checkout, seen_at: float) -> None:
        for unit in self.installer.fetched(checkout, seen_at):
            self.work.add(unit)
        self.loaded.set()
        for unit in self.resyncs.fetched(checkout.revision, self._our_units):
            self.work.add(unit)

    def _our_units(self) -> set[Unit]:
        """This repository's units (another repository's are neither synced nor reported here)."""
        return {u for u in [*self.desired, *self.cache.state.inventories] if self.ours(u)}

    def _on_synced(self, event: UnitSynced) -> None:
        if self.current.plan.in_git(event.unit) or self.ours(event.unit):  # never another repository's
            self.book.synced(event.unit, event.result, event.revision, time.time())
        else:  # pruned: nothing of it is left to report on
            self.book.forget(event.unit)
        self.progress.synced(event.unit, event.revision, event.result.ok, time.monotonic())
        self.resyncs.synced(event.unit, event.result)
        for listener in self.on_unit_synced:
            listener(event.unit)

    # -- reporting -------------------------------------------------------------------------------------

    def unit_states(self) -> dict[Unit, UnitConditions]:
        """Every unit's Synced and Healthy conditions, computed now (syncer.agent.unitstate)."""
        return self.book.unit_states()

    def unit_conditions(self) -> dict[Unit, dict[str, Any]]:
        """The same as plain dicts: {"ready", "synced", "health", "revision", "conditions": [...]}."""
        return {unit: state.to_dict() for unit, state in self.unit_states().items()}

    def status(self) -> dict[str, Any]:
        """`/api/v1/status`: the agent (`ready`: its own readiness, see `ready`; `unitsReady`: every
        unit Synced and Healthy), its source, and each unit with its conditions."""
        states = self.book.unit_states()
        checkout = self.installer.checkout
        return {
            "leader": self.leading.is_set(),
            "ready": self.ready()[0],
            "unitsReady": all(state.ready for state in states.values()),
            "source": {
                "url": self.source.describe(),
                "revision": checkout.revision if checkout else "",
                "subject": checkout.subject if checkout else "",
                "error": self.installer.fetch_error,
            },
            "queueDepth": self.work.depth(),
            "flowerHealth": "on" if self.flower is not None and self.flower.probe.enabled else "off",
            "tenancy": (self.options.tenancy or Tenancy()).status(),
            "units": [self.book.unit_report(unit, state) for unit, state in states.items()],
            "supervisor": self.supervisor.summary(),
            "stuck": self.liveness.why(),  # "" while the agent makes progress; else why /healthz is 503
        }


def touched(event: ObjectChanged, state: LiveState) -> bool:
    """Did something change that is ours? Status updates and other managers' own fields are not
    drift: the object still carries our fingerprint and our field set is the one recorded when we
    applied it (the check the engine makes before asking the server)."""
    if event.obj is None:
        return True
    inv = state.inventories.get(event.unit)
    entry = inv.entries.get(event.ref) if inv is not None else None
    if entry is None:
        return True
    annotations = event.obj.get("metadata", {}).get("annotations", {})
    return (annotations.get(ANN_APPLIED_HASH) != entry.applied
            or managed_fields_hash(event.obj, FIELD_MANAGER) != entry.fields)
