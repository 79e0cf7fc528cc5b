"""Helm's naming rules for a release (`fullname`, chart name) and the Flower version in an image tag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from syncer.models.names import MAX_NAME
from syncer.models.supernode.schema import _VERSION, CHART_NAME, DEFAULT_CA_SECRET, NODE_AUTH_SUFFIX, Image

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


def flower_version(tag: str) -> tuple[int, int] | None:
    """(major, minor) from an image tag such as `1.20.0-pytorch`; None when the tag says nothing."""
    match = _VERSION.match(tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def image_version(image: str) -> tuple[int, int] | None:
    """(major, minor) from an image reference such as `flwr/superlink:1.25.0` or
    `registry:5000/flwr/supernode:1.20.0-py3.11`; None for `latest`, a digest or no tag."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return flower_version(last.split(":", 1)[1]) if ":" in last else None


def supports(image: Image, since: tuple[int, int]) -> bool:
    """Whether the image's Flower version has a feature; unknown versions are taken as recent."""
    return _at_least(flower_version(image.tag), since)


def image_supports(image: str, since: tuple[int, int]) -> bool:
    """`supports` for an image reference written as one string (a Federation's images)."""
    return _at_least(image_version(image), since)


def _at_least(version: tuple[int, int] | None, since: tuple[int, int]) -> bool:
    return version is None or version >= since
