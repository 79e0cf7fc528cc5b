"""`load`: read a config repository, render it and select units - what validate, render, diff,
sync and status all start from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from syncer.cluster.whoami import agent_account
from syncer.diagnostics import Diagnostic
from syncer.identity import (
    DEFAULT_REPOSITORY,
    Manifest,
    ObjectRef,
    RepositoryIdentity,
    Unit,
    UnknownUnit,
    repository_identity,
    unit_matches,
)
from syncer.models.policy import AdminPolicy, RepositoryPolicy
from syncer.plan import Plan
from syncer.render.repo import Rendered, plan_repo, render_repo, select_units
from syncer.render.tenancy import Tenancy, apply_policy
from syncer.repo.loader import load_repo
from syncer.repo.state import LoadedUnit, RepoState
from syncer.secrets.keys import Decryption
from syncer.source.location import source_location
from syncer.source.refs import SourceError


class RepoNotFound(FileNotFoundError):
    """The config repository path is not a directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.detail = f"{path} is not a directory"
        super().__init__(self.detail)


@dataclass(frozen=True)
class Loaded:
    """A loaded and rendered repository, narrowed to the selected units."""

    state: RepoState
    rendered: Rendered
    selectors: tuple[str, ...] = ()
    root: Path | None = None  # where it was loaded from
    policy: RepositoryPolicy | None = None  # the admin's policy it was loaded under
    origin: tuple[str, str] | None = None
    """(source, sub-path) when `load` had to know it already (to choose the admin's policy entry)."""
    ref: str = ""
    """The ref it is synced as (`--ref`), part of its identity as of an agent's; "": the remote's
    default branch."""

    @cached_property
    def where(self) -> tuple[str, str] | None:
        """Where it comes from (source.location: its Git remote when it has one), read when first
        asked: `validate` and `render` never need it (GitPython and a `git` call)."""
        if self.origin is not None or self.root is None:
            return self.origin
        try:
            return source_location(str(self.root.resolve()))
        except SourceError:
            return None

    @cached_property
    def identity(self) -> RepositoryIdentity | None:
        """Who it is when flower-syncer.yaml names it not, as an agent syncing its origin at `ref`
        would derive it (identity.repository_identity); None when where it comes from is unknown."""
        return None if self.where is None else repository_identity(*self.where, self.ref)

    @property
    def default_repository(self) -> str:
        """The repository's name when flower-syncer.yaml sets none (derived from where it comes from)."""
        return DEFAULT_REPOSITORY if self.identity is None else self.identity.name

    @cached_property
    def tenancy(self) -> Tenancy:
        """Where it comes from (recorded on its inventories), and the admin's policy applied."""
        who = self.identity
        return Tenancy(policy=self.policy) if who is None else Tenancy(who.source, self.policy, who.legacy)

    @property
    def repository(self) -> str:
        return self.state.settings.name or self.default_repository

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return sorted(self.state.diagnostics + self.rendered.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def units(self) -> dict[Unit, Sequence[Manifest]]:
        return self.rendered.units

    def selected_diagnostics(self) -> list[Diagnostic]:
        """Diagnostics of the selected units, and those of no unit (repository settings)."""
        if not self.selectors:
            return self.diagnostics
        chosen = {u.id for u in self.rendered.units} | {u.id for u in self.rendered.failed
                                                         if any(unit_matches(u, s) for s in self.selectors)}
        return [d for d in self.diagnostics if not d.unit or d.unit in chosen]

    def plan(self, revision: str = "") -> Plan:
        return plan_repo(self.state, self.rendered, selectors=self.selectors, revision=revision,
                         default_repository=self.default_repository, tenancy=self.tenancy)

    def manifests(self) -> list[Manifest]:
        return self.rendered.manifests()


def load(root: Path, selectors: Sequence[str] = (), namespace: str | None = None,
         decryption: Decryption | None = None, policy: RepositoryPolicy | None = None,
         admin: AdminPolicy | None = None, cluster: str | None = None, ref: str = "") -> Loaded:
    """Load and render `root`, selecting units by `selectors` and, when given, `namespace`.
    `ref`: the ref it is synced as, part of its identity (see Loaded.identity).
    `cluster`: the cluster of a repository of several whose units to load (syncer.repo.clusters);
    None: every cluster's (each rendered on its own: objects of two clusters never clash).
    Raises RepoNotFound, or UnknownUnit for a selector that matches no unit of the repository
    (loaded or failed to load) or a namespace with none."""
    if not root.is_dir():
        raise RepoNotFound(root)
    origin = None
    if policy is None and admin is not None:  # the entry for where this repository comes from
        try:
            origin = source_location(str(root.resolve()))
        except SourceError:
            origin = None
        policy = admin.for_source(origin[0], ref, origin[1]) if origin is not None else admin.default
    state = apply_policy(load_repo(root, decryption, cluster=cluster,
                                   require_encryption=policy is not None and policy.requireEncryption),
                         Tenancy(policy=policy))
    _, unmatched = select_units(state.units, list(selectors))
    known = {u.unit for u in state.units} | state.failed
    for sel in unmatched:
        if not any(unit_matches(u, sel) for u in known):
            raise UnknownUnit(sel)
    if namespace is not None:  # kubectl's -n: the selected units of that namespace, by full id
        selectors = [u.id for u in sorted(known) if u.namespace == namespace
                     and (not selectors or any(unit_matches(u, s) for s in selectors))]
        if not selectors:
            raise UnknownUnit(f"namespace {namespace}")
    return Loaded(state, _render_clusters(state, list(selectors)), tuple(selectors), root, policy, origin, ref)


def _render_clusters(state: RepoState, selectors: list[str]) -> Rendered:
    """render_repo, once per cluster when a load of the whole repository holds several clusters'
    units (two clusters may render objects of the same name)."""
    agent = agent_account()
    groups: dict[str, list[LoadedUnit]] = {}
    for loaded in state.units:
        groups.setdefault(loaded.cluster, []).append(loaded)
    if len(groups) <= 1:
        return render_repo(state, selectors, agent=agent)
    merged = Rendered(failed=set(state.failed))
    claims: dict[ObjectRef, Unit] = {}
    for units in groups.values():
        part = render_repo(replace(state, units=units, failed=set()), selectors, agent=agent)
        merged.units.update(part.units)
        merged.diagnostics.extend(part.diagnostics)
        merged.failed |= part.failed
        merged.unselected.update(part.unselected)
        merged.refs.update(part.refs)
        claims.update(part.claims)
    merged.claims = claims
    return merged


@dataclass(frozen=True)
class ValidateResult:
    loaded: Loaded
    strict: bool = False

    @property
    def valid(self) -> bool:
        return not self.loaded.errors and not (self.strict and self.loaded.warnings)

    def to_dict(self) -> dict[str, Any]:
        loaded = self.loaded
        return {
            "valid": self.valid,
            "errors": len(loaded.errors),
            "warnings": len(loaded.warnings),
            "files": loaded.state.files,
            "units": [u.id for u in sorted(loaded.units)],
            "failedUnits": sorted(u.id for u in loaded.rendered.failed),
            "diagnostics": [d.to_dict() for d in loaded.diagnostics],
        }


def validate(root: Path, *, strict: bool = False, decryption: Decryption | None = None) -> ValidateResult:
    """Check every file of the repository; `strict` makes warnings count as errors. Without
    decryption keys, SOPS-encrypted values are left unchecked (with a warning)."""
    return ValidateResult(load(root, decryption=decryption), strict)
