"""Checks across clusters of one repository (syncer.repo.clusters): a SuperNode chart release that
dials a SuperLink outside its own cluster must dial an address a Federation of the repository
exposes (`flower-syncer.io/superlink-external-address`, syncer.models.exposure), on that port, with
the TLS, node authentication and Flower release that SuperLink expects; and a certificate kept in
Git for an exposed SuperLink must name the exposed host. Errors name the release's file, line and
field (or the Federation's) and what to do; a release with an error is not shipped (its last
applied state stays), like a version skew (syncer.repo.skew, which checks releases dialing a
Federation's Service inside their own cluster).

Runs after the load over every cluster's units; it opens a file only to point at the line of an
error."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from syncer.diagnostics import FieldPath, Severity
from syncer.identity import Unit
from syncer.models.exposure import ANN_EXTERNAL_ADDRESS, ExternalAddress
from syncer.models.federation import Federation
from syncer.models.flower import fleet_skew
from syncer.models.nodeauth import parse_keys
from syncer.models.supernode import SuperNodeValues, interface
from syncer.repo.skew import diagnostic_at, service_of

if TYPE_CHECKING:
    from syncer.repo.state import LoadedUnit, RepoState

@dataclass(frozen=True)
class _Problem:
    path: FieldPath
    message: str
    hint: str
    severity: Severity = "error"


_ADDRESS: FieldPath = ("supernode", "superlink", "address")
_PORT: FieldPath = ("supernode", "superlink", "port")


def _where(loaded: LoadedUnit) -> str:
    return f"{loaded.source}:{loaded.line}" + (f" (cluster {loaded.cluster})" if loaded.cluster else "")


def check_sites(state: RepoState) -> None:
    """Append a diagnostic to `state.diagnostics` for each release that dials a SuperLink of
    another cluster wrongly, and for each exposed certificate in Git that does not name its host."""
    feds = [u for u in state.units if isinstance(u.model, Federation)]
    exposed = [(u, a) for u in feds for a in u.model.external_addresses()]  # type: ignore[union-attr]
    for fed_unit, address in exposed:
        _check_certificate(state, fed_unit, address)
    services = {(u.cluster, u.unit.namespace, u.model.superlink_name()): u  # type: ignore[union-attr]
                for u in feds}
    failed: set[Unit] = set()
    for loaded in state.units:
        values = loaded.model
        if not isinstance(values, SuperNodeValues) or not values.supernode.enabled:
            continue
        target = values.supernode.superlink
        service = service_of(target.address, loaded.unit.namespace)
        if service is not None and (loaded.cluster, *service) in services:
            continue  # a Federation's Service in its own cluster: syncer.repo.skew
        host = target.address.strip().lower().rstrip(".")
        with contextlib.suppress(ValueError):
            host = str(ipaddress.ip_address(host.strip("[]")))
        same_host = [(u, a) for u, a in exposed if a.host == host]
        problem: _Problem | None = None
        if not same_host:
            elsewhere = [u for (c, ns, name), u in services.items()
                         if service is not None and (ns, name) == service and c != loaded.cluster]
            if elsewhere:
                problem = _Problem(_ADDRESS, f"the SuperNodes dial {target.address}, the Service of federation "
                           f"{elsewhere[0].unit.name!r} ({_where(elsewhere[0])}), which is in another cluster: a "
                           "Service name resolves only inside its own cluster",
                           _expose_hint(exposed, elsewhere[0]))
            elif exposed and service is None:
                # a SuperLink outside the repository is allowed (a partner's): a warning, which
                # `validate --strict` fails on
                problem = _Problem(_ADDRESS, f"the SuperNodes dial {target.address}:{target.port}, which no "
                                   f"federation of this repository exposes{_listing(exposed)}",
                                   _expose_hint(exposed, None) + " (a SuperLink outside this repository: nothing "
                                   "to do)", "warning")
        else:
            match = next(((u, a) for u, a in same_host if a.port == target.port), None)
            if match is None:
                u, a = same_host[0]
                problem = _Problem(_PORT, f"the SuperNodes dial {host}:{target.port}, but federation {u.unit.name!r} "
                           f"({_where(u)}) exposes its Fleet API at {a}", f"set supernode.superlink.port: {a.port}")
            else:
                problem = _mismatch(loaded, values, *match)
        if problem is None:
            continue
        if problem.severity == "error":
            failed.add(loaded.unit)
        state.diagnostics.append(diagnostic_at(state.root, loaded.source, loaded.line, problem.path, loaded.unit.id,
                                     problem.message, problem.hint, problem.severity))
    if failed:
        state.failed |= failed
        state.units = [u for u in state.units if u.unit not in failed]


def dials_superlink(fed: LoadedUnit, release: LoadedUnit) -> bool:
    """Whether the SuperNodes of `release` (a chart release) dial the SuperLink of `fed` (a
    Federation): its Service at its Fleet port from the same cluster, or an address it exposes
    (`flower-syncer.io/superlink-external-address`) from anywhere. For matching a hub's SuperNodes
    to the releases of every cluster (`RepoState.units` and `RepoState.elsewhere`)."""
    federation, values = fed.model, release.model
    if not isinstance(federation, Federation) or not isinstance(values, SuperNodeValues):
        return False
    target = values.supernode.superlink
    service = service_of(target.address, release.unit.namespace)
    if release.cluster == fed.cluster and service == (fed.unit.namespace, federation.superlink_name()):
        return target.port == federation.spec.superlink.service.ports.grpc
    host = target.address.strip().lower().rstrip(".")
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host.strip("[]")))
    return any(a.host == host and a.port == target.port for a in federation.external_addresses())


def _listing(exposed: list[tuple[LoadedUnit, ExternalAddress]]) -> str:
    if not exposed:
        return " (none exposes one)"
    return " (exposed: " + ", ".join(f"{a} by {u.unit.name!r} in {_where(u)}" for u, a in exposed[:5]) + ")"


def _expose_hint(exposed: list[tuple[LoadedUnit, ExternalAddress]], fed: LoadedUnit | None) -> str:
    if exposed:
        return (f"dial an exposed address: set supernode.superlink.address: {exposed[0][1].host} and "
                f"supernode.superlink.port: {exposed[0][1].port}")
    name = repr(fed.unit.name) if fed is not None else "the SuperLink's Federation"
    return (f"expose federation {name}: a NodePort Service with spec.superlink.service.nodePorts.grpc and the address "
            f"in the annotation {ANN_EXTERNAL_ADDRESS}, then dial that address")


def _mismatch(loaded: LoadedUnit, values: SuperNodeValues, fed_unit: LoadedUnit,
              address: ExternalAddress) -> _Problem | None:
    """What keeps a release that dials `address` from joining that federation's SuperLink."""
    fed = fed_unit.model
    assert isinstance(fed, Federation)
    where = f"federation {fed.name!r} ({_where(fed_unit)})"
    if not fed.spec.insecure and not values.tls.enabled:
        return _Problem(("tls", "enabled"),
                        f"{where} serves {address} with TLS, and these SuperNodes dial it in plain text",
                        "set tls.enabled: true and trust the SuperLink's CA (supernode.superlink.certificate)")
    if fed.spec.insecure and values.tls.enabled:
        return _Problem(("tls", "enabled"),
                        f"{where} serves {address} without TLS (insecure: true), and these SuperNodes dial it with TLS",
                        "set tls.enabled: false, or give the SuperLink a certificate")
    auth = values.global_.nodeAuth
    if fed.supernode_auth and not auth.enabled:
        return _Problem(("global", "nodeAuth", "enabled"),
                        f"{where} admits only the SuperNodes whose public keys it lists, and these SuperNodes "
                        "have no key",
                        "set global.nodeAuth (a key pair; the private key SOPS-encrypted) "
                "and list the public key in the federation's flower-syncer.io/supernode-public-keys")
    if fed.supernode_auth and auth.authSupernodePublicKey.strip():
        keys, _ = parse_keys(auth.authSupernodePublicKey)
        listed = {k.fingerprint for k in fed.admitted_keys()}
        if keys and keys[0].fingerprint not in listed:
            return _Problem(("global", "nodeAuth", "authSupernodePublicKey"),
                            f"{where} does not list this release's public key ({keys[0].fingerprint}): the "
                            "SuperLink refuses these SuperNodes",
                            "add the key to the federation's flower-syncer.io/supernode-public-keys")
    node, link = interface(values.supernode.image), fed.flower(fed.spec.superlink.image)
    problem = fleet_skew(node, link)
    if problem:
        return _Problem(("supernode", "image", "tag"),
                        f"these SuperNodes (Flower {node.label}) cannot talk to the SuperLink they dial, {where}, "
                        f"Flower {link.label}: {problem}",
                f"use a SuperNode image of Flower {link.label} (or of the same transport era)",
                "warning" if node.assumed or link.assumed else "error")
    return None


def _check_certificate(state: RepoState, fed_unit: LoadedUnit, address: ExternalAddress) -> None:
    """A TLS Secret kept in Git (decrypted) for an exposed SuperLink must name the exposed host
    (a cert-manager Certificate is rendered with it: syncer.render.federation)."""
    fed = fed_unit.model
    assert isinstance(fed, Federation)
    if fed.spec.insecure or fed.tls_issuer() is not None:
        return
    for _, secret in fed_unit.secrets:
        if secret.metadata.name != fed.tls_secret():
            continue
        pem = secret.stringData.get("tls.crt", "").encode()
        if not pem and "tls.crt" in secret.data:
            try:
                pem = base64.b64decode(secret.data["tls.crt"], validate=True)
            except ValueError:
                return
        names = _certificate_names(pem)
        if names is None or address.host in names:
            return
        state.diagnostics.append(diagnostic_at(
            state.root, fed_unit.source, fed_unit.line, ("metadata", "annotations", ANN_EXTERNAL_ADDRESS),
            fed_unit.unit.id, f"the SuperLink's certificate (Secret {secret.metadata.name!r} in Git) does not name "
            f"{address.host}, which SuperNodes of other clusters dial: they refuse the connection "
            f"(it names {', '.join(sorted(names)[:6]) or 'nothing'})",
            f"issue the certificate with {address.host} among its subject alternative names"))
        return


def _certificate_names(pem: bytes) -> set[str] | None:
    """The DNS names and IPs a PEM certificate names; None when it cannot be read (e.g. still encrypted)."""
    from cryptography import x509  # slow to import: only a repository with an exposed SuperLink pays it

    try:
        cert = x509.load_pem_x509_certificate(pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return None
    return {n.lower() for n in sans.get_values_for_type(x509.DNSName)} | \
        {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
