"""Secret manifests kept in the config repository, rendered as objects of their unit."""

from __future__ import annotations

from syncer.identity import Manifest
from syncer.models.secret import SecretManifest
from syncer.render.common import RenderContext, metadata


def render_secret(secret: SecretManifest, ctx: RenderContext) -> Manifest:
    """A Secret kept in the config repository, as the unit's object: our labels, its namespace."""
    m: Manifest = {"apiVersion": "v1", "kind": "Secret",
                   "metadata": metadata(ctx, secret.metadata.name, secret.metadata.labels, secret.metadata.annotations),
                   "type": secret.type, "data": secret.merged_data()}
    if secret.immutable is not None:
        m["immutable"] = secret.immutable
    return m
