"""Secrets that copy a key from another Secret of their namespace (the SuperNode chart's
`copyFromExistingSecret`, and the CA a TLS Federation's SuperNodes trust): filled at sync time
from the source as it is now, so a rotated certificate is followed."""

from __future__ import annotations

from syncer.cluster.client import ApiError, Kube
from syncer.engine.changeset import Cause, UnitResult
from syncer.identity import ANN_COPY_FROM, ANN_COPY_KEYS, Manifest


def fill_copies(kube: Kube, m: Manifest, res: UnitResult) -> Manifest | None:
    """`m` with its copied key filled in (or `m` itself when it copies nothing); None, with the
    reason in `res`, when the source cannot be read or lacks every key it may be copied from."""
    annotations = m["metadata"].get("annotations", {})
    source = annotations.get(ANN_COPY_FROM)
    if m["kind"] != "Secret" or not source:
        return m
    ns = m["metadata"]["namespace"]
    try:
        src = kube.get("Secret", ns, source)
    except ApiError as exc:
        res.fail(Cause.of_status(exc.status), f"cannot read Secret {ns}/{source} to copy from: {exc.message}")
        return None
    keys = [k.strip() for k in annotations.get(ANN_COPY_KEYS, "ca.crt").split(",") if k.strip()]
    data = (src or {}).get("data") or {}
    key = next((k for k in keys if data.get(k)), None)
    if key is None:
        res.fail(Cause.MISSING_SECRET_KEY, f"Secret {ns}/{source} (to copy {' or '.join(keys)} from) "
                 f"{'has none of those keys' if src else 'does not exist'}; "
                 f"{m['metadata']['name']} is not applied until it does")
        return None
    return {**m, "data": {keys[0]: data[key]}}
