"""A federation's SuperLink exposed beyond its cluster: the Fleet API address that SuperNodes of
other clusters dial, declared on the hub's Federation (annotation
`flower-syncer.io/superlink-external-address: host:port`, several comma-separated), and what must
hold for that address to work: a NodePort or LoadBalancer Service whose node port is set in Git
(`spec.superlink.service.nodePorts`, an extension). With TLS the certificate must name the host:
a cert-manager Certificate gets it (syncer.render.federation), a certificate kept in Git is read by
syncer.repo.sites, which also checks the releases of other clusters against the address."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from syncer.diagnostics import FieldPath
from syncer.models.k8s import Issue

if TYPE_CHECKING:
    from syncer.models.federation_spec import SuperLinkService

ANN_EXTERNAL_ADDRESS = "flower-syncer.io/superlink-external-address"
_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
AT: FieldPath = ("metadata", "annotations", ANN_EXTERNAL_ADDRESS)


@dataclass(frozen=True)
class ExternalAddress:
    host: str  # lower case; an IP as written
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> ExternalAddress | str:
    """`host:port` (an IPv6 host in brackets), or what is wrong with it."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        return f"{text!r} is not host:port"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"{text!r}: the port must be a number from 1 to 65535"
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        host = host.lower().rstrip(".")
        if not _HOST.match(host):
            return f"{text!r}: {host!r} is neither a DNS name nor an IP address"
    return ExternalAddress(host, int(port))


def external_addresses(annotations: dict[str, str]) -> list[ExternalAddress]:
    """The well-formed addresses of the annotation, in order."""
    out = []
    for part in annotations.get(ANN_EXTERNAL_ADDRESS, "").split(","):
        parsed = parse_address(part) if part.strip() else None
        if isinstance(parsed, ExternalAddress):
            out.append(parsed)
    return out


def exposure_issues(annotations: dict[str, str], service: SuperLinkService) -> list[Issue]:
    """What is wrong with a Federation's external addresses and node ports, on their own."""
    issues: list[Issue] = []
    node_ports = service.nodePorts
    if service.type == "ClusterIP" and any(p is not None for p in (node_ports.grpc, node_ports.serverAppIO,
                                                                     node_ports.extra)):
        issues.append(Issue(("spec", "superlink", "service", "nodePorts"),
                            "node ports are set, but the SuperLink Service is of type ClusterIP, which has none",
                            "set spec.superlink.service.type: NodePort (or LoadBalancer), or remove nodePorts"))
    if ANN_EXTERNAL_ADDRESS not in annotations:
        return issues
    raw = [p for p in annotations[ANN_EXTERNAL_ADDRESS].split(",") if p.strip()]
    if not raw:
        issues.append(Issue(AT, "the external address is empty", "write host:port, e.g. superlink.example.org:30092"))
    for part in raw:
        parsed = parse_address(part)
        if isinstance(parsed, str):
            issues.append(Issue(AT, parsed, "write host:port, e.g. superlink.example.org:30092"))
            continue
        if service.type == "ClusterIP":
            issues.append(Issue(AT, f"{parsed} is declared external, but the SuperLink Service is of type ClusterIP: "
                                "nothing outside the cluster reaches it",
                                f"set spec.superlink.service.type: NodePort and spec.superlink.service.nodePorts.grpc: "
                                f"{parsed.port}"))
        elif service.type == "NodePort" and node_ports.grpc != parsed.port:
            hint = (f"set spec.superlink.service.nodePorts.grpc: {parsed.port}" if node_ports.grpc is None
                    else f"write {parsed.host}:{node_ports.grpc}, or set nodePorts.grpc: {parsed.port}")
            now = "not set in Git (Kubernetes picks one)" if node_ports.grpc is None else node_ports.grpc
            issues.append(Issue(AT, f"{parsed}: the Fleet API's node port is {now}, so nothing listens on port "
                                f"{parsed.port}", hint))
        elif service.type == "LoadBalancer" and parsed.port not in (service.ports.grpc, node_ports.grpc):
            issues.append(Issue(AT, f"{parsed}: the load balancer serves the Fleet API on port {service.ports.grpc}"
                                + (f" (node port {node_ports.grpc})" if node_ports.grpc else ""),
                                f"write {parsed.host}:{service.ports.grpc}"))
    return issues
