"""Who may reach a Federation's SuperLink, as written in its annotations (the document stays a valid
flower-operator document). A list of entries separated by commas or spaces:

- a CIDR (`10.20.0.0/16`, `2001:db8::/64`): an ipBlock;
- a namespace (`edge-sites`): every pod in it;
- a namespace and a pod label (`ml-team/app=flwr-cli`): those pods in it;
- `*`: anyone (no restriction on that port).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from syncer.models.names import label_key_problem, label_value_problem, name_problem

ANN_NETWORK_POLICIES = "flower-syncer.io/network-policies"  # "disabled": render none for the federation
ANN_FLEET_API_FROM = "flower-syncer.io/fleet-api-from"  # beside the federation's own SuperNodes
ANN_CONTROL_API_FROM = "flower-syncer.io/control-api-from"  # nobody unless named (flwr run, flwr ls)

NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class Source:
    cidr: str = ""
    namespace: str = ""
    label: tuple[str, str] | None = None
    anywhere: bool = False

    def peer(self) -> dict[str, Any]:
        """The NetworkPolicyPeer (not for `anywhere`, which drops `from` altogether)."""
        if self.cidr:
            return {"ipBlock": {"cidr": self.cidr}}
        peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: self.namespace}}}
        if self.label is not None:
            peer["podSelector"] = {"matchLabels": {self.label[0]: self.label[1]}}
        return peer


def parse_sources(text: str) -> tuple[list[Source], list[str]]:
    """The entries of an annotation, and a problem per entry that is none of the forms above."""
    sources: list[Source] = []
    problems: list[str] = []
    for entry in (e for e in re.split(r"[,\s]+", text.strip()) if e):
        source, problem = _parse(entry)
        if problem:
            problems.append(problem)
        elif source is not None and source not in sources:
            sources.append(source)
    return sources, problems


def _parse(entry: str) -> tuple[Source | None, str]:
    if entry == "*":
        return Source(anywhere=True), ""
    if re.match(r"[0-9a-fA-F:.]+/\d+\Z", entry) and ("." in entry or ":" in entry):
        try:
            return Source(cidr=str(ipaddress.ip_network(entry, strict=False))), ""
        except ValueError:
            return None, f"{entry!r} is not a CIDR (e.g. 10.20.0.0/16)"
    namespace, _, selector = entry.partition("/")
    problem = name_problem(namespace, "namespace")
    if problem:
        return None, f"{entry!r}: {problem}"
    if not selector:
        return Source(namespace=namespace), ""
    key, eq, value = selector.partition("=")
    if not eq:
        return None, f"{entry!r}: write the pod label as NAMESPACE/KEY=VALUE"
    problem = label_key_problem(key) or label_value_problem(value)
    if problem:
        return None, f"{entry!r}: {problem}"
    return Source(namespace=namespace, label=(key, value)), ""
