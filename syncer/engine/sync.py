"""Sync a plan into the cluster: apply in dependency order, prune safely, record inventories.

The same engine serves the one-shot CLI (`sync`, `diff`) and the long-running agent. It takes a
`Plan` (plain data), never the loader's state, so importing it imports no models.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from syncer.cluster.client import FIELD_MANAGER, ApiError, ClusterUnreachable, Kube
from syncer.cluster.fence import Fenced
from syncer.cluster.tenant_calls import Share
from syncer.engine.apply import Applier, Outcome
from syncer.engine.changeset import Action, Cause, Change, SkipReason, UnitResult
from syncer.engine.checked_revision import Checked
from syncer.engine.claim import claim, never_recorded
from syncer.engine.copied_secrets import fill_copies
from syncer.engine.digestkey import DigestKeyError, DigestKeys
from syncer.engine.disruption import config_changes, removal
from syncer.engine.holds import hold_removals
from syncer.engine.inventory import HISTORY_LIMIT, Applied, Entry, Inventory, inventory_name, inventory_ref
from syncer.engine.live import LiveState
from syncer.engine.mounts import missing_keys, mounted_secret_keys, secrets_read
from syncer.engine.nodekeys import sync_planned_keys
from syncer.engine.normalize import with_fingerprint
from syncer.engine.options import SyncOptions, SyncReport
from syncer.engine.outcome import config_error_condition, held_since, outcome_condition, utc_now
from syncer.engine.ownership import recover_inventory, stamp_repository, write_conflict
from syncer.engine.prune import prune
from syncer.engine.rollout import Rollouts
from syncer.engine.superlink_state import as_running
from syncer.engine.units_left_git import recorded_source, vanished_units
from syncer.identity import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    OPTIONAL_KINDS,
    Manifest,
    ObjectRef,
    Unit,
    apply_level,
)
from syncer.ours import own_secrets
from syncer.plan import Claims, Plan, UnitPlan

__all__ = ["Engine", "SyncOptions", "SyncReport", "cause_of", "unit_namespaces"]

Progress = Callable[[str], None]
_T = TypeVar("_T")


@dataclass
class _UnitRun:
    """One unit between its checks and its inventory: what it wants and what it applied so far."""

    planned: UnitPlan
    res: UnitResult
    inv: Inventory
    recovered: bool
    desired: list[Manifest]
    applier: Applier
    entries: dict[ObjectRef, Entry] = field(default_factory=dict)
    failed: str | None = None  # why the rest of this unit's sync was given up
    unapplied: dict[str, str] = field(default_factory=dict)  # its Secrets that failed to apply: name -> why

    @cached_property
    def own_secrets(self) -> set[str]:
        return own_secrets(self.desired)

    @cached_property
    def by_level(self) -> dict[int, list[Manifest]]:
        """The desired objects by APPLY_ORDER level, levels ascending."""
        grouped: dict[int, list[Manifest]] = {}
        for m in self.desired:
            grouped.setdefault(apply_level(m["kind"]), []).append(m)
        return dict(sorted(grouped.items()))


class Engine:
    def __init__(self, kube: Kube, *, workers: int = 8, unit_workers: int = 4,
                 progress: Progress | None = None, identity: str = "cli", key_share: Share | None = None) -> None:
        self.kube = kube
        self.key_share = key_share  # key registrations at once, per namespace and in all (engine.nodekeys)
        self.identity = identity  # who applies: recorded in each unit's history
        self.unit_workers = unit_workers
        # one pool for object requests, shared by all units (threads start on first use)
        self._requests = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="apply")
        self.progress = progress or (lambda _msg: None)
        self._namespaces_seen: set[str] = set()
        self._digest_keys = DigestKeys(kube)

    # -- whole repo ------------------------------------------------------------------------------

    def sync(self, plan: Plan, opts: SyncOptions) -> SyncReport:
        start = time.monotonic()
        before_requests, before_writes, before_throttled = (sum(self.kube.counts.values()), self.kube.writes,
                                                            self.kube.throttled)
        live = self._snapshot(plan, opts)
        report = SyncReport()
        units = sorted(plan.units)
        with ThreadPoolExecutor(max_workers=max(1, min(self.unit_workers, len(units)))) as pool:
            report.units.extend(self._staged(pool, [plan.units[u] for u in units], live, opts, plan))
        for unit in sorted(plan.failed):
            if plan.selected(unit):
                failed = UnitResult(unit)
                failed.fail(Cause.CONFIG_ERROR, "configuration has errors; nothing was changed (the last applied "
                            "state stays)")
                report.units.append(failed)
                if not opts.dry_run and unit in plan.errors:
                    self.record_config_error(unit, plan.errors[unit], live, plan)
        report.units.extend(self._prune_vanished(plan, live, opts))
        if not opts.dry_run and not plan.selectors and plan.revision:
            self.record_checked(plan.repository, plan.revision, unit_namespaces(plan, opts.namespaces), live,
                                source=plan.source)
        report.requests = sum(self.kube.counts.values()) - before_requests
        report.writes = self.kube.writes - before_writes
        report.throttled = self.kube.throttled - before_throttled
        report.seconds = time.monotonic() - start
        return report

    def _staged(self, pool: ThreadPoolExecutor, planned: list[UnitPlan], live: LiveState, opts: SyncOptions,
                plan: Plan) -> list[UnitResult]:
        """Sync many units level by level, as kubectl and Flux apply a file: every unit's
        ServiceAccounts, then every unit's Secrets, ... every unit's workloads last, then the
        inventories. Pods start only once everything before them exists, instead of competing with
        the rest of the apply from its first seconds. One unit's failure never stops the others."""
        begun = list(pool.map(lambda p: self._try(lambda: self._begin(p, live, opts, plan), p.unit), planned))
        runs = [r for r in begun if isinstance(r, _UnitRun)]
        levels = sorted({level for r in runs for level in r.by_level})

        def step(level: int, run: _UnitRun) -> None:
            if run.failed is None:
                self._try(lambda: self._apply_level(run, level, live, opts, plan), run.planned.unit, run)

        for i, level in enumerate(levels, 1):
            kinds = sorted({m["kind"] for r in runs for m in r.by_level.get(level, ())})
            self.progress(f"stage {i}/{len(levels)}: {', '.join(kinds)} of {len(runs)} units")
            list(pool.map(functools.partial(step, level), runs))
        finished = itertools.count(1)  # next() on it is atomic, unlike `+= 1` across threads

        def finish(run: _UnitRun | UnitResult) -> UnitResult:
            if isinstance(run, UnitResult):
                return run
            result = self._try(lambda: self._finish(run, live, opts, plan), run.planned.unit, run)
            self.progress(f"[{next(finished)}/{len(runs)}] {run.planned.unit.id}")
            return result if isinstance(result, UnitResult) else run.res

        return list(pool.map(finish, begun))

    @staticmethod
    def _try(step: Callable[[], _T], unit: Unit, run: _UnitRun | None = None) -> _T | UnitResult | None:
        """`step()`, or, when the cluster fails it, the failure: on the unit's run (which then goes
        no further) or as the unit's result."""
        try:
            return step()
        except (ApiError, ClusterUnreachable, OSError) as exc:
            res = UnitResult(unit) if run is None else run.res
            res.fail(cause_of(exc), f"sync failed: {exc}")
            if run is None:
                return res
            run.failed = f"sync failed: {exc}"
            return None

    def _snapshot(self, plan: Plan, opts: SyncOptions) -> LiveState:
        """What we manage, cluster-wide; or, when RBAC only grants some namespaces (the chart's
        namespaced mode), in the namespaces this repository uses."""
        if opts.namespaces is not None:
            return LiveState.load(self.kube, opts.namespaces)
        try:
            return LiveState.load(self.kube, None)
        except ApiError as exc:
            if not exc.forbidden:
                raise
        scope = sorted(plan.namespaces | {u.namespace for u in plan.units} | {u.namespace for u in plan.failed})
        self.progress(f"no cluster-wide read access; reading namespaces {', '.join(scope)}")
        return LiveState.load(self.kube, scope)

    def _prune_vanished(self, plan: Plan, live: LiveState, opts: SyncOptions) -> list[UnitResult]:
        # only units this repository applied: another repository's units are none of our business
        vanished = [u for u in vanished_units(live, plan.repository, plan.ours.former, plan.in_git,
                                              foreign=plan.foreign_source)
                    if plan.selected(u)]
        results = []
        for unit in vanished:
            try:
                results.append(self.prune_vanished(unit, live, opts, plan))
            except (ApiError, ClusterUnreachable, OSError) as exc:  # the next unit is still pruned
                results.append(failed := UnitResult(unit))
                failed.fail(cause_of(exc), f"prune failed: {exc}")
        return results

    def prune_vanished(self, unit: Unit, live: LiveState, opts: SyncOptions, plan: Plan) -> UnitResult:
        """A unit whose inventory is in the cluster but which left Git: delete its objects (with the
        safety rules of `prune`) and then its inventory. Only the repository that applied it prunes
        it, only when the repository loaded and rendered cleanly and pruning is enabled, and never
        when the repository renders nothing at all unless `allow_empty`. Objects another unit of the
        repository renders now are handed over, not deleted. A unit whose inventory was deleted is
        pruned from the objects that still carry its labels."""
        res = UnitResult(unit)
        repository = plan.repository
        inv = live.inventories.get(unit)
        if inv is None:
            found = recover_inventory(unit, live.objects.owned_by(unit), repository, FIELD_MANAGER, plan.ours.names)
            res.changes.extend(found.skipped())
            inv = found.inventory
            if inv is None:
                return res
            res.changes.append(Change(inventory_ref(unit), Action.SKIPPED,
                                      f"inventory was missing; {len(inv.entries)} objects found by their labels"))
        if not plan.owns_record(inv.repository, recorded_source(live, unit, inv)):
            return res  # not ours to prune (another repository, or another source under one of our names)
        if not plan.namespace_allowed(unit.namespace):
            res.changes.append(Change(inventory_ref(unit), Action.SKIPPED, f"not pruned: the namespace "
                                      f"{unit.namespace!r} is outside this repository's allowed namespaces"))
            return res
        if not plan.prune_allowed:
            res.skipped = SkipReason.NOT_PRUNED_REPO_HAS_ERRORS
            return res
        if not opts.prune or not plan.repo_prune:
            res.skipped = SkipReason.NOT_PRUNED_PRUNING_DISABLED
            return res
        if not plan.renders_anything and not opts.allow_empty:
            res.fail(Cause.WOULD_PRUNE_ALL, "refusing to prune: the repository renders nothing at all (wrong path "
                     "or branch?); pass --allow-empty to delete everything")
            return res
        refs, handed = _hand_over(unit, list(inv.entries), plan.claims)
        res.changes.extend(handed)
        changes, keep = prune(self.kube, unit, refs, live.objects, dry_run=opts.dry_run,
                              ours=plan.ours.names)
        res.changes.extend(changes)
        if opts.dry_run:
            return res
        if keep:  # deletions that failed are retried next time
            rest = Inventory(unit, {r: inv.entries[r] for r in keep}, inv.revision, repository=inv.repository,
                             source=inv.source)
            if self._write_inventory(rest, res):
                live.inventories[unit] = rest
        else:
            try:
                self.kube.delete("ConfigMap", unit.namespace, inventory_name(unit))
            except ApiError as exc:
                if not exc.not_found:  # a recovered inventory has no ConfigMap
                    raise
            live.inventories.pop(unit, None)
        return res

    def record_checked(self, repository: str, revision: str, namespaces: Collection[str],
                       live: LiveState, *, source: str = "") -> list[str]:
        """Note in each namespace that `repository` was checked at `revision` (see engine.checked).
        Writes only where the record (read with the inventories) names another revision; returns
        the errors (a namespace that is gone, no permission), which cost nothing but the REVISION
        column's freshness."""
        errors = []
        for ns in sorted(namespaces):
            current = live.checked.get((ns, repository))
            if current is not None and current.revision == revision and (current.source == source or not source):
                continue
            try:
                record = Checked(repository, revision, utc_now(), source)
                self.kube.apply(record.manifest(ns), force=True)
                live.checked[(ns, repository)] = record
            except (ApiError, ClusterUnreachable, OSError) as exc:
                errors.append(f"cannot record the checked revision in namespace {ns}: {exc}")
        return errors

    # -- one unit ------------------------------------------------------------------------------

    def sync_unit(self, planned: UnitPlan, live: LiveState, opts: SyncOptions, plan: Plan) -> UnitResult:
        """Apply one unit of `plan`. The plan's claims (which unit renders which object) let it take
        over an object another unit left behind and keep it from pruning one another unit took."""
        run = self._begin(planned, live, opts, plan)
        if isinstance(run, UnitResult):
            return run
        for level in run.by_level:
            self._apply_level(run, level, live, opts, plan)
        return self._finish(run, live, opts, plan)

    def _begin(self, planned: UnitPlan, live: LiveState, opts: SyncOptions, plan: Plan) -> _UnitRun | UnitResult:
        """A unit's checks before anything is applied: whose it is, whether it is suspended, its
        desired objects and namespace. A UnitResult when there is nothing to apply."""
        unit, manifests, policy = planned.unit, planned.manifests, planned.policy
        res = UnitResult(unit)
        repository = plan.repository
        inv = live.inventories.get(unit)
        recovered = False
        if inv is None or never_recorded(inv):  # new, deleted (objects keep their labels), or claimed only
            found = recover_inventory(unit, live.objects.owned_by(unit), repository, FIELD_MANAGER,
                                      plan.ours.names_in_git)
            res.changes.extend(found.skipped())
            recovered = found.inventory is not None
            if found.inventory is not None:
                inv = found.inventory if inv is None else dataclasses.replace(inv, entries=found.inventory.entries)
            inv = inv or Inventory(unit, repository=repository)
        source = recorded_source(live, unit, inv)
        if plan.owns(inv.repository) and plan.foreign_source(inv.repository, source):
            res.fail(Cause.OTHER_REPOSITORY, f"{unit.id} was applied by the repository {inv.repository!r} from "
                     f"another source ({source}), not from this one ({plan.source}): a repository may not take "
                     f"over the units of a name another source uses. Choose another name; or, if this is meant, "
                     f"ask the cluster's admins to list {inv.repository!r} in this repository's `names` in the "
                     f"admin policy")
            return res
        if not plan.owns_record(inv.repository, source, in_git=True):
            res.fail(Cause.OTHER_REPOSITORY, f"{unit.id} was applied by the repository {inv.repository!r}, not by this "
                     f"one ({repository!r}): flower-syncer never takes another repository's units. Rename the unit; "
                     f"or, if {inv.repository!r} was this repository's earlier name, add "
                     f"`renamedFrom: [{inv.repository}]` to its flower-syncer.yaml")
            return res
        if policy.suspend or inv.suspended:
            reason = SkipReason.SUSPENDED_BY_CLI if inv.suspended else SkipReason.SUSPENDED_IN_GIT
            if not (opts.dry_run and opts.include_suspended):
                res.skipped = reason
                return res
            res.suspended = reason  # a dry-run that shows what differs all the same (diff, status)
        if not manifests and inv.entries and not opts.allow_empty:
            res.fail(Cause.WOULD_PRUNE_ALL, "refusing to prune this unit down to nothing; pass --allow-empty if that "
                     "is meant")
            return res
        ready = self._ensure_namespace(unit.namespace, opts.dry_run, res)
        if ready is None:
            return res
        if ready and not opts.dry_run and plan.source and unit not in live.inventories:  # see engine.claim
            refused = claim(self.kube, inv, plan, live)
            if refused is not None:
                res.fail(refused.cause, refused.reason)
                return res
        desired: list[Manifest] = []
        for m in manifests:
            filled = fill_copies(self.kube, m, res)
            if filled is not None:
                filled = as_running(filled, live.objects.get(ObjectRef.of(filled)))  # a SuperLink in memory stays so
                try:  # a Secret from Git is fingerprinted under its namespace's key, never in the clear
                    key = self._digest_keys.key_for(filled, dry_run=opts.dry_run or not ready)
                except DigestKeyError as exc:
                    res.fail(Cause.DIGEST_KEY, f"{exc.detail}; nothing of this unit is applied")
                    return res
                desired.append(with_fingerprint(stamp_repository(filled, repository), key))
        if not ready:  # dry-run into a namespace that does not exist yet: everything would be created
            res.changes.extend(Change(ObjectRef.of(m), Action.CREATED, "would create") for m in desired)
            return res
        return _UnitRun(planned, res, inv, recovered, desired,
                        Applier(self.kube, dry_run=opts.dry_run, with_diff=opts.with_diff, gate=opts.gate,
                                rollouts=Rollouts(self.kube, opts.canary_health), unit_objects=desired))

    def _apply_level(self, run: _UnitRun, level: int, live: LiveState, opts: SyncOptions, plan: Plan) -> None:
        """Apply the unit's objects of one APPLY_ORDER level (e.g. its Services)."""
        stage = run.by_level.get(level)
        if not stage:
            return
        unit = run.planned.unit
        outcomes = self._apply_stage(run, stage, live, opts, plan)
        if any(o.namespace_missing for o in outcomes):
            # deleted since we last made sure of it: create it again on the next try
            self._namespaces_seen.discard(unit.namespace)
        for m, out in zip(stage, outcomes, strict=True):
            ref = ObjectRef.of(m)
            run.res.changes.append(out.change)
            if ref.kind == "Secret" and out.change.action is Action.FAILED:  # its readers wait (engine.mounts)
                run.unapplied[ref.name] = out.change.message.removeprefix("not applied: ")
            run.res.note_disruption(out.disruption, held=out.held)
            if out.canary is not None:
                run.res.canaries.append(out.canary)
            entry = out.entry or run.inv.entries.get(ref)
            if entry is not None:
                run.entries[ref] = entry

    def _finish(self, run: _UnitRun, live: LiveState, opts: SyncOptions, plan: Plan) -> UnitResult:
        """After the unit's objects are applied: prune what it no longer renders, register node
        keys, and record the inventory (only when something in it changed)."""
        planned, res, inv, entries = run.planned, run.res, run.inv, run.entries
        if run.failed:
            return res
        unit, policy, repository = planned.unit, planned.policy, plan.repository
        wanted = set(planned.refs)
        leftovers = [r for r in inv.entries if r not in wanted]
        # objects we could not build this time (e.g. a missing TLS source) are kept, not pruned
        leftovers = [r for r in leftovers if r not in entries]
        # objects another unit renders now are handed over to it, never pruned (nor kept: they are its)
        leftovers, handed = _hand_over(unit, leftovers, plan.claims)
        res.changes.extend(handed)
        if leftovers:
            if policy.prune and opts.prune:
                removals = {r: removal(r, live.objects.get(r)) for r in leftovers}
                leftovers = hold_removals(leftovers, removals, opts.gate, res, entries, inv.entries)
                changes, keep = prune(self.kube, unit, leftovers, live.objects, dry_run=opts.dry_run,
                                      ours=plan.ours.names_in_git)
                res.changes.extend(changes)
                res.disruptions.extend(d for c in changes if c.action is Action.DELETED
                                       and (d := removals.get(c.ref)) is not None)
                for ref in keep:
                    entries[ref] = inv.entries[ref]
                if opts.dry_run:
                    entries.update({r: inv.entries[r] for r in leftovers})
            else:
                res.changes.extend(Change(r, Action.SKIPPED, "not pruned: pruning is disabled") for r in leftovers)
                entries.update({r: inv.entries[r] for r in leftovers})
        res.disruptions.extend(config_changes((c.ref for c in res.changes if c.action is Action.CONFIGURED),
                                              run.desired))
        # SuperNode keys, before the Ready condition is written: what to record of them
        errors = len(res.errors)
        owned = sync_planned_keys(planned, run.desired, res, inv.node_keys, opts.dry_run, self.key_share)
        if len(res.errors) > errors and res.cause is None:  # engine.nodekeys says why in words
            res.cause = Cause.NODE_KEYS
        inv_ref = inventory_ref(unit)
        if run.recovered:
            res.changes.append(Change(inv_ref, Action.SKIPPED if opts.dry_run else Action.CREATED,
                                      f"inventory was missing; rebuilt from {len(inv.entries)} labelled objects"))
        res.changes.extend(Change(inv_ref, Action.SKIPPED, f"inventory entry not understood, left alone in the "
                                  f"cluster and dropped from the inventory: {entry}") for entry in inv.ignored)
        condition = (config_error_condition(plan.errors[unit], plan.revision, decryption=unit in plan.undecryptable)
                     if unit in plan.errors else outcome_condition(res, plan.revision or planned.revision))
        condition = held_since(condition, inv.condition)  # a hold goes on from when it began (engine.holds)
        recorded = inv.condition if condition.same(inv.condition) else condition
        source = plan.source or inv.source
        if not opts.dry_run and (entries != inv.entries or run.recovered or inv.ignored or recorded is condition
                                 or source != inv.source or repository != inv.repository or owned != inv.node_keys):
            changed = res.changed
            history = inv.history
            if changed and res.ok:
                counts = Counter(c.action.value for c in res.changes if c.action.is_change)
                history = (Applied(planned.revision, utc_now(), self.identity, tuple(sorted(counts.items()))),
                           *history)[:HISTORY_LIMIT]
            new = Inventory(unit, entries, planned.revision if changed else inv.revision, repository=repository,
                            condition=recorded, history=history, source=source, node_keys=owned)
            if self._write_inventory(new, res):
                live.inventories[unit] = new  # a resync right after need not wait for a watch event
        return res

    def suspended_drift(self, planned: UnitPlan, live: LiveState, plan: Plan) -> UnitResult:
        """What differs from Git for a suspended unit: a dry-run as if it were not suspended (no
        writes; no requests at all for objects known unchanged)."""
        unit = planned.unit
        awake = dataclasses.replace(planned, policy=dataclasses.replace(planned.policy, suspend=False))
        inventories = dict(live.inventories)
        inv = inventories.get(unit)
        if inv is not None:
            inventories[unit] = dataclasses.replace(inv, suspended=False)
        return self.sync_unit(awake, LiveState(live.objects, inventories), SyncOptions(dry_run=True), plan)

    def record_config_error(self, unit: Unit, message: str, live: LiveState, plan: Plan) -> bool:
        """Note on an applied unit's inventory that its configuration has errors (its objects stay
        as they are). Writes only when that is news. True when written."""
        inv = live.inventories.get(unit)
        if inv is None or not plan.owns_record(inv.repository, inv.source):
            return False
        condition = config_error_condition(message, plan.revision, decryption=unit in plan.undecryptable)
        if condition.same(inv.condition):
            return False
        new = dataclasses.replace(inv, condition=condition, ignored=())
        if self._write_inventory(new):
            live.inventories[unit] = new
            return True
        return False

    def _apply_stage(self, run: _UnitRun, stage: list[Manifest], live: LiveState, opts: SyncOptions,
                     plan: Plan) -> list[Outcome]:
        """Objects of one apply stage of `run`'s unit. Ownership and the no-request check run
        inline; only the objects that need the server are sent, in parallel. A workload that reads
        a Secret of its unit that failed to apply is not applied: its pods would read whatever a
        Secret of that name holds (another's value, for a squatted `<workload>-sealed`)."""
        applier, inv, policy, unit = run.applier, run.inv, run.planned.policy, run.planned.unit
        outcomes: list[Outcome | None] = []
        pending = []
        for i, m in enumerate(stage):
            ref = ObjectRef.of(m)
            if ref.kind in OPTIONAL_KINDS:  # not watched: read fresh each time
                self._read_optional(ref, live)
            conflict = write_conflict(unit, plan.ours.names, live.objects.get(ref), plan.claims,
                                      live.inventories, foreign=lambda repo, owner: plan.foreign_source(
                                          repo, recorded_source(live, owner, live.inventories.get(owner))),
                                      legacy=plan.ours.legacy)
            if conflict is not None:
                outcomes.append(Outcome(Change(ref, Action.FAILED, f"not applied: {conflict.reason}",
                                               cause=conflict.cause), None))
                continue
            unread = sorted(secrets_read(m) & run.unapplied.keys())
            if unread:
                outcomes.append(Outcome(Change(ref, Action.FAILED, f"not applied: its pods read the Secret "
                                               f"{unread[0]}, which was not applied ({run.unapplied[unread[0]]}); "
                                               "fix that Secret first", cause=Cause.SECRET_NOT_APPLIED), None))
                continue
            quick = applier.known_unchanged(m, live.objects.get(ref), inv.entries.get(ref))
            if quick is None:
                problems = self._unmountable(m, run.own_secrets)
                if problems:  # its pods would wait in ContainerCreating: say why instead
                    quick = Outcome(Change(ref, Action.FAILED, f"not applied: {'; '.join(problems)}",
                                           cause=Cause.MISSING_SECRET_KEY), None)
            outcomes.append(quick)
            if quick is None:
                pending.append((i, m, ref))
        fenced = threading.Event()  # the lease is gone: the rest of the batch sends nothing, not even dry-runs

        def send(m: Manifest, ref: ObjectRef) -> Outcome | None:
            if fenced.is_set():
                return None
            try:
                return applier.apply(m, live.objects.get(ref), inv.entries.get(ref), policy, opts.force_conflicts)
            except Fenced:
                fenced.set()
                raise

        futures = [(i, self._requests.submit(send, m, ref)) for i, m, ref in pending]
        for i, future in futures:
            outcomes[i] = future.result()
        return [o for o in outcomes if o is not None]

    def _read_optional(self, ref: ObjectRef, live: LiveState) -> None:
        """The live object of a kind that is not listed (identity.OPTIONAL_KINDS), into `live`, so
        the no-request check and the ownership check see it (one GET; no write when unchanged)."""
        obj = self.kube.get(ref.kind, ref.namespace, ref.name)
        if obj is not None:
            live.objects[ref] = obj
        else:
            live.objects.pop(ref, None)

    def _unmountable(self, m: Manifest, own_secrets: set[str]) -> list[str]:
        """Keys the workload's pods mount from Secrets it does not render itself and that exist
        without them (see engine.mounts)."""
        wanted = {n: k for n, k in mounted_secret_keys(m).items() if n not in own_secrets}
        if not wanted:
            return []
        ns = m["metadata"]["namespace"]
        secrets = {}
        for name in wanted:
            try:
                secrets[name] = self.kube.get("Secret", ns, name)
            except ApiError:
                secrets[name] = None  # cannot tell (e.g. no permission): let the kubelet decide
        return missing_keys(wanted, secrets)

    def close(self) -> None:
        self._requests.shutdown(wait=True)

    def _ensure_namespace(self, namespace: str, dry_run: bool, res: UnitResult) -> bool | None:
        """True when the namespace exists (creating it if needed), False when it does not and this
        is a dry run, None on an error (recorded in `res`)."""
        if namespace in self._namespaces_seen:
            return True
        try:
            if self.kube.get("Namespace", None, namespace) is None:
                if dry_run:
                    res.changes.append(Change(ObjectRef("Namespace", "", namespace), Action.CREATED, "would create"))
                    return False
                self.kube.create({"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}})
                res.changes.append(Change(ObjectRef("Namespace", "", namespace), Action.CREATED))
        except ApiError as exc:
            if not exc.conflict:  # 409 AlreadyExists: created meanwhile, fine
                res.fail(Cause.of_status(exc.status), f"cannot ensure namespace {namespace}: {exc.message}")
                return None
        self._namespaces_seen.add(namespace)
        return True

    def _write_inventory(self, inv: Inventory, res: UnitResult | None = None) -> bool:
        try:
            self.kube.apply(inv.manifest(), force=True)
        except ApiError as exc:
            if res is not None:
                res.fail(Cause.of_status(exc.status), f"cannot record the inventory {inv.name()}: {exc.message}")
            return False
        return True


def cause_of(exc: ApiError | ClusterUnreachable | OSError) -> Cause:
    """The cause of a request that failed: the API's answer, or no answer at all."""
    return Cause.of_status(exc.status) if isinstance(exc, ApiError) else Cause.UNREACHABLE


def unit_namespaces(plan: Plan, scope: Collection[str] | None = None) -> set[str]:
    """The namespaces of the plan's units (loaded or failed), within `scope` when given."""
    namespaces = {u.namespace for u in plan.units} | {u.namespace for u in plan.failed}
    return namespaces if scope is None else namespaces & set(scope)


def _hand_over(unit: Unit, refs: list[ObjectRef], claims: Claims | None) -> tuple[list[ObjectRef], list[Change]]:
    """Split `refs` into those still to prune and those another unit renders now (never pruned)."""
    if claims is None:
        return refs, []
    keep, handed = [], []
    for ref in refs:
        claimant = claims.claimant(ref)
        if claimant is not None and claimant != unit:
            handed.append(Change(ref, Action.SKIPPED, f"not pruned: {claimant.id} renders it now"))
        else:
            keep.append(ref)
    return keep, handed
