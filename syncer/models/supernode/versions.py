"""A SuperNode release's values against the Flower release of its images (syncer.models.flower):
a version that had to be assumed, values that no longer map onto a flag of that release, and
`extraArgs` that release deprecates or refuses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from syncer.diagnostics import FieldPath
from syncer.models.flower import (
    NEWEST,
    SUPERLINK_HTTP_PORT,
    Component,
    FlowerInterface,
    explicit_version,
    parse_version,
    runtime_skew,
    unknown_release,
)
from syncer.models.k8s import Issue
from syncer.models.supernode.naming import interface

if TYPE_CHECKING:
    from syncer.models.supernode.schema import Component as ChartComponent
    from syncer.models.supernode.schema import NodeAuth, SuperExecComponent, SuperNodeComponent

FLOWER_VERSION_KEY = "flowerVersion"


def version_issues(sn: SuperNodeComponent, se: SuperExecComponent, auth: NodeAuth) -> list[Issue]:
    """The values' fields against the Flower release of each component's image."""
    issues: list[Issue] = []
    components: tuple[tuple[ChartComponent, str, Component], ...] = (
        (sn, "supernode", "supernode"), (se, "superexec", "superexec"))
    for comp, key, component in components:
        if not comp.enabled:
            continue
        issues.extend(_image_issues(comp, key))
        issues.extend(flag_issues(interface(comp.image), component, comp.extraArgs, (key, "extraArgs")))
    if sn.enabled:
        iface = interface(sn.image)
        if iface.http_runtime and "health" in sn.containerPorts.model_fields_set:
            issues.append(Issue(("supernode", "containerPorts", "health"),
                                f"Flower {iface.label} serves its health check (GET /health) on the ClientApp API "
                                "port, so supernode.containerPorts.health is not used",
                                "remove it; the probes use supernode.containerPorts.clientAppIo",
                                severity="warning"))
        if iface.fleet_transport == "http" and "port" not in sn.superlink.model_fields_set:
            issues.append(Issue(("supernode", "superlink", "port"),
                                f"Flower {iface.label} SuperNodes speak HTTP to the SuperLink's --port "
                                f"({SUPERLINK_HTTP_PORT} by default), and supernode.superlink.port is the chart's "
                                f"default {sn.superlink.port}, the gRPC Fleet port of Flower before 1.40",
                                f"set supernode.superlink.port to the SuperLink's Fleet port: {SUPERLINK_HTTP_PORT} "
                                "for a plain Flower 1.40+ SuperLink, or the Service's fleet port (9092 by "
                                "default) for a flower-syncer Federation, which maps it to the HTTP API",
                                severity="warning"))
        if iface.public_key_optional and auth.enabled and auth.authSupernodePublicKey.strip():
            passed = ("so it is not passed; it is only checked against the private key" if iface.http_runtime else
                      "and ignores --auth-supernode-public-key (deprecated since 1.23), which is still passed")
            issues.append(Issue(("global", "nodeAuth", "authSupernodePublicKey"),
                                f"Flower {iface.label} derives the public key from the private key, {passed}",
                                "remove it, or keep it as a check", severity="warning"))
        for i, arg in enumerate(sn.extraArgs):
            if iface.http_runtime and arg.split("=", 1)[0] in ("--host", "--port"):
                issues.append(Issue(("supernode", "extraArgs", i), f"{arg.split('=', 1)[0]} is already set from the "
                                    f"values (Flower {iface.label} serves the ClientApp API on it)",
                                    "set supernode.containerPorts.clientAppIo instead"))
    if se.enabled:
        iface = interface(se.image)
        if sn.enabled and not se.supernode.address:  # this release's SuperExec dials this release's SuperNode
            node = interface(sn.image)
            problem = runtime_skew(iface.beside(node), node, tls=False)
            if problem:
                issues.append(Issue(("superexec", "image", "tag"),
                                    f"the SuperExec (Flower {iface.label}) cannot talk to the SuperNode of this "
                                    f"release (Flower {node.label}): {problem}",
                                    "use the same Flower release for supernode.image and superexec.image"))
        for i, arg in enumerate(se.extraArgs):
            if arg.split("=", 1)[0] == "--runtime-api-address":
                issues.append(Issue(("superexec", "extraArgs", i), "--runtime-api-address is already set from the "
                                    "values", "set superexec.supernode.address and superexec.supernode.port instead"))
        if not iface.health_server and iface.superexec and "health" in se.containerPorts.model_fields_set:
            issues.append(Issue(("superexec", "containerPorts", "health"),
                                f"Flower {iface.label} has no health server (--health-server-address was removed "
                                "in 1.43), so superexec.containerPorts.health is not used", "remove it",
                                severity="warning"))
    return issues


def _image_issues(comp: ChartComponent, key: str) -> list[Issue]:
    image = comp.image
    at: FieldPath = (key, "image", FLOWER_VERSION_KEY)
    if image.flowerVersion and explicit_version(image.flowerVersion) is None:
        return [Issue(at, f"{image.flowerVersion!r} is not a Flower version", 'write it as "1.42.0"')]
    unknown = unknown_release(interface(image))
    if unknown:
        field = "tag" if parse_version(image.tag) is not None else FLOWER_VERSION_KEY
        return [Issue((key, "image", field), f"image tag {image.tag or '(none)'!r}: {unknown}",
                      "use a Flower release such as 1.42.0 (a typo in the tag?)", severity="warning")]
    if interface(image).assumed:
        return [Issue((key, "image", "tag"),
                      f"image tag {image.tag or '(none)'!r} names no Flower version; the {key} is rendered for "
                      f"Flower {NEWEST[0]}.{NEWEST[1]}, the newest known release",
                      f"use a versioned tag such as 1.42.0, or set {key}.image.{FLOWER_VERSION_KEY} to the "
                      "release the image holds", severity="warning")]
    return []


def flag_issues(iface: FlowerInterface, component: Component, args: list[str], at: FieldPath) -> list[Issue]:
    """extraArgs that this release refuses (error) or deprecates (warning), from its parsers."""
    table = iface.flag_problems(component)
    issues = []
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if flag in table:
            severity, what = table[flag]
            issues.append(Issue((*at, i), f"{flag}: Flower {iface.label} {what}",
                                "remove it" if severity == "error" else "remove it, or use the replacement",
                                severity=severity))
    return issues
