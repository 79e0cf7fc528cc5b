"""What one revision of a repository asks the engine to do: plain, frozen data.

The engine takes a `Plan`, not the loader's state: per unit its manifests, sync policy, source
file and revision; the units that failed to load or render (their last applied state stays);
which unit renders which object; the repository's name and whether units that left Git may be
pruned. `render.repo.plan_repo` builds one from a loaded and rendered repository; the agent keeps
one per installed revision. Importing this module imports no models and no client.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from syncer.identity import DEFAULT_REPOSITORY, Manifest, ObjectRef, Unit, selected
from syncer.ours import Ours


@dataclass(frozen=True)
class Policy:
    """How the engine treats one unit (flower-syncer.yaml, release.yaml or annotations)."""

    suspend: bool = False  # do not apply or heal it
    prune: bool = True  # delete its objects that left Git
    force_conflicts: bool = False  # take fields another applier owns
    allow_recreate: bool = False  # delete and recreate an object whose immutable field changed
    hold_for_runs: float | None = None  # seconds a restart waits for runs; None: the admin's default; 0: off
    hold_strict: bool = False  # hold also while the SuperLink's runs cannot be read (engine.holds)


@dataclass(frozen=True)
class NodeAuth:
    """The SuperNode keys a Federation's SuperLink admits, registered through its Control API once
    the unit's objects are applied (engine/nodekeys.py)."""

    address: str  # host:port of the Control API
    ca_secret: str  # Secret of the unit's namespace whose ca.crt the Control API's certificate chains to
    keys: tuple[tuple[str, bytes], ...] = ()  # (label, SubjectPublicKeyInfo PEM), in Git's order
    transport: Literal["grpc", "http"] = "http"  # gRPC before Flower 1.37, HTTPS POST from 1.37


@dataclass(frozen=True)
class ExpectedPool:
    """SuperNodes Git expects at a federation's SuperLink from one pool: a pool of the Federation
    itself, or a SuperNode chart release whose `supernode.superlink` names this SuperLink."""

    unit: str  # the unit id that provides them (the federation, or supernode/<ns>/<release>)
    pool: str  # the Federation's pool name, or the release's component ("supernode")
    expected: int | None  # SuperNodes it should connect; None: as many as its workload wants (DaemonSet)
    keys: frozenset[bytes] = frozenset()  # their public keys (stripped PEM) when Git knows them
    cluster: str = ""  # the cluster that applies the providing unit ("" for this agent's own)


@dataclass(frozen=True)
class FlowerTarget:
    """Where and how the agent reads a Federation's Flower-level health (SuperNodes connected, runs)
    from its SuperLink's Control API: the address and TLS key registration uses."""

    address: str  # host:port of the Control API
    transport: Literal["grpc", "http"]
    ca_secret: str  # Secret of the unit's namespace with ca.crt; "" for a plaintext (insecure) SuperLink
    pools: tuple[ExpectedPool, ...] = ()
    node_auth: bool = False  # the SuperLink admits only listed keys: nodes are told apart by key
    registered: frozenset[bytes] = frozenset()  # the keys flower-syncer registers there (stripped PEM)


@dataclass(frozen=True)
class UnitPlan:
    unit: Unit
    manifests: Sequence[Manifest]
    policy: Policy = Policy()
    source: str = ""  # the repo file that defines it
    revision: str = ""  # the revision its manifests were rendered from
    node_auth: NodeAuth | None = None
    object_refs: tuple[ObjectRef, ...] | None = None
    """The manifests' references, when the renderer had them already (see `refs`)."""
    key: bytes = field(default=b"", compare=False, repr=False)
    """The content key of everything it was made from (syncer.render.cachekey); b"": unknown, so
    never taken for a later revision's."""

    @property
    def refs(self) -> tuple[ObjectRef, ...]:
        return self.object_refs if self.object_refs is not None else refs_of(self.manifests)


def refs_of(manifests: Iterable[Manifest]) -> tuple[ObjectRef, ...]:
    return tuple(ObjectRef.of(m) for m in manifests)


@dataclass(frozen=True)
class Claims:
    """Which unit of the repository renders which object now, and the units whose wishes are
    unknown because they failed to load or render."""

    objects: Mapping[ObjectRef, Unit] = field(default_factory=dict)
    failed: frozenset[Unit] = frozenset()

    @classmethod
    def of(cls, units: Iterable[tuple[Unit, Iterable[Manifest]]], failed: Iterable[Unit] = ()) -> Claims:
        return cls.of_refs(((unit, refs_of(manifests)) for unit, manifests in units), failed)

    @classmethod
    def of_refs(cls, units: Iterable[tuple[Unit, Iterable[ObjectRef]]], failed: Iterable[Unit] = ()) -> Claims:
        """The same from references already made (a later unit's claim wins, as in `of`)."""
        return cls({ref: unit for unit, refs in units for ref in refs}, frozenset(failed))

    def claimant(self, ref: ObjectRef) -> Unit | None:
        return self.objects.get(ref)


@dataclass(frozen=True)
class Plan:
    units: Mapping[Unit, UnitPlan]
    """The units to sync (those selected, when selectors were given)."""
    repository: str = DEFAULT_REPOSITORY
    former_names: frozenset[str] = frozenset()
    """Earlier names of the repository (`renamedFrom`): what they recorded is ours."""
    revision: str = ""
    failed: frozenset[Unit] = frozenset()
    """Units in Git that did not load or render: never applied, never pruned."""
    errors: Mapping[Unit, str] = field(default_factory=dict)
    """Why a failed unit failed: its first configuration error, as `file:line: field: message`."""
    undecryptable: frozenset[Unit] = frozenset()
    """Failed units whose primary error is a file that cannot be decrypted (reason Decryption)."""
    defined: frozenset[Unit] = frozenset()
    """Every unit the repository defines, selected or not, loaded or not."""
    claims: Claims = Claims()
    """Every unit rendered, selected or not."""
    prune_allowed: bool = True
    """The repository loaded and rendered without errors: units that left it may be pruned."""
    repo_prune: bool = True
    """The repository's own prune policy (flower-syncer.yaml)."""
    selectors: tuple[str, ...] = ()
    namespaces: frozenset[str] = frozenset()
    """Every namespace the repository's units live in (what to read with namespaced credentials)."""
    source: str = ""
    """Where the repository comes from (identity.source_key), recorded on its inventories; "" when
    unknown (then any source's record under its names is taken as its own, as before sources were
    recorded). In a repository of several clusters, with the cluster (identity.cluster_source):
    another cluster's agent is another source, so two agents of one repository that share a
    Kubernetes cluster by mistake never take or prune each other's units."""
    layout_source: str = ""
    """The source without the cluster, as recorded before the repository was laid out by cluster:
    still ours (its units are taken over, or pruned when they left this cluster's folder)."""
    movable: frozenset[str] = frozenset()
    """Names of `repository`/`former_names` whose units the admin's policy lets this repository
    take over from another source."""
    legacy_names: frozenset[str] = frozenset()
    """Names earlier versions derived for this repository: units recorded under them that it still
    renders are taken over; none is pruned by that name."""
    allowed_namespaces: tuple[str, ...] | None = None
    """The effective guardrails' namespaces (shell patterns); None: any but `protected_namespaces`."""
    protected_namespaces: tuple[str, ...] = ()
    control_api_targets: tuple[str, ...] | None = None
    """Control API addresses (shell patterns) the repository's federations may register keys with
    (the effective guardrails' allowedControlApiTargets); None: no list (the federation's own
    SuperLink Service only). For the Control API client."""
    flower: Mapping[Unit, FlowerTarget] = field(default_factory=dict)
    """Per Federation unit that loaded: where its Flower-level health is read, and which pools and
    SuperNode releases of the loaded repository should connect to it (observe.flower_health)."""

    def namespace_allowed(self, namespace: str) -> bool:
        """Whether the repository may act in `namespace` at all (nothing is pruned elsewhere)."""
        if self.allowed_namespaces is None:
            return namespace not in self.protected_namespaces
        return any(fnmatch.fnmatchcase(namespace, p) for p in self.allowed_namespaces)

    @cached_property
    def ours(self) -> Ours:
        """Who the repository is, for what is ours in the cluster (the one definition: syncer.ours)."""
        return Ours(self.repository, self.former_names, self.legacy_names, self.source, self.layout_source,
                    self.movable)

    def owns_record(self, repository: str, source: str, *, in_git: bool = False) -> bool:
        """Whether what `repository` recorded from `source` (an inventory) is ours (Ours.owns_record)."""
        return self.ours.owns_record(repository, source, in_git=in_git)

    def foreign_source(self, repository: str, source: str) -> bool:
        """Recorded under one of our names by another source that we may not take over."""
        return self.ours.foreign_source(repository, source)

    @property
    def renders_anything(self) -> bool:
        return bool(self.claims.objects) or any(p.manifests for p in self.units.values())

    def owns(self, repository: str) -> bool:
        """Whether what `repository` recorded (on an inventory or an object label) is ours."""
        return self.ours.owns(repository)

    def in_git(self, unit: Unit) -> bool:
        """A unit the repository defines, loaded or not (whether or not it was selected)."""
        return unit in self.defined or unit in self.units or unit in self.failed

    def selected(self, unit: Unit) -> bool:
        return selected(unit, self.selectors)
