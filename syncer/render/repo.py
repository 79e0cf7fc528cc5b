"""Render every loaded unit of a repo, check what no single unit can (that two units do not render
the same object), and turn the result into the engine's Plan.

Given a `RenderCache` (the agent keeps one, beside its loader cache), a unit whose content key
(`syncer.render.cachekey`: what it was loaded from, the settings, the agent's account, Flower's
release facts) is the one rendered last time is not rendered or checked again: its manifests are
the same object as before, kept packed (`syncer.render.packed_manifests`) for as long as the cache holds
them, and `plan_repo` keeps its UnitPlan."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from syncer.diagnostics import DECRYPTION, Diagnostic, primary
from syncer.identity import DEFAULT_REPOSITORY, Manifest, ObjectRef, Unit, cluster_source, unit_matches
from syncer.models.canary import CanarySettings
from syncer.models.durations import OFF, parse_duration
from syncer.models.federation import Federation
from syncer.models.federation_spec import ANN_TLS_SECRET
from syncer.models.settings import PROTECTED_NAMESPACES, Guardrails, SyncPolicy
from syncer.ours import secret_is_own_or_listed
from syncer.plan import Claims, NodeAuth, Plan, Policy, UnitPlan, refs_of
from syncer.render.cachekey import Key, context_key, render_key, unit_key
from syncer.render.canary import canary_target, with_canary
from syncer.render.common import RenderContext, sort_manifests
from syncer.render.control_targets import control_target_diagnostics
from syncer.render.encrypted_values import seal
from syncer.render.federation import render_federation
from syncer.render.flower_targets import FlowerMemo, flower_targets
from syncer.render.guardrails import check_guardrails
from syncer.render.packed_manifests import pack
from syncer.render.podrules import AgentAccount
from syncer.render.secret import render_secret
from syncer.render.supernode import render_supernode
from syncer.render.tenancy import Tenancy
from syncer.repo.encrypted import redact_values
from syncer.repo.state import LoadedUnit, RepoState


@dataclass
class Rendered:
    units: dict[Unit, Sequence[Manifest]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    failed: set[Unit] = field(default_factory=set)
    unselected: dict[Unit, Sequence[Manifest]] = field(default_factory=dict)
    """Units rendered cleanly but left out by the selectors: they still claim their objects."""
    refs: dict[Unit, tuple[ObjectRef, ...]] = field(default_factory=dict)
    """The references of each unit's manifests (units and unselected), made once per render."""
    claims: Mapping[ObjectRef, Unit] = field(default_factory=dict)
    """Which unit renders each object of `units` and `unselected`. Never changed once handed out:
    a RenderCache copies it before it changes it for the next render."""
    keys: dict[Unit, Key] = field(default_factory=dict)
    """The content key of each unit's render (render.cachekey), given a RenderCache: `plan_repo`
    keeps a UnitPlan made with the same key."""

    @property
    def clean(self) -> bool:
        """No unit failed to render (e.g. two units render the same object)."""
        return not any(d.severity == "error" for d in self.diagnostics)

    def manifests(self) -> list[Manifest]:
        """All objects of all units, in apply order."""
        return sort_manifests(m for ms in self.units.values() for m in ms)


@dataclass(frozen=True)
class _Done:
    loaded: LoadedUnit  # the latest unit with this content (for the clash messages)
    context: Key  # what the render depended on besides the unit (cachekey.context_key)
    key: Key  # cachekey.render_key of the unit's key and `context`
    manifests: Sequence[Manifest]
    crossed: list[Diagnostic]
    object_refs: tuple[ObjectRef, ...]  # one per manifest (the claims)


class _Owners:
    """Which rendered units render each object, kept up to date from one render to the next by
    adding the units rendered anew and removing those gone: a one-file commit to a repository of
    thousands of units touches its own unit's objects, not all of them. Only units that claim objects
    (rendered, within their guardrails) are entered.

    Invariant, after each `update(claiming)`: `entered` is `claiming`; `by_ref[ref]` is the entered
    units whose manifests hold `ref` (one, or a list while several do); `clashing` is the refs of
    those lists; `claims[ref]` is the last entered of them. That is what a fresh render computes:
    test_load_cache.py's test_claims_and_clashes_follow_each_revision_from_a_warm_cache compares
    the two at every revision of a sequence."""

    def __init__(self) -> None:
        # one _Done per object, or a list of them while two or more render it (a clash)
        self.by_ref: dict[ObjectRef, _Done | list[_Done]] = {}
        self.clashing: set[ObjectRef] = set()
        self.entered: dict[int, _Done] = {}  # by id of the _Done (held, so ids stay unique)
        self.claims: dict[ObjectRef, Unit] = {}  # one claimant per object (the last entered, in a clash)
        self._claims_shared = False  # handed out: copy before changing it

    def claimants(self, ref: ObjectRef) -> list[_Done]:
        owners = self.by_ref[ref]
        return owners if isinstance(owners, list) else [owners]

    def update(self, claiming: dict[int, _Done]) -> None:
        """Make the entries exactly `claiming` (kept: the caller hands it over)."""
        gone = [d for key, d in self.entered.items() if key not in claiming]
        new = [d for key, d in claiming.items() if key not in self.entered]
        if not gone and not new:
            return
        if self._claims_shared:
            self.claims, self._claims_shared = dict(self.claims), False
        for done in gone:
            for ref in dict.fromkeys(done.object_refs):
                owners = self.by_ref[ref]
                if not isinstance(owners, list):
                    del self.by_ref[ref], self.claims[ref]
                    continue
                owners.remove(done)
                self.claims[ref] = owners[-1].loaded.unit
                if len(owners) == 1:
                    self.by_ref[ref] = owners[0]
                    self.clashing.discard(ref)
        for done in new:
            unit = done.loaded.unit
            for ref in dict.fromkeys(done.object_refs):
                held = self.by_ref.get(ref)
                if held is None:
                    self.by_ref[ref] = done
                elif isinstance(held, list):
                    held.append(done)
                else:
                    self.by_ref[ref] = [held, done]
                    self.clashing.add(ref)
                self.claims[ref] = unit
        self.entered = claiming

    def shared_claims(self, excluded: set[Unit]) -> dict[ObjectRef, Unit]:
        """The claims of the entered units not `excluded` (units that clash), for a Rendered: the
        same dict as long as nothing changes, never changed once handed out."""
        if excluded:
            return {ref: unit for ref, unit in self.claims.items() if unit not in excluded}
        self._claims_shared = True
        return self.claims


class RenderCache:
    """What each loaded unit rendered to in the previous render, by its content key (the unit's
    and the render's context: render.cachekey). Keeps only what the latest render used. Rendering
    is pure, and nobody changes a rendered manifest in place (the engine copies what it stamps), so
    handing back the same list is safe."""

    def __init__(self) -> None:
        self._done: dict[Key, _Done] = {}  # by cachekey.unit_key
        self._owners = _Owners()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._done)

    def _get(self, loaded: LoadedUnit, unit: Key, context: Key) -> _Done | None:
        done = self._done.get(unit)
        if done is None or done.context != context:
            return None
        self.hits += 1
        # the same content loaded anew (e.g. a file read again): the entry holds the new unit, the
        # claims enter it as a new one, and the old LoadedUnit is not kept alive by the cache
        return done if done.loaded is loaded else dataclasses.replace(done, loaded=loaded)


def render_unit(loaded: LoadedUnit) -> list[Manifest]:
    ctx = RenderContext(unit=loaded.unit, source=loaded.source)
    if isinstance(loaded.model, Federation):
        manifests = render_federation(loaded.model, ctx)
    else:
        manifests = render_supernode(loaded.model, loaded.unit.name, ctx)
    if loaded.sealed:  # encrypted values reach pods through a Secret only
        manifests = seal(manifests, loaded.sealed, loaded.seal_key, ctx)
    canary = _canary(loaded)
    if canary is not None:  # after `seal`: the digest is of the pod template applied, never of plain values
        manifests = [with_canary(m, canary, pool) if (pool := canary_target(m)) else m for m in manifests]
    return sort_manifests([*manifests, *(render_secret(s, RenderContext(unit=loaded.unit, source=file))
                                         for file, s in loaded.secrets)])


def _canary(loaded: LoadedUnit) -> CanarySettings | None:
    """Which SuperNodes take a change first (docs/rollouts.md): a Federation's annotations, a
    release's release.yaml."""
    if isinstance(loaded.model, Federation):
        return loaded.model.canary()
    if loaded.canary is None:
        return None
    count, gate, deadline = loaded.canary
    return CanarySettings(count, {}, gate, deadline)


def select_units(units: list[LoadedUnit], selectors: list[str]) -> tuple[list[LoadedUnit], list[str]]:
    """Units matching any selector: `NAME`, `KIND/NAME` or `KIND/NAMESPACE/NAME`.

    Returns the matches and the selectors that matched nothing."""
    if not selectors:
        return units, []
    chosen: list[LoadedUnit] = []
    unmatched = []
    for sel in selectors:
        hits = [u for u in units if unit_matches(u.unit, sel)]
        if not hits:
            unmatched.append(sel)
        chosen.extend(h for h in hits if h not in chosen)
    return chosen, unmatched


@contextmanager
def _no_gc_pauses() -> Iterator[None]:
    """Rendering allocates many small dicts and lists but never a reference cycle, so the cyclic
    garbage collector only costs time here (about two thirds of it); refcounting frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def render_repo(state: RepoState, selectors: list[str] | None = None, cache: RenderCache | None = None,
                agent: AgentAccount | None = None, *, control_targets: Sequence[str] | None = None) -> Rendered:
    """`agent`: the agent's own ServiceAccount, which no pod may run as (unknown: the chart's name
    in every namespace; part of the cache's key, as the settings are). `control_targets`: the Control API
    targets besides each federation's own SuperLink Service where SuperNode keys may be registered
    (render.control_targets); by default the effective guardrails' allowedControlApiTargets (the
    admin's policy narrows them: render.tenancy)."""
    with _no_gc_pauses():
        return _render_repo(state, selectors, cache, agent, control_targets)


def _foreign_tls_secret(loaded: LoadedUnit, manifests: Sequence[Manifest],
                        rails: Guardrails) -> tuple[str, Diagnostic] | None:
    """A federation's TLS Secret named by annotation that is neither the unit's own nor listed by
    the admin (syncer.ours): an annotation never makes another application's Secret the unit's."""
    fed = loaded.model
    if not isinstance(fed, Federation) or fed.spec.insecure or ANN_TLS_SECRET not in fed.metadata.annotations:
        return None
    name = fed.tls_secret()
    # the Secrets the unit renders itself: a Certificate it renders proves nothing here, since the
    # annotation names its secretName too (cert-manager would overwrite another application's Secret)
    rendered = [m for m in manifests if m.get("kind") == "Secret"]
    if secret_is_own_or_listed(name, rendered, rails.allowedSecrets):
        return None
    message = (f"the SuperLink's TLS Secret {name!r} is not this federation's own (it renders no such Secret and no "
               "Certificate it renders writes it) and guardrails.allowedSecrets does not list it: its pods would "
               "read another application's Secret, so nothing of this federation is applied")
    hint = (f"keep the Secret in the repository next to the federation (e.g. a SOPS-encrypted secrets.yaml), let "
            f"cert-manager write it (an issuer annotation, without {ANN_TLS_SECRET}), or list {name!r} in "
            "guardrails.allowedSecrets in flower-syncer.yaml (under an admin policy, the admin's list must allow it)")
    return name, Diagnostic(loaded.source, loaded.line, 1, f"metadata.annotations.{ANN_TLS_SECRET}", message, hint,
                            unit=loaded.unit.id)


def _render(loaded: LoadedUnit, rails: Guardrails, cache: RenderCache | None, used: dict[Key, _Done],
            agent: AgentAccount | None = None, context: Key = b"") -> _Done:
    unit = unit_key(loaded) if cache is not None else b""
    done = cache._get(loaded, unit, context) if cache is not None else None
    if done is None:
        manifests = render_unit(loaded)
        foreign = _foreign_tls_secret(loaded, manifests, rails)
        crossed = check_guardrails(loaded.unit, manifests, rails, loaded.source, loaded.line, agent=agent,
                                   extra_secrets=(foreign[0],) if foreign else ())  # said once, below
        if foreign is not None:
            crossed.insert(0, foreign[1])
        # kept across revisions by the cache (the agent): compact (see syncer.render.packed_manifests)
        done = _Done(loaded, context, render_key(unit, context) if cache is not None else b"",
                     pack(manifests) if cache is not None else manifests, crossed, refs_of(manifests))
    if cache is not None:
        used[unit] = done
    return done


def _render_repo(state: RepoState, selectors: list[str] | None, cache: RenderCache | None,
                 agent: AgentAccount | None, control_targets: Sequence[str] | None = None) -> Rendered:
    """Every unit is rendered, selected or not: a clash with an unselected unit must still fail the
    selected one, and the engine must know every object some unit claims."""
    result = Rendered(failed=set(state.failed))
    if control_targets is None:
        control_targets = state.settings.guardrails.allowedControlApiTargets or ()
    refused, refused_units = control_target_diagnostics(state, control_targets)
    result.diagnostics.extend(refused)
    chosen = {u.unit for u in select_units(state.units, selectors or [])[0]}
    rendered: dict[Unit, tuple[LoadedUnit, Sequence[Manifest]]] = {}
    claiming: dict[int, _Done] = {}
    rails = state.settings.guardrails
    used: dict[Key, _Done] = {}
    context = b""
    if cache is not None:
        cache.hits = 0
        context = context_key(state.settings, agent)
    for loaded in state.units:
        if loaded.unit in refused_units:  # nothing of it is applied, and it claims nothing
            result.failed.add(loaded.unit)
            continue
        done = _render(loaded, rails, cache, used, agent, context)
        if done.crossed:  # nothing of it is applied, and it claims nothing
            result.diagnostics.extend(done.crossed)
            result.failed.add(loaded.unit)
            continue
        rendered[loaded.unit] = (loaded, done.manifests)
        result.refs[loaded.unit] = done.object_refs
        if done.key:
            result.keys[loaded.unit] = done.key
        claiming[id(done)] = done
    owners = cache._owners if cache is not None else _Owners()
    owners.update(claiming)
    if cache is not None:
        cache._done = used
    # Two units rendering the same object: both fail (neither may take the other's object, and
    # which one came first is not something Git can tell us). Each names the other.
    clashes: dict[Unit, tuple[LoadedUnit, list[str], dict[Unit, LoadedUnit]]] = {}
    for ref in sorted(owners.clashing):
        claimants = [d.loaded for d in owners.claimants(ref)]
        for loaded in claimants:
            _, refs, others = clashes.setdefault(loaded.unit, (loaded, [], {}))
            refs.append(str(ref))
            others.update((o.unit, o) for o in claimants if o is not loaded)
    for unit, (loaded, refs, others) in clashes.items():
        names = ", ".join(f"{o.unit.kind} {o.unit.name!r} ({o.source})" for _, o in sorted(others.items()))
        more = f" and {len(refs) - 1} more object{'s' if len(refs) > 2 else ''}" if len(refs) > 1 else ""
        result.diagnostics.append(Diagnostic(
            loaded.source, loaded.line, 1, "",
            f"{unit.kind} {unit.name!r} renders {sorted(refs)[0]}{more} that {names} renders too; "
            "none of them is applied until only one does",
            "rename one of them (e.g. fullnameOverride or the federation name), or move one to another namespace",
            unit=unit.id))
        result.failed.add(unit)
    for unit, (_, manifests) in rendered.items():
        if unit in result.failed:
            result.refs.pop(unit, None)
            result.keys.pop(unit, None)
            continue
        if unit in chosen:
            result.units[unit] = manifests
        else:
            result.unselected[unit] = manifests
    result.claims = owners.shared_claims({u for u in rendered if u in result.failed})
    # a guardrail or render message may quote a rendered value, and a value may be a decrypted one
    result.diagnostics[:] = redact_values(result.diagnostics, state.secrets)
    result.diagnostics.sort()
    return result


def policy_of(policy: SyncPolicy) -> Policy:
    hold = policy.holdForRuns
    return Policy(suspend=policy.suspend, prune=policy.prune, force_conflicts=policy.forceConflicts,
                  allow_recreate=policy.allowRecreate,
                  hold_for_runs=None if hold is None else 0.0 if hold.strip().lower() in OFF else parse_duration(hold),
                  hold_strict=policy.holdStrict)


def node_auth_of(loaded: LoadedUnit) -> NodeAuth | None:
    """What a Federation with supernode-auth asks to be registered with its SuperLink."""
    fed = loaded.model
    if not isinstance(fed, Federation) or not fed.supernode_auth or fed.spec.insecure:
        return None
    return NodeAuth(fed.control_api_address(loaded.unit.namespace), fed.ca_secret_name(),
                    tuple((k.label, k.pem) for k in fed.admitted_keys()), fed.control_api()[0])


def plan_repo(state: RepoState, rendered: Rendered, *, selectors: Sequence[str] = (), revision: str = "",
              default_repository: str = DEFAULT_REPOSITORY, previous: Mapping[Unit, UnitPlan] | None = None,
              tenancy: Tenancy | None = None, flower_memo: FlowerMemo | None = None) -> Plan:
    """The engine's plan for a loaded and rendered repository (`rendered` made with the same
    selectors). `default_repository` names it when flower-syncer.yaml does not (see
    identity.derived_repository_name). A unit rendered with the content key of its UnitPlan in
    `previous` (render.cachekey: `rendered` made with a RenderCache) keeps that UnitPlan, revision
    included: nothing of it changed. `tenancy` says where the
    repository comes from and what the admin lets it take over (render.tenancy). `flower_memo`:
    the Flower-level health targets worked out for the previous revision (FlowerMemo)."""
    loaded = {u.unit: u for u in state.units}
    previous = previous or {}

    def unit_plan(unit: Unit, manifests: Sequence[Manifest]) -> UnitPlan:
        before = previous.get(unit)
        key = rendered.keys.get(unit, b"")
        if before is not None and key and before.key == key:
            return before
        return UnitPlan(unit, manifests, policy_of(loaded[unit].policy), loaded[unit].source, revision,
                        node_auth_of(loaded[unit]), rendered.refs.get(unit), key)

    failed = frozenset(rendered.failed | state.failed)
    errors: dict[Unit, str] = {}
    undecryptable: set[Unit] = set()
    by_id = {u.id: u for u in failed}
    of_unit: dict[str, list[Diagnostic]] = {}
    for d in state.diagnostics + rendered.diagnostics:
        if d.unit in by_id:
            of_unit.setdefault(d.unit, []).append(d)
    for unit_id, diagnostics in sorted(of_unit.items()):  # the primary error of each: the one that names the cause
        first = primary(diagnostics)
        if first is not None:
            errors[by_id[unit_id]] = first.render().splitlines()[0]
            if first.code == DECRYPTION:
                undecryptable.add(by_id[unit_id])
    defined = frozenset(loaded) | failed
    repository = state.settings.name or default_repository
    former = frozenset(state.settings.renamedFrom) - {repository}
    tenancy = tenancy or Tenancy()
    policy = tenancy.policy
    rails = state.settings.guardrails
    return Plan(
        units={unit: unit_plan(unit, manifests) for unit, manifests in rendered.units.items()},
        repository=repository,
        former_names=former,
        revision=revision,
        failed=failed,
        errors=errors,
        undecryptable=frozenset(undecryptable),
        defined=defined,
        claims=Claims(rendered.claims, failed),
        prune_allowed=state.clean and rendered.clean,
        repo_prune=state.settings.policy.prune,
        selectors=tuple(selectors),
        namespaces=frozenset({u.namespace for u in defined} | {state.settings.defaultNamespace}),
        source=cluster_source(tenancy.source, state.cluster or "") if state.clusters else tenancy.source,
        layout_source=tenancy.source if state.clusters and state.cluster else "",
        movable=frozenset(n for n in {repository, *former} if policy is not None and policy.may_take_over(n)),
        legacy_names=tenancy.legacy_names - {repository, *former},
        allowed_namespaces=None if rails.allowedNamespaces is None else tuple(rails.allowedNamespaces),
        protected_namespaces=PROTECTED_NAMESPACES,
        control_api_targets=None if rails.allowedControlApiTargets is None else tuple(rails.allowedControlApiTargets),
        flower=flower_targets((u for u in state.units if u.unit not in failed), rails.allowedControlApiTargets,
                              elsewhere=state.elsewhere, memo=flower_memo),
    )
