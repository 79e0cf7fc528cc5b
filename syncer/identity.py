"""The shared words of flower-syncer: units, object references, the labels and annotations that
carry them, apply order and selectors. A leaf: it imports nothing of ours, and every layer may
import it (models, render, engine, cluster adapters, agent, observe, the CLI).
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Manifest = dict[str, Any]
"""A Kubernetes object as plain JSON-like data."""

# -- labels and annotations ------------------------------------------------------------------------

MANAGED_BY = "flower-syncer"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_POOL = "flower.flwr.ai/pool"  # the flower-operator's pool label, on a federation's pool workloads
LABEL_UNIT = "flower-syncer.io/unit"
LABEL_UNIT_KIND = "flower-syncer.io/unit-kind"
LABEL_REPOSITORY = "flower-syncer.io/repository"  # which config repository applied the unit
LABEL_INVENTORY = "flower-syncer.io/inventory"
LABEL_SOURCE_RECORD = "flower-syncer.io/source-record"  # the revision a repository was last checked at

ANN_SOURCE = "flower-syncer.io/source"  # the repo file an object was rendered from
ANN_PRUNE = "flower-syncer.io/prune"  # "disabled": never pruned
ANN_COPY_FROM = "flower-syncer.io/copy-from"  # a Secret filled from another Secret at sync time
ANN_COPY_KEYS = "flower-syncer.io/copy-keys"
ANN_SUSPENDED = "flower-syncer.io/suspended"  # set by `flower-syncer suspend`, kept across syncs
ANN_REQUESTED_AT = "flower-syncer.io/requestedAt"  # on a FlowerUnit: a reconcile request (agent.reconcile_request)
ANN_RELEASE_HOLD = "flower-syncer.io/release-hold"  # on a FlowerUnit: RFC 3339 time; holds begun by then go ahead
ANN_APPLIED_HASH = "flower-syncer.io/applied-hash"  # fingerprint of the desired object last applied
# On a Federation: where its SuperLink keeps its state (`persistent` or `memory`; unset: persistent for
# a new SuperLink, see syncer.models.superlink_state). On the SuperLink's StatefulSet: what it runs
# with, `persistent`, `memory` or `default` (persistent unless it already ran in memory: the engine
# keeps such a SuperLink in memory, engine.superlink_state).
ANN_SUPERLINK_STATE = "flower-syncer.io/superlink-state"
SUPERLINK_STATE_VOLUME = "superlink-state"  # the claim template (and volume) of a SuperLink's state
SUPERLINK_STATE_DIR = "/app/state"  # where it is mounted; the SQLite file is SUPERLINK_STATE_DIR/state.db

# Canary pools (docs/rollouts.md): on a Federation, how many SuperNodes of each pool take a change
# first ("1", or "gpu=1, cpu=2"), how long they must stay healthy (`canary-gate`) and by when
# (`canary-deadline`); on a pool's StatefulSet or DaemonSet, the pool's own count and both times in
# seconds, which the engine reads (engine.canary) to set the StatefulSet's partition, or the
# DaemonSet's `OnDelete` strategy while its canary nodes take the change.
ANN_CANARY = "flower-syncer.io/canary"
ANN_CANARY_GATE = "flower-syncer.io/canary-gate"
ANN_CANARY_DEADLINE = "flower-syncer.io/canary-deadline"
ANN_CANARY_TEMPLATE = "flower-syncer.io/canary-template"  # on a canary pool's workload: its pod template's digest
ANN_CANARY_NODES = "flower-syncer.io/canary-nodes"  # on a DaemonSet in a canary stage: the canary's nodes
ANN_CANARY_FROM = "flower-syncer.io/canary-from"  # on a Deployment in a canary stage: the hashes it started over

DEFAULT_REPOSITORY = "default"  # only for callers that name no source (tests, benchmarks)


def derived_repository_name(source: str, subpath: str = "", ref: str = "") -> str:
    """The identity of a repository that sets no `name`: readable, label-safe and unique per source
    (`source`: its remote URL without credentials, or its absolute local path; `subpath`: the
    folder of the config inside it; `ref`: the branch, tag or commit synced, when one is named),
    e.g. `flower-config-3fa9c2d1e0`. Two repositories without a name never share one by accident,
    nor do two checkouts of one origin on different branches (staging and prod). Without a ref
    the name is the one flower-syncer derived before refs were part of it (see
    `source_key` and syncer.source.location.source_location)."""
    key = f"{source}\0{subpath.strip('/')}" + (f"\0{ref}" if ref else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    parts = [p for p in re.split(r"[/:@]", source.rstrip("/")) if p and p not in (".", "..")]
    base = parts[-1].removesuffix(".git") if parts else ""
    base = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:40].strip("-")
    return f"{base}-{digest}" if base else digest


def source_key(source: str, subpath: str = "", ref: str = "") -> str:
    """Where a repository's units come from, as recorded on their inventories so that another
    source cannot take them over by claiming the same `name`: `source` (URL without credentials,
    or local path), `#ref` when a ref is named, `//subpath` when the config is in a sub-folder."""
    sub = subpath.strip("/")
    return source + (f"#{ref}" if ref else "") + (f"//{sub}" if sub else "")


@dataclass(frozen=True)
class RepositoryIdentity:
    """Who a repository without `name` is, from where it comes from and the ref synced: its
    derived name, the source recorded on its inventories, and the name derived before refs were
    part of names (a legacy name, when a ref is named). The agent and the CLI both take it from
    here (see `repository_identity`), so the same source and ref are the same repository."""

    name: str
    source: str
    legacy: frozenset[str] = frozenset()  # the Tenancy's legacy_names


def repository_identity(source: str, subpath: str = "", ref: str = "") -> RepositoryIdentity:
    """The identity of the repository at `source` (and `subpath`) synced at `ref` ("": the
    remote's default branch, the identity of every release before refs were named)."""
    name = derived_repository_name(source, subpath, ref)
    return RepositoryIdentity(name, source_key(source, subpath, ref),
                              frozenset({derived_repository_name(source, subpath)}) - {name})


def cluster_source(source: str, cluster: str) -> str:
    """The source of one cluster's part of a repository laid out by cluster (repo.clusters)."""
    return f"{source}::cluster={cluster}" if source and cluster else source


MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
INVENTORY_SELECTOR = f"{LABEL_INVENTORY}=true,{MANAGED_SELECTOR}"

# Dependencies first: a pod must find its ServiceAccount, Secrets and Services when it starts.
APPLY_ORDER = {
    "Namespace": 0,
    "ServiceAccount": 1,
    "Certificate": 2,  # cert-manager.io/v1: cert-manager writes its Secret
    "Secret": 2,
    "ConfigMap": 3,
    "Service": 4,
    "NetworkPolicy": 5,
    "Deployment": 6,
    "StatefulSet": 6,
    "DaemonSet": 6,
}


def apply_level(kind: str) -> int:
    """Where `kind` comes in APPLY_ORDER; a kind it does not name comes last."""
    return APPLY_ORDER.get(kind, 9)

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
"""The kinds flower-syncer applies that run pods (a pod template)."""
OPTIONAL_KINDS = ("Certificate",)
"""Kinds of an API that may not be installed (a CRD): applied and pruned, but not listed or watched
(a missing API would stop every sync); their live objects are read one by one when needed."""
MANAGED_KINDS = tuple(k for k in APPLY_ORDER if k != "Namespace" and k not in OPTIONAL_KINDS)
"""The kinds flower-syncer applies into a unit's namespace, and lists, watches and prunes."""


def _cached_hash(obj: object, key: tuple[str, ...]) -> None:
    """Units and object references are dict and set keys everywhere, thousands per revision: a
    frozen dataclass's own __hash__ builds the tuple of its fields on every call, which made each
    lookup several times slower; hashed once here, at creation (they are immutable)."""
    object.__setattr__(obj, "_hash", hash(key))


# -- units -------------------------------------------------------------------------------------------

UnitKind = Literal["federation", "supernode"]
UNIT_KINDS: tuple[UnitKind, ...] = get_args(UnitKind)


@dataclass(frozen=True, order=True, slots=True)
class Unit:
    """What flower-syncer applies and prunes as one: a federation or a SuperNode release."""

    kind: UnitKind
    namespace: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)  # see _cached_hash

    def __post_init__(self) -> None:
        _cached_hash(self, (self.kind, self.namespace, self.name))

    def __hash__(self) -> int:
        return self._hash

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    def labels(self) -> dict[str, str]:
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_UNIT: self.name, LABEL_UNIT_KIND: self.kind}

    @classmethod
    def parse(cls, unit_id: str) -> Unit:
        """The Unit of an id `kind/namespace/name`. Raises ValueError."""
        parts = unit_id.split("/", 2)
        if len(parts) == 3 and all(parts):
            kind = unit_kind(parts[0])
            if kind is not None:
                return cls(kind, parts[1], parts[2])
        raise ValueError(f"not a unit id (kind/namespace/name, kind federation or supernode): {unit_id!r}")

    @classmethod
    def from_labels(cls, namespace: str, labels: Mapping[str, str] | None) -> Unit | None:
        """The unit an object's labels name, or None when they name none."""
        labels = labels or {}
        kind, name = unit_kind(labels.get(LABEL_UNIT_KIND)), labels.get(LABEL_UNIT)
        if kind is None or not name or not namespace:
            return None
        return cls(kind, namespace, name)


def unit_kind(value: object) -> UnitKind | None:
    """`value` as a unit kind, or None when it is not one."""
    for kind in UNIT_KINDS:
        if value == kind:
            return kind
    return None


def unit_matches(unit: Unit, selector: str) -> bool:
    """A selector is `NAME`, `KIND/NAME` or `KIND/NAMESPACE/NAME`."""
    parts = selector.split("/")
    if len(parts) == 1:
        return unit.name == parts[0]
    if len(parts) == 2:
        return (unit.kind, unit.name) == (parts[0], parts[1])
    return (unit.kind, unit.namespace, unit.name) == tuple(parts)


def selected(unit: Unit, selectors: Iterable[str]) -> bool:
    """Whether `unit` matches any selector (all units when there are none)."""
    selectors = list(selectors)
    return not selectors or any(unit_matches(unit, s) for s in selectors)


# -- objects -------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True, slots=True)
class ObjectRef:
    """An object flower-syncer manages (namespace "" for a cluster-scoped one, e.g. a Namespace)."""

    kind: str
    namespace: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)  # see _cached_hash

    def __post_init__(self) -> None:
        _cached_hash(self, (self.kind, self.namespace, self.name))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        """The reference of `obj`, its strings interned: the live cache, the inventories and the
        results each make refs from objects of their own, and hold one string per object so."""
        meta = obj["metadata"]
        return cls.shared(obj["kind"], meta.get("namespace", ""), meta["name"])

    @classmethod
    def shared(cls, kind: str, namespace: str, name: str) -> ObjectRef:
        """`ObjectRef(kind, namespace, name)` with its strings interned (where they are strings)."""
        if type(kind) is str and type(namespace) is str and type(name) is str:
            return cls(sys.intern(kind), sys.intern(namespace), sys.intern(name))
        return cls(kind, namespace, name)


class UnknownUnit(LookupError):
    """A unit selector that matches no unit (or not exactly one, where one is needed)."""

    def __init__(self, selector: str, matches: Iterable[Unit] = ()) -> None:
        self.selector = selector
        self.matches = sorted(matches)
        found = ", ".join(u.id for u in self.matches)
        detail = f"matches {found}, not exactly one" if self.matches else "matches no unit"
        super().__init__(f"{selector!r} {detail}")
        self.detail = detail
