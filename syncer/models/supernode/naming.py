"""Helm's naming rules for a release (`fullname`, chart name) and the Flower interface of an image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from syncer.models.flower import FlowerInterface, interface_of_tag
from syncer.models.names import MAX_NAME
from syncer.models.supernode.schema import CHART_NAME, DEFAULT_CA_SECRET, NODE_AUTH_SUFFIX, Image

if TYPE_CHECKING:
    from syncer.models.supernode.values import SuperNodeValues


# ---------------------------------------------------------------------------------------------
# Names


def _helm_trunc(text: str) -> str:
    """Helm's `trunc 63 | trimSuffix "-"`."""
    return text[:MAX_NAME].removesuffix("-")


def chart_name(name_override: str) -> str:
    """The `app.kubernetes.io/name` label: nameOverride, else the chart's name."""
    return _helm_trunc(name_override or CHART_NAME)


def helm_fullname(release: str, name_override: str, fullname_override: str) -> str:
    """Helm's standard fullname: fullnameOverride, else the release when it already contains the
    chart name, else `<release>-<name>`; truncated to 63 characters without a trailing '-'."""
    if fullname_override:
        return _helm_trunc(fullname_override)
    name = name_override or CHART_NAME
    if name in release:
        return _helm_trunc(release)
    return _helm_trunc(f"{release}-{name}")


@dataclass(frozen=True)
class ReleaseNames:
    """Every name a release's objects get."""

    app: str
    fullname: str
    supernode: str
    superexec: str
    node_auth_secret: str
    ca_secret: str
    """The Secret the SuperNode mounts for `--root-certificates` (the copy when copying)."""
    ca_source: str
    """With copyFromExistingSecret: the SuperLink's Secret the copy is made from; else ''."""


def release_names(values: SuperNodeValues, release: str) -> ReleaseNames:
    fullname = helm_fullname(release, values.nameOverride, values.fullnameOverride)
    cert = values.supernode.superlink.certificate
    if cert.copyFromExistingSecret.enabled:
        ca_secret = cert.copyFromExistingSecret.secretName or DEFAULT_CA_SECRET
        ca_source = cert.existingSecret
    else:
        ca_secret = cert.existingSecret or DEFAULT_CA_SECRET
        ca_source = ""
    return ReleaseNames(
        app=chart_name(values.nameOverride),
        fullname=fullname,
        supernode=f"{fullname}-{values.supernode.name}",
        superexec=f"{fullname}-{values.superexec.name}",
        node_auth_secret=f"{fullname}-{NODE_AUTH_SUFFIX}",
        ca_secret=ca_secret,
        ca_source=ca_source,
    )


def interface(image: Image) -> FlowerInterface:
    """The Flower interface of a component's image: from its tag, else from `image.flowerVersion`
    (a flower-syncer key the chart ignores), else the newest known release (assumed)."""
    return interface_of_tag(image.tag, image.flowerVersion)
