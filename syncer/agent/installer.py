"""Adopting a fetched revision as the desired state (dispatcher thread only): load and render it
(agent.revision), plan it against the revision installed before, and swap the new `Installed` in
as a whole. A unit that fails to load or render keeps its last good desired state; a unit gone
from Git is pruned only when the whole revision loaded and rendered without errors. Returns the
units whose desired state changed: the dispatcher queues them."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable

import structlog

from syncer.agent.cache import LiveCache
from syncer.agent.progress import RevisionProgress
from syncer.agent.reporting import config_error_event
from syncer.agent.revision import RevisionLoader
from syncer.agent.state import AgentOptions, Current, Installed
from syncer.agent.supervisor import Supervisor
from syncer.agent.unitstate import UnitBook
from syncer.cluster.events import Event
from syncer.diagnostics import Diagnostic
from syncer.engine.normalize import fingerprint
from syncer.engine.units_left_git import vanished_units
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.plan import Claims
from syncer.render.repo import Rendered, plan_repo
from syncer.repo.state import RepoState
from syncer.secrets.sops import redact_text
from syncer.source.git import Checkout
from syncer.source.refs import SourceError

log = structlog.get_logger("syncer.agent")


class Installer:
    def __init__(self, current: Current, loader: RevisionLoader, options: AgentOptions, *, metrics: Metrics,
                 cache: LiveCache, book: UnitBook, report: Callable[[Unit, Event], None],
                 progress: RevisionProgress, supervisor: Supervisor, loaded: threading.Event) -> None:
        self.current = current  # replaced here, read everywhere
        self.loader = loader
        self.options = options
        self.metrics = metrics
        self.cache = cache
        self.book = book
        self.report = report
        self.progress = progress
        self.supervisor = supervisor  # its `scrub` learns each secret value installed
        self.loaded = loaded  # set by the dispatcher once the first revision is installed
        self.checkout: Checkout | None = None
        self.fetch_error = ""
        self._secret_values: frozenset[str] = frozenset()  # plaintext of the encrypted files installed so far

    def ours(self, unit: Unit) -> bool:
        """A unit in our Git repository, or one our repository applied (another repository's units
        sharing the cluster are left alone)."""
        plan = self.current.plan
        if unit in plan.units:
            return True
        inv = self.cache.state.inventories.get(unit)
        return inv is not None and self.loaded.is_set() and plan.owns(inv.repository)

    def fetched(self, checkout: Checkout, seen_at: float) -> list[Unit]:
        """A fetch brought `checkout`: install it unless it is installed already; returns the units
        whose desired state changed (the dispatcher queues them, then sets `loaded`)."""
        self.fetch_error = ""
        self.book.set_refusal("")  # signed as required (again): each unit's state says its own
        self.metrics.fetch_ok()
        changed: list[Unit] = []
        same = self.checkout is not None and self.checkout.revision == checkout.revision
        if not same or not self.loaded.is_set():
            loaded = self.loader.load(checkout.root, checkout.revision, since=checkout.since,
                                      changed=checkout.changed)
            self.metrics.set_revision(checkout.revision)
            changed = self.install(loaded.state, loaded.rendered, checkout.revision)
            self.checkout = checkout
            log.info("revision loaded", revision=checkout.revision[:12], subject=checkout.subject,
                     units=len(loaded.rendered.units), changed=len(changed), errors=loaded.errors,
                     diagnostics=loaded.error_lines(),
                     parsed=loaded.parsed, reused=loaded.reused, ms=loaded.ms)
            plan = self.current.plan
            self.progress.installed(checkout.revision, seen_at, {
                u: plan.units[u].revision if u in plan.units else plan.revision for u in changed})
        return changed

    def fetch_failed(self, error: SourceError, source: str) -> None:
        self.fetch_error = str(error)
        self.metrics.fetch_error(error.kind)
        if error.kind == "unverified":  # not signed as the admin requires: every unit says so
            self.book.set_refusal(str(error))
        log.warning("source fetch failed; keeping the last good revision", source=source, error=str(error))

    def install_failed(self, checkout: Checkout, text: str) -> None:
        """The revision could not be installed: the last good one stays; the next fetch tries again."""
        self.fetch_error = f"revision {checkout.revision[:12]} could not be installed (the last good revision " \
                           f"stays): {text}"

    def install(self, state: RepoState, rendered: Rendered, revision: str) -> list[Unit]:
        """Adopt a new revision; returns the units whose desired state changed. A unit that fails to
        load or render keeps its last good desired state; a unit gone from Git is pruned only if the
        whole revision loaded and rendered without errors."""
        old = self.current.installed
        # a failed unit keeps its last good state: the values it was rendered from stay secret too
        self._secret_values = self._secret_values | state.secrets if state.secrets else self._secret_values
        self.supervisor.scrub = functools.partial(redact_text, secrets=self._secret_values)
        fresh = plan_repo(state, rendered, revision=revision, default_repository=self.options.repository,
                          previous=old.plan.units, tenancy=self.options.tenancy,
                          flower_memo=self.loader.flower_memo)
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
            self.book.set_config_errors(unit, errors)
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
        self.current.installed = Installed(dataclasses.replace(fresh, units=units, claims=claims), digests)
        # the units whose state this revision may change (a unit's state reads its desired state,
        # its config errors while it fails, and whether it is in Git); the status round publishes
        # every unit anyway: a commit to one file costs one unit's publishing, not every unit's
        moved = {u for u in units.keys() | old.plan.units.keys() if fresh.in_git(u) != old.plan.in_git(u)}
        for unit in dict.fromkeys([*changed, *fresh.failed, *old.plan.failed, *sorted(moved)]):
            self.book.publish(unit)
        return changed
