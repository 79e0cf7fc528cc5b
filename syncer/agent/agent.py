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

import dataclasses
import functools
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from syncer.agent.cache import LiveCache
from syncer.agent.canaries import Canaries
from syncer.agent.failures import event_failed, sync_failed
from syncer.agent.fetching import Fetcher
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.holding import Holds, hold_limits
from syncer.agent.liveness import Liveness
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
    Waiter,
)
from syncer.agent.progress import RevisionProgress
from syncer.agent.reporting import config_error_event, suspension_event, sync_events
from syncer.agent.revision import RevisionLoader
from syncer.agent.state import AgentOptions, Installed, Source, UnitState
from syncer.agent.supervisor import Supervisor
from syncer.agent.unitstate import agent_status, forget, publish, set_refusal, unit_states
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.client import FIELD_MANAGER, ClusterUnreachable, Kube
from syncer.cluster.events import Event as ReportedEvent
from syncer.cluster.events import EventRecorder
from syncer.cluster.fence import Fenced
from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import Action, UnitResult
from syncer.engine.nodekeys import worker_share
from syncer.engine.normalize import fingerprint, managed_fields_hash
from syncer.engine.sync import Engine, SyncOptions, unit_namespaces
from syncer.engine.vanished import vanished_units
from syncer.identity import ANN_APPLIED_HASH, ObjectRef, Unit, unit_matches
from syncer.observe.conditions import UnitCondition, UnitConditions
from syncer.observe.metrics import Metrics, corrections_by_kind, drift_by_kind
from syncer.observe.notify import Notification, Notifier
from syncer.observe.status import UnitStatus
from syncer.observe.view import Changes
from syncer.plan import Claims, Plan, UnitPlan
from syncer.render.repo import Rendered, plan_repo
from syncer.repo.state import RepoState
from syncer.secrets.sops import redact_text
from syncer.source.git import Checkout

log = structlog.get_logger("syncer.agent")


SUPERLINK_STARTING_RETRY = 10.0  # longest wait before registering keys again at a SuperLink that does not answer


class Agent:
    def __init__(self, kube: Kube, source: Source, metrics: Metrics, options: AgentOptions,
                 recorder: EventRecorder | None = None, notifier: Notifier | None = None) -> None:
        self.kube = kube
        self.recorder = recorder  # Kubernetes Events for operators; None: none are posted
        self.notifier = notifier  # webhooks (generic, Slack, Teams); None: none
        self.source = source
        self.metrics = metrics
        self.options = options
        self.events: queue.Queue[Event] = queue.Queue()
        self._suspended: dict[Unit, bool] = {}  # as last seen on each inventory, to report a change
        self.work: WorkQueue[Unit] = WorkQueue()
        self.engine = Engine(kube, unit_workers=1, identity=options.identity,
                             key_share=worker_share(options.workers))  # no tenant's keys hold every worker
        self.cache = LiveCache(kube, namespaces=options.namespaces, on_change=self._on_object,
                               on_inventory=lambda inv: self.events.put(InventoryChanged(inv)),
                               on_inventory_deleted=lambda unit: self.events.put(InventoryDeleted(unit)))
        self.installed = Installed()  # replaced, never changed in place
        self.revisions = RevisionLoader(options.decryption_key_files, options.tenancy, options.cluster)
        self.units: dict[Unit, UnitState] = {}
        self.health: dict[Unit, UnitCondition] = {}  # each unit's Healthy condition, from the last status round
        self.statuses: dict[Unit, UnitStatus] = {}  # each unit's pools and GPUs, from the last status round
        self.drifted: dict[Unit, tuple[ObjectRef, ...]] = {}  # objects differing from Git after the last sync
        self.flower: FlowerWatch | None = None  # Flower-level health of the federations (agent.flower_watch)
        self.holds = Holds(self.report, self.work.add_after, lambda: self.flower,
                           limits=hold_limits(options.tenancy))  # restarts that wait for runs (agent.holding)
        self.canaries = Canaries(self.report, self.work.add_after, lambda: self.flower)  # agent.canaries
        self.published: dict[Unit, tuple[str, ...]] = {}  # each unit's state as last logged (unitstate.publish)
        self.changes = Changes()  # touched where a unit's state may change (unitstate.publish): the web view
        self._errors_counted: set[Unit] = set()  # units whose config_errors metric is set
        self.checkout: Checkout | None = None
        self.fetch_error: str = ""
        self.refusal: str = ""  # why the source refused its newest revision (source.signatures); "" if it did not
        self.leading = threading.Event()
        self.loaded = threading.Event()
        self.stop = threading.Event()
        self.supervisor = Supervisor(self.stop)  # every thread: an exception is reported, never fatal
        self.liveness = Liveness()  # syncs in flight and tenant calls past their deadline: /healthz
        self.readiness: list[Callable[[], str]] = []  # more reasons not to be ready ("": none), e.g. the Lease's
        self._secret_values: frozenset[str] = frozenset()  # plaintext of the encrypted files installed so far
        self.fetcher = Fetcher(source, options, self.events, self.stop, self.supervisor.report)
        self._busy_handling = False  # the dispatcher is handling an event (idle())
        self.progress = RevisionProgress(applied=self.metrics.observe_commit_applied, checked=self._record_checked,
                                         unit_applied=lambda u, s: self.metrics.observe_unit_commit_applied(u.id, s))
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checked")
        self.waiters: list[Waiter] = []
        self._threads: list[threading.Thread] = []
        self.on_unit_synced: list[Callable[[Unit], None]] = []  # e.g. the FlowerUnits' writer (dispatcher thread)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.cache.start(self.stop, self.supervisor.spawn)
        self._spawn(self._dispatch, "dispatcher")
        self._spawn(self.fetcher.run, "source")
        for i in range(self.options.workers):
            self._spawn(self._worker, f"worker-{i}")
        self.request_fetch("start")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        self._threads.append(self.supervisor.spawn(name, target))

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop taking work, let the syncs in flight finish, then stop every thread."""
        self.stop.set()
        self.work.shutdown()
        self.events.put(Stop())
        self.fetcher.wanted.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._recorder.shutdown(wait=True)
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
        return not (self.fetcher.busy or self._busy_handling or self.fetcher.wanted.is_set()
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
        if not self.leading.is_set():
            # a standby fetches but never syncs: waiting here would only time out
            self.request_fetch("resync")
            return {"accepted": False, "done": False,
                    "error": "this agent is a standby, not the Lease holder: send the request to the leader "
                             "(the standby only fetched)"}
        # an unknown unit may come with this fetch: then even without `wait`, answer once it is installed
        known = unit is None or any(unit_matches(u, unit) and self.ours(u)
                                    for u in [*self.desired, *self.cache.state.inventories.copy()])
        waiter = Waiter(selector=unit) if wait or not known else None
        self.events.put(ResyncRequested(unit, waiter))
        if waiter is None:
            return {"accepted": True}
        if not wait:
            waiter.fetched.wait(timeout)
            return {"accepted": True, "unknownUnit": waiter.unknown_unit, "error": waiter.error}
        if not waiter.done.wait(timeout):
            return {"accepted": True, "done": False, "error": f"not finished within {timeout:.0f}s"}
        return {"accepted": True, "done": True, "revision": waiter.revision, "error": waiter.error,
                "unknownUnit": waiter.unknown_unit, "units": waiter.answer()}

    def _on_object(self, _event_type: str, ref: ObjectRef, obj: dict[str, Any] | None) -> None:
        labels = (obj or {}).get("metadata", {}).get("labels", {})
        unit = self.unit_of(ref, labels)
        if unit is not None:
            self.events.put(ObjectChanged(unit, ref, obj))

    @property
    def desired(self) -> Mapping[Unit, UnitPlan]:
        return self.installed.plan.units

    @property
    def repository(self) -> str:
        return self.installed.plan.repository

    def ours(self, unit: Unit) -> bool:
        """A unit in our Git repository, or one our repository applied (another repository's units
        sharing the cluster are left alone)."""
        if unit in self.desired:
            return True
        inv = self.cache.state.inventories.get(unit)
        return inv is not None and self.loaded.is_set() and self.installed.plan.owns(inv.repository)

    def _touched(self, event: ObjectChanged) -> bool:
        """Did something change that is ours? Status updates and other managers' own fields are
        not drift: the object still carries our fingerprint and our field set is the one recorded
        when we applied it (the check the engine makes before asking the server)."""
        if event.obj is None:
            return True
        inv = self.cache.state.inventories.get(event.unit)
        entry = inv.entries.get(event.ref) if inv is not None else None
        if entry is None:
            return True
        annotations = event.obj.get("metadata", {}).get("annotations", {})
        return (annotations.get(ANN_APPLIED_HASH) != entry.applied
                or managed_fields_hash(event.obj, FIELD_MANAGER) != entry.fields)

    def unit_of(self, ref: ObjectRef, labels: dict[str, str]) -> Unit | None:
        """The unit an object belongs to: from its labels, or (deleted, so unlabelled) the inventories."""
        unit_of = Unit.from_labels(ref.namespace, labels)
        if unit_of is not None:
            return unit_of
        for unit, inv in list(self.cache.state.inventories.items()):  # deleted objects carry no labels
            if ref in inv.entries:
                return unit
        return None

    # -- the dispatcher ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while not isinstance(event := self.events.get(), Stop):
            self._busy_handling = True
            try:
                self._dispatch_one(event)
            finally:
                self._busy_handling = False

    def _dispatch_one(self, event: Event) -> None:
        # the agent survives anything a single event does; the error is reported where it belongs
        self.supervisor.guard("event handling", functools.partial(self.handle, event),
                              on_error=functools.partial(event_failed, self, event),
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

    def handle(self, event: Event) -> None:
        """The dispatcher's decision on one event (unguarded: `_dispatch` guards it)."""
        if isinstance(event, FetchRequested):
            self.fetcher.wanted.set()
        elif isinstance(event, RevisionFetched):
            self._on_revision(event.checkout, event.seen_at)
        elif isinstance(event, FetchFailed):
            self.fetch_error = str(event.error)
            self.metrics.fetch_error(event.error.kind)
            if event.error.kind == "unverified":  # not signed as the admin requires: every unit says so
                set_refusal(self, str(event.error))
            log.warning("source fetch failed; keeping the last good revision", source=self.source.describe(),
                        error=str(event.error))
            for waiter in [w for w in self.waiters if w.units is None]:
                waiter.finish(str(event.error))
                self.waiters.remove(waiter)
        elif isinstance(event, ObjectChanged):
            if self.ours(event.unit) and self._touched(event):
                self.work.add(event.unit)
        elif isinstance(event, InventoryChanged):
            unit = event.inventory.unit
            if self.ours(unit):
                before = self._suspended.get(unit)
                if before is not None and before != event.inventory.suspended:
                    self.report(unit, suspension_event(unit, event.inventory.suspended))
                self._suspended[unit] = event.inventory.suspended
                self.work.add(unit)
        elif isinstance(event, DriftCheckDue):
            # suspended units go through the work queue like any other: the worker measures them;
            # so do federations with SuperNode keys, whose SuperLink no watch sees (a restart, a key
            # registered by hand): their objects are known unchanged, so only the keys are checked
            plan = self.installed.plan
            for unit, desired in plan.units.items():
                inv = self.cache.state.inventories.get(unit)
                if desired.policy.suspend or (inv is not None and inv.suspended) or desired.node_auth is not None:
                    self.work.add(unit)
        elif isinstance(event, InventoryDeleted):
            # rebuilt from the objects' labels by the next sync, so nothing becomes an orphan
            plan = self.installed.plan
            if event.unit in self.desired or event.unit in vanished_units(
                    self.cache.state, plan.repository, plan.ours.former, plan.in_git, foreign=plan.foreign_source):
                log.warning("inventory deleted out of band; rebuilding it from the labelled objects",
                            unit=event.unit.id)
                self.work.add(event.unit)
        elif isinstance(event, ResyncRequested):
            if event.waiter is not None:
                self.waiters.append(event.waiter)
            self.fetcher.wanted.set()
        elif isinstance(event, UnitSynced):
            self._on_synced(event)
        elif isinstance(event, KeysForgotten):  # at once, and without the backoff of a failed sync
            planned = self.installed.plan.units.get(event.unit)
            if planned is not None and planned.node_auth is not None:
                self.work.forget(event.unit)
                self.work.add(event.unit)

    def _on_revision(self, checkout: Checkout, seen_at: float) -> None:
        self.fetch_error = ""
        set_refusal(self, "")  # signed as required (again): each unit's state says its own
        self.metrics.fetch_ok()
        same = self.checkout is not None and self.checkout.revision == checkout.revision
        if not same or not self.loaded.is_set():
            loaded = self.revisions.load(checkout.root, checkout.revision, since=checkout.since,
                                         changed=checkout.changed)
            self.metrics.set_revision(checkout.revision)
            changed = self.install(loaded.state, loaded.rendered, checkout.revision)
            self.checkout = checkout
            log.info("revision loaded", revision=checkout.revision[:12], subject=checkout.subject,
                     units=len(loaded.rendered.units), changed=len(changed), errors=loaded.errors,
                     diagnostics=loaded.error_lines(),
                     parsed=loaded.parsed, reused=loaded.reused, ms=loaded.ms)
            plan = self.installed.plan
            self.progress.installed(checkout.revision, seen_at, {
                u: plan.units[u].revision if u in plan.units else plan.revision for u in changed})
            for unit in changed:
                self.work.add(unit)
        self.loaded.set()
        for waiter in [w for w in self.waiters if w.units is None]:
            # this repository's units only: another repository's are neither synced nor reported here
            units = {u for u in [*self.desired, *self.cache.state.inventories] if self.ours(u)}
            if waiter.selector:
                units = {u for u in units if unit_matches(u, waiter.selector)}
                if not units:
                    waiter.unknown_unit = True
                    waiter.finish(f"no unit matches {waiter.selector!r}")
                    self.waiters.remove(waiter)
                    continue
            waiter.units = set(units)
            waiter.revision = checkout.revision
            waiter.fetched.set()
            for unit in units:
                self.work.add(unit)

    def install(self, state: RepoState, rendered: Rendered, revision: str) -> list[Unit]:
        """Adopt a new revision; returns the units whose desired state changed. A unit that fails to
        load or render keeps its last good desired state; a unit gone from Git is pruned only if the
        whole revision loaded and rendered without errors."""
        old = self.installed
        # a failed unit keeps its last good state: the values it was rendered from stay secret too
        self._secret_values = self._secret_values | state.secrets if state.secrets else self._secret_values
        self.supervisor.scrub = functools.partial(redact_text, secrets=self._secret_values)
        fresh = plan_repo(state, rendered, revision=revision, default_repository=self.options.repository,
                          previous=old.plan.units, tenancy=self.options.tenancy,
                          flower_memo=self.revisions.flower_memo)
        units = dict(old.plan.units)
        digests = dict(old.digests)
        changed: list[Unit] = []
        errors_by_unit: dict[str, list[Diagnostic]] = {}
        for d in state.diagnostics + rendered.diagnostics:
            if d.severity == "error":
                errors_by_unit.setdefault(d.unit, []).append(d)
        for unit, planned in fresh.units.items():
            before = units.get(unit)
            if unit in old.plan.failed:  # fixed (a revert renders its last good state again): the
                changed.append(unit)  # next sync replaces the ConfigError its inventory records
            if before is planned and unit in digests:
                continue  # kept by plan_repo: the same content key, so the same digest (render.cachekey)
            digest = fingerprint({"objects": list(planned.manifests), "policy": dataclasses.asdict(planned.policy),
                                  "nodeAuth": repr(planned.node_auth)})
            if unit not in units:
                self.metrics.init_unit(unit.id, {m["kind"] for m in planned.manifests})
            if digests.get(unit) != digest:
                if unit not in changed:
                    changed.append(unit)
                units[unit], digests[unit] = planned, digest
        erring = [(unit, errors_by_unit.get(unit.id, [])) for unit in fresh.failed]
        for unit in fresh.failed:
            if unit not in old.plan.failed and unit in units:
                changed.append(unit)  # its last good state is synced again, and its inventory says why not newer
            if unit in fresh.errors:  # also a unit never applied: its Event says why not
                self.report(unit, config_error_event(unit, fresh.errors[unit]))
        for unit, errors in [*erring, *((u, []) for u in fresh.units)]:
            st = self.units.setdefault(unit, UnitState())
            if st.config_errors or errors or unit not in self._errors_counted:
                self.metrics.set_config_errors(unit.id, len(errors))
                self._errors_counted.add(unit)
            st.config_errors = errors
        if fresh.prune_allowed:
            for unit in [u for u in units if not fresh.in_git(u)]:
                del units[unit]  # gone from Git: the worker prunes it
                digests.pop(unit, None)
                changed.append(unit)
            # also units that left Git while no agent was running (or whose inventory was deleted)
            changed += [u for u in vanished_units(self.cache.state, fresh.repository, fresh.ours.former,
                                                  fresh.in_git, foreign=fresh.foreign_source) if u not in changed]
        # what each unit claims, from the desired state kept (a failed unit keeps its last claims);
        # when that is the fresh plan's units, the fresh plan's claims
        same = units.keys() == fresh.units.keys() and all(units[u] is p for u, p in fresh.units.items())
        claims = fresh.claims if same else Claims.of_refs(((u, p.refs) for u, p in units.items()), fresh.failed)
        self.installed = Installed(dataclasses.replace(fresh, units=units, claims=claims), digests)
        # the units whose state this revision may change (a unit's state reads its desired state,
        # its config errors while it fails, and whether it is in Git); the status round publishes
        # every unit anyway: a commit to one file costs one unit's publishing, not 2,000
        moved = {u for u in units.keys() | old.plan.units.keys() if fresh.in_git(u) != old.plan.in_git(u)}
        for unit in dict.fromkeys([*changed, *fresh.failed, *old.plan.failed, *sorted(moved)]):
            publish(self, unit)
        return changed

    def _on_synced(self, event: UnitSynced) -> None:
        if self.installed.plan.in_git(event.unit) or self.ours(event.unit):  # never another repository's
            st = self.units.setdefault(event.unit, UnitState())
            if st.last_result != event.result:
                # an equal result (every unit of a no-op resync) keeps the one held: the new one goes
                # with the sync's temporaries instead of settling among them, and the collector
                # does not walk 28,000 new changes at 2,001 units until the next freeze
                st.last_result = event.result
            st.last_sync = time.time()
            st.internal_error = ""
            if event.result.ok:
                st.last_revision = event.revision
            publish(self, event.unit)
        else:  # pruned: nothing of it is left to report on
            self.units.pop(event.unit, None)
            forget(self, event.unit)
        self.progress.synced(event.unit, event.revision, event.result.ok, time.monotonic())
        for waiter in list(self.waiters):
            if waiter.units is not None and event.unit in waiter.units:
                waiter.units.discard(event.unit)
                waiter.results[event.unit.id] = event.result
                if not waiter.units:
                    waiter.done.set()
                    self.waiters.remove(waiter)
        for listener in self.on_unit_synced:
            listener(event.unit)

    def _record_checked(self, revision: str) -> None:
        """Every unit of `revision` has been synced: note it for `status` (leader only, off the
        dispatcher's thread)."""
        if self.leading.is_set():
            plan = self.installed.plan
            write = functools.partial(self._write_checked, plan.repository, revision,
                                      unit_namespaces(plan, self.options.namespaces))
            self._recorder.submit(self.supervisor.guard, "recording the checked revision", write)

    def _write_checked(self, repository: str, revision: str, namespaces: set[str]) -> None:
        try:
            errors = self.engine.record_checked(repository, revision, namespaces, self.cache.state,
                                                source=self.installed.plan.source)
        except Fenced:
            return  # the next leader records it
        for error in errors:
            log.warning("could not record the checked revision", revision=revision[:12], error=error)

    # -- workers ------------------------------------------------------------------------------------

    def _worker(self) -> None:
        while (unit := self.work.get()) is not None:
            self._work_on(unit)

    def _work_on(self, unit: Unit) -> None:
        try:
            if self.leading.is_set():  # the leader does the writing; we pick the unit up when we lead
                with self.liveness.syncing(unit):
                    self.supervisor.guard("sync", functools.partial(self.sync, unit),
                                          quiet=(Fenced, ClusterUnreachable),
                                          on_error=functools.partial(sync_failed, self, unit), about={"unit": unit.id})
        finally:
            self.work.done(unit)

    def drain(self) -> int:
        """Work on every unit the queue hands out now (not those waiting for a backoff) on the
        caller's thread, as a worker does; returns how many. With `dispatch_pending`, how tests
        step the agent."""
        count = 0
        while (unit := self.work.get(timeout=0)) is not None:
            self._work_on(unit)
            count += 1
        return count

    def sync(self, unit: Unit) -> None:
        """Sync one unit with the installed plan, on the caller's thread (a worker's, or a test's):
        record it in the metrics, requeue it on failure, report its Events, post UnitSynced."""
        if not self.cache.synced.is_set() and not self.cache.wait_synced(30):
            # without the listed inventories and objects a sync would record a partial inventory,
            # and what left Git meanwhile would never be pruned: wait for the watches instead
            log.warning("the cluster's objects are not listed yet; the unit waits", unit=unit.id,
                        retry_in=self.work.retry(unit))
            return
        plan = self.installed.plan  # one snapshot for the whole sync
        desired = plan.units.get(unit)
        revision = desired.revision if desired is not None else plan.revision
        before = self.cache.state.inventories.get(unit)
        held = self.holds.held.get(unit)
        opts = SyncOptions(prune=self.options.prune,
                           gate=self.holds.gate(desired, plan, before) if desired is not None else None,
                           canary_health=self.canaries.health(unit))
        known = set(before.entries) if before else set()
        start = time.monotonic()
        if desired is None:
            result = self._prune_vanished(unit, opts, plan)
        else:
            result = self.engine.sync_unit(desired, self.cache.state, opts, plan)
        seconds = time.monotonic() - start
        self.holds.after(unit, result, held)
        self.canaries.after(unit, result, revision)
        self.metrics.observe_sync(result, seconds)
        self.metrics.set_suspended(unit.id, result.skipped is not None and result.skipped.suspended)
        if result.node_keys is not None and not result.node_keys.waiting:
            self.metrics.set_supernode_keys(unit.id, result.node_keys.admitted, result.node_keys.failing)
        corrected = corrections_by_kind(result, known)
        if corrected:
            self.metrics.observe_drift_corrections(unit.id, corrected)
        if result.skipped is None:  # what still differs from Git: the objects that failed
            failed = Counter(c.ref.kind for c in result.changes if c.action is Action.FAILED)
            self.metrics.set_drift(unit.id, failed)
            self.drifted[unit] = tuple(c.ref for c in result.changes if c.action is Action.FAILED)
        elif result.skipped.suspended and desired is not None:
            dry = self.engine.suspended_drift(desired, self.cache.state, plan)
            self.metrics.set_drift(unit.id, drift_by_kind(dry))
            self.drifted[unit] = tuple(c.ref for c in dry.changes if c.action.is_change)
        writes = sum(1 for c in result.changes if c.action.is_change)
        if writes or not result.ok:
            log.info("unit synced", unit=unit.id, revision=revision[:12], ok=result.ok,
                     seconds=round(seconds, 3), changed=writes,
                     unchanged=result.count(Action.UNCHANGED), errors=result.errors[:3],
                     failed=[str(c.ref) for c in result.changes if c.action is Action.FAILED][:5])
        if result.ok:  # keys that waited for their namespace's share: the next status round asks them
            self.work.forget(unit)
        else:
            # a SuperLink still starting is retried every status round, not after minutes of backoff
            # (the syncs its own pods' events trigger meanwhile would have doubled it to 5 min)
            starting = result.node_keys is not None and result.node_keys.superlink_unreachable and not result.failures()
            delay = self.work.retry(unit, cap=SUPERLINK_STARTING_RETRY if starting else None)
            log.warning("unit failed; retrying", unit=unit.id, retry_in=delay, error=result.first_error())
        if not opts.dry_run:
            for ev in sync_events(unit, result, known, revision):
                self.report(unit, ev)
        self.events.put(UnitSynced(unit, result, seconds, revision))

    def report(self, unit: Unit, event: ReportedEvent) -> None:
        """A Kubernetes Event, and a notification to the receivers that want it (leader only)."""
        if not self.leading.is_set():
            return
        if self.recorder is not None:  # a failure to report never fails what is reported
            self.supervisor.guard("posting an Event", functools.partial(self.recorder.record, event))
        if self.notifier is not None:
            about = "" if event.regarding.kind == "ConfigMap" else str(event.regarding)
            note = Notification(unit, "error" if event.type == "Warning" else "info", event.reason, event.note, about)
            self.supervisor.guard("notifying", functools.partial(self.notifier.notify, note))

    def _prune_vanished(self, unit: Unit, opts: SyncOptions, plan: Plan) -> UnitResult:
        """A unit removed from Git: the engine's rules and deletion, then forget its figures."""
        had_inventory = unit in self.cache.state.inventories
        res = self.engine.prune_vanished(unit, self.cache.state, opts, plan)
        if had_inventory and unit not in self.cache.state.inventories:
            self.units.pop(unit, None)
            self.drifted.pop(unit, None)
            self._errors_counted.discard(unit)
            self.metrics.forget_unit(unit.id)
        return res

    def request_drift_check(self) -> None:
        self.events.put(DriftCheckDue())

    def request_key_registration(self, unit: Unit) -> None:
        self.events.put(KeysForgotten(unit))

    # -- reporting -------------------------------------------------------------------------------------

    def unit_states(self) -> dict[Unit, UnitConditions]:
        """Every unit's Synced and Healthy conditions, computed now (syncer.agent.unitstate)."""
        return unit_states(self)

    def unit_conditions(self) -> dict[Unit, dict[str, Any]]:
        """The same as plain dicts: {"ready", "synced", "health", "revision", "conditions": [...]}."""
        return {unit: state.to_dict() for unit, state in self.unit_states().items()}

    def status(self) -> dict[str, Any]:
        """What `/api/v1/status` answers (syncer.agent.unitstate.agent_status)."""
        return agent_status(self)
