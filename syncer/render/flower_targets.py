"""Where each Federation's Flower-level health is read, and which SuperNodes Git expects there (pure).

For every Federation that loaded: its Control API (the address and TLS key registration uses:
the SuperLink's own Service, or `flower-syncer.io/control-api-address` where the admin's list of
Control API targets allows it), and the pools that should connect to its SuperLink:

- the Federation's own pools (`replicas`; a DaemonSet pool: as many as its workload wants);
- every SuperNode chart release of the same loaded repository whose `supernode.superlink`
  address and port name this SuperLink's Service (`<fed>-superlink[.<ns>[.svc[.cluster.local]]]`
  at the Service's Fleet port) from the same cluster, or an address the Federation exposes
  (`flower-syncer.io/superlink-external-address`) from any cluster of the repository (the releases
  other clusters apply: `RepoState.elsewhere`), with its `replicaCount` and, with
  `global.nodeAuth`, its public key (given, or derived from its private key).

Keys: with node authentication (`flower-syncer.io/supernode-auth: enabled`) a SuperNode is told
apart by its public key; a release's key matches its nodes one by one. Without it a SuperNode
makes itself a key at start (a new one at each restart), so only counts can be compared.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from syncer.identity import Unit
from syncer.models.federation import Federation
from syncer.models.nodeauth import control_target_allowed, parse_key
from syncer.models.supernode import SuperNodeValues, parse_openssh_private_key
from syncer.models.supernode.keys import KeyFormatError
from syncer.plan import ExpectedPool, FlowerTarget
from syncer.render.cachekey import flower_facts, same_unit
from syncer.repo.sites import dials_superlink
from syncer.repo.state import LoadedUnit

RELEASE_POOL = "supernode"  # a release's SuperNodes, by the chart's component name


def fleet_addresses(fed: Federation, namespace: str) -> tuple[str, list[str]]:
    """The host:port names of a federation's SuperLink Service at its Fleet port: the bare Service
    name (which only a SuperNode in the same namespace can dial), and the qualified ones."""
    host = fed.superlink_name()
    port = fed.spec.superlink.service.ports.grpc
    return f"{host}:{port}", [f"{host}.{namespace}{suffix}:{port}" for suffix in ("", ".svc", ".svc.cluster.local")]


def release_key(values: SuperNodeValues) -> bytes | None:
    """The stripped SubjectPublicKeyInfo PEM of a release's node-auth key, when it has one."""
    auth = values.global_.nodeAuth
    if not (auth.enabled and values.supernode.enabled):
        return None
    line = auth.authSupernodePublicKey.strip()
    if not line and auth.authSupernodePrivateKey.strip():
        try:
            private = parse_openssh_private_key(auth.authSupernodePrivateKey)
        except KeyFormatError:
            return None
        line = f"{private.key_type} {base64.b64encode(private.public_blob).decode()}"
    key, _ = parse_key(line) if line else (None, "")
    return key.pem.strip() if key is not None else None


def _dialled(address: str, port: int) -> str:
    """host:port as a release dials it, spelled as syncer.models.exposure spells an address."""
    host = address.strip().lower().rstrip(".")
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host.strip("[]")))
    return f"{host}:{port}"


class FlowerMemo:
    """What `flower_targets` worked out, kept from one revision to the next (the agent keeps one):
    the address each release dials, and each Federation's target with the addresses it is dialled
    at. A Federation's target is taken again when its LoadedUnit has the content of the one it was
    made from (render.cachekey.same_unit: the same object, as a fast path, or the same content key),
    `allowed` and Flower's release facts (render.cachekey.flower_facts: which API a release
    serves how) are the same, and no release that dials (or dialled) one of its addresses changed,
    came or went. So a memo never answers other than a fresh computation
    (tests/unit/test_flower_targets.py compares the two over a sequence of revisions,
    tests/unit/test_cachekey.py changes each input), and a commit to one file works out one
    target. Each call keeps only the units of its revision: nothing outlives the units it was
    made from."""

    def __init__(self) -> None:
        self.dialled: dict[tuple[str, Unit], tuple[LoadedUnit, str]] = {}
        self.targets: dict[tuple[str, Unit], _Made] = {}
        self.allowed: tuple[str, ...] | None = None
        self.facts = b""  # render.cachekey.flower_facts() of the previous call


@dataclass(frozen=True)
class _Made:
    fed: LoadedUnit
    addresses: frozenset[str]  # every host:port a release dials to reach this SuperLink (fleet, exposed)
    target: FlowerTarget


def flower_targets(units: Iterable[LoadedUnit], allowed: Sequence[str] | None = None,
                   elsewhere: Iterable[LoadedUnit] = (), memo: FlowerMemo | None = None) -> dict[Unit, FlowerTarget]:
    """Per Federation unit of `units`: its FlowerTarget (see the module doc). `allowed`: the
    Control API targets the admin allows beside a federation's own SuperLink Service;
    `elsewhere`: the units other clusters of the repository apply (their releases may dial an
    exposed SuperLink); `memo`: the work of the previous call, taken again where its inputs are
    the same objects (FlowerMemo). Linear in the units: releases are indexed by the address they
    dial."""
    memo = memo if memo is not None else FlowerMemo()
    loaded = list(units)
    dialling: dict[str, list[tuple[LoadedUnit, SuperNodeValues]]] = {}  # host:port -> the releases dialling it
    dialled: dict[tuple[str, Unit], tuple[LoadedUnit, str]] = {}
    touched: set[str] = set()  # addresses a release dials, or dialled, that changed, came or went
    for u in [*loaded, *elsewhere]:
        if isinstance(u.model, SuperNodeValues) and u.model.supernode.enabled:
            before = memo.dialled.get((u.cluster, u.unit))
            if before is not None and same_unit(before[0], u):
                address = before[1]
            else:
                superlink = u.model.supernode.superlink
                address = _dialled(superlink.address, superlink.port)
                touched.add(address)
                if before is not None:
                    touched.add(before[1])
            dialled[(u.cluster, u.unit)] = (u, address)
            dialling.setdefault(address, []).append((u, u.model))
    touched.update(address for key, (_, address) in memo.dialled.items() if key not in dialled)  # gone
    allowed_now = tuple(allowed) if allowed is not None else None
    facts = flower_facts()
    same_context = allowed_now == memo.allowed and facts == memo.facts
    out: dict[Unit, FlowerTarget] = {}
    made: dict[tuple[str, Unit], _Made] = {}
    for u in loaded:
        fed = u.model
        if not isinstance(fed, Federation):
            continue
        before_made = memo.targets.get((u.cluster, u.unit))
        if (before_made is not None and same_context and same_unit(before_made.fed, u)
                and touched.isdisjoint(before_made.addresses)):
            # the same content loaded anew: the memo holds the new unit, not the old one
            made[(u.cluster, u.unit)] = before_made if before_made.fed is u else _Made(u, before_made.addresses,
                                                                                        before_made.target)
            out[u.unit] = before_made.target
            continue
        ns = u.unit.namespace
        bare, qualified = fleet_addresses(fed, ns)
        external = [f"{a.host}:{a.port}" for a in fed.external_addresses()]
        found = [r for r in dialling.get(bare.lower(), ()) if r[0].unit.namespace == ns and r[0].cluster == u.cluster]
        found += [r for address in qualified for r in dialling.get(address.lower(), ()) if r[0].cluster == u.cluster]
        found += [r for address in external for r in dialling.get(address, ())
                  if dials_superlink(u, r[0]) and r not in found]
        found.sort(key=lambda r: (r[0].cluster, r[0].unit))
        target = _target(u, fed, found, allowed)
        addresses = frozenset([bare.lower(), *(a.lower() for a in qualified), *external])
        made[(u.cluster, u.unit)] = _Made(u, addresses, target)
        out[u.unit] = target
    memo.dialled, memo.targets, memo.allowed, memo.facts = dialled, made, allowed_now, facts
    return out


def _target(u: LoadedUnit, fed: Federation, found: list[tuple[LoadedUnit, SuperNodeValues]],
            allowed: Sequence[str] | None) -> FlowerTarget:
    ns = u.unit.namespace
    pools = [ExpectedPool(u.unit.id, p.name, p.replicas if fed.spec.mode != "DaemonSet" else None)
             for p in fed.spec.supernodes.pools]
    for rel, values in found:
        key = release_key(values)
        pools.append(ExpectedPool(rel.unit.id, RELEASE_POOL, values.supernode.replicas,
                                  frozenset({key}) if key is not None else frozenset(), rel.cluster))
    transport, _ = fed.control_api()
    own = fed.own_control_targets(ns)
    address = fed.control_api_address(ns)
    if address not in own and not control_target_allowed(address, own, allowed or ()):
        address = own[1]  # the annotation points where the admin does not allow: the own Service
    node_auth = fed.supernode_auth and not fed.spec.insecure
    registered = frozenset(k.pem.strip() for k in fed.admitted_keys()) if node_auth else frozenset()
    return FlowerTarget(address, transport, "" if fed.spec.insecure else fed.ca_secret_name(),
                        tuple(pools), node_auth, registered)
