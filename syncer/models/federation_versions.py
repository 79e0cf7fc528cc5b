"""A Federation against the Flower releases of its images (syncer.models.flower): versions that had to
be assumed, an unreadable flower-syncer.io/flower-version, extraArgs a release deprecates or refuses,
containers of one federation that cannot talk to each other, and a TLS certificate that 1.37+ needs
with the IP SAN 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from syncer.diagnostics import FieldPath
from syncer.models.federation_spec import ANN_TLS_SECRET, FederationSpec
from syncer.models.flower import (
    ANN_FLOWER_VERSION,
    NEWEST,
    FlowerInterface,
    explicit_version,
    fleet_skew,
    runtime_skew,
    unknown_release,
)
from syncer.models.k8s import Issue
from syncer.models.supernode.versions import flag_issues


def federation_version_issues(spec: FederationSpec, annotations: Mapping[str, str],
                              images: list[tuple[FieldPath, str]], flower: Callable[[str], FlowerInterface],
                              tls_issued: bool) -> list[Issue]:
    """A Federation's fields against its Flower releases: `images` are its (field, image) pairs,
    `flower` gives an image's interface, `tls_issued` says a cert-manager issuer makes its certificate."""
    issues: list[Issue] = []
    explicit = annotations.get(ANN_FLOWER_VERSION, "")
    if explicit and explicit_version(explicit) is None:
        return [Issue(("metadata", "annotations", ANN_FLOWER_VERSION), f"{explicit!r} is not a Flower version",
                      'write it as "1.42.0"')]
    for path, image in images:
        if unknown_release(flower(image)):
            issues.append(Issue(path, f"image {image!r}: {unknown_release(flower(image))}",
                                "use a Flower release such as 1.42.0 (a typo in the tag?)", severity="warning"))
        if flower(image).assumed:
            what = f"Flower {NEWEST[0]}.{NEWEST[1]}, the newest known release"
            if path != ("spec", "superlink", "image"):
                what = f"the SuperLink's release when its tag names one, else {what}"
            issues.append(Issue(path, f"image {image!r} names no Flower version; it is rendered for {what}",
                                f"use a versioned tag such as 1.42.0, or write the release in the annotation "
                                f"{ANN_FLOWER_VERSION}", severity="warning"))
    process = spec.isolationMode == "process"
    link = flower(spec.superlink.image)
    issues += flag_issues(link, "superlink", spec.superlink.extraArgs, ("spec", "superlink", "extraArgs"))
    issues += _host_port_issues(link, spec.superlink.extraArgs, ("spec", "superlink", "extraArgs"))
    if process and spec.superlink.superexecImage:
        exec_ = flower(spec.superlink.superexecImage).beside(link)
        issues += flag_issues(exec_, "superexec", spec.superlink.superexecExtraArgs,
                              ("spec", "superlink", "superexecExtraArgs"))
        problem = runtime_skew(exec_, link, tls=not spec.insecure)
        if not exec_.superexec and not exec_.assumed:
            problem = "flower-superexec exists from Flower 1.21"
        if problem:
            issues.append(Issue(("spec", "superlink", "superexecImage"),
                                f"the ServerApp SuperExec ({spec.superlink.superexecImage}, Flower {exec_.label}) "
                                f"cannot talk to the SuperLink ({spec.superlink.image}, Flower {link.label}): "
                                f"{problem}", "use the same Flower release for the SuperLink and its SuperExec"))
    for i, pool in enumerate(spec.supernodes.pools):
        at: FieldPath = ("spec", "supernodes", "pools", i)
        image = pool.images.supernode or spec.supernodes.image
        node = flower(image)
        issues += flag_issues(node, "supernode", pool.extraArgs, (*at, "extraArgs"))
        issues += _host_port_issues(node, pool.extraArgs, (*at, "extraArgs"))
        problem = fleet_skew(node, link)
        if problem:
            field: FieldPath = (*at, "images", "supernode") if pool.images.supernode else ("spec", "supernodes",
                                                                                           "image")
            issues.append(Issue(field, f"pool {pool.name!r}: SuperNodes of Flower {node.label} ({image}) cannot talk "
                                f"to the SuperLink of Flower {link.label} ({spec.superlink.image}): {problem}",
                                "use SuperNode and SuperLink images of the same transport era (both before "
                                "1.40, or both 1.40 or newer); the same release is safest",
                                severity="warning" if node.assumed or link.assumed else "error"))
        if process and pool.images.superexecClientApp:
            exec_ = flower(pool.images.superexecClientApp).beside(node)
            issues += flag_issues(exec_, "superexec", pool.superexecExtraArgs, (*at, "superexecExtraArgs"))
            problem = runtime_skew(exec_, node, tls=False)
            if not exec_.superexec and not exec_.assumed:
                problem = "flower-superexec exists from Flower 1.21"
            if problem:
                issues.append(Issue((*at, "images", "superexecClientApp"),
                                    f"pool {pool.name!r}: the ClientApp SuperExec (Flower {exec_.label}) cannot talk "
                                    f"to its SuperNode (Flower {node.label}): {problem}",
                                    "use the same Flower release for the SuperNode and its SuperExec"))
    if not spec.insecure and link.loopback_ip_san and annotations.get(ANN_TLS_SECRET) and not tls_issued:
        issues.append(Issue(("metadata", "annotations", ANN_TLS_SECRET),
                            f"Flower {link.label} SuperLinks reach their own ServerApp API at 127.0.0.1 over TLS: "
                            "the certificate in this Secret needs the IP SAN 127.0.0.1, or ServerApps fail with "
                            "CERTIFICATE_VERIFY_FAILED",
                            "issue the certificate with IP:127.0.0.1 among its subject alternative names (the "
                            "cert-manager Certificate flower-syncer renders has it)", severity="warning"))
    return issues


def _host_port_issues(iface: FlowerInterface, args: list[str], at: FieldPath) -> list[Issue]:
    if not iface.http_runtime:
        return []
    return [Issue((*at, i), f"{arg.split('=', 1)[0]} is already set from the document (Flower {iface.label} "
                  "serves its API on it)", "remove it: flower-syncer binds the API to 0.0.0.0 on the port its "
                  "Service and probes use")
            for i, arg in enumerate(args) if arg.split("=", 1)[0] in ("--host", "--port")]
