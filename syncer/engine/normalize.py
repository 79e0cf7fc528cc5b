"""Make live and desired objects comparable, and keep Secret values out of every output."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from typing import Any

import orjson

from syncer.identity import ANN_APPLIED_HASH, Manifest

MASK_BEFORE = "*** (before)"
MASK_AFTER = "*** (after)"
MASK = "***"

_SERVER_META = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink",
                "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers")


def canonical_json(value: Any) -> bytes:
    """Compact JSON with sorted keys and UTF-8 text: the bytes every fingerprint is taken of.
    orjson writes exactly what `json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)` writes (the fingerprints of objects applied by earlier versions stay
    valid), many times faster; integers beyond 64 bits, which orjson refuses, go the slow way."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(manifest: Manifest, key: bytes | None = None) -> str:
    """A stable hash of a desired object (before our own hash annotation is added); with `key`,
    an HMAC under it (Secrets from Git: see syncer.engine.digestkey)."""
    if key is not None:
        return hmac.new(key, canonical_json(manifest), hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(canonical_json(manifest)).hexdigest()[:32]


def with_fingerprint(manifest: Manifest, key: bytes | None = None) -> Manifest:
    """A shallow copy of the manifest carrying its fingerprint annotation."""
    digest = fingerprint(manifest, key)
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), ANN_APPLIED_HASH: digest}
    return {**manifest, "metadata": meta}


def managed_fields_hash(obj: dict[str, Any], manager: str) -> str:
    """Hash of the field set `manager` owns through Apply. Another manager changing one of our
    fields takes it from this set, which is how drift shows without comparing values."""
    entries = [m.get("fieldsV1", {}) for m in obj.get("metadata", {}).get("managedFields", [])
               if m.get("manager") == manager and m.get("operation") == "Apply" and not m.get("subresource")]
    # the server writes fieldsV1 in a fixed order: keys as they come. json.dumps's ASCII escapes
    # for anything else, so hashes recorded by earlier versions stay valid
    try:
        blob = orjson.dumps(entries)
    except orjson.JSONEncodeError:
        blob = b""
    if not blob or not blob.isascii():
        blob = json.dumps(entries, separators=(",", ":")).encode()
    return sys.intern(hashlib.sha256(blob).hexdigest()[:32])  # shared by the objects of a kind, held per entry


def strip_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without status and server-owned metadata, for comparing and printing."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_META}
    annotations = {k: v for k, v in meta.get("annotations", {}).items()
                   if k not in ("kubectl.kubernetes.io/last-applied-configuration",)}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    return out


def mask_secret_pair(before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[Any, Any]:
    """Replace Secret values like `kubectl diff` does: equal values stay equal, changed ones differ."""
    def masked(obj: dict[str, Any] | None, other: dict[str, Any] | None, tag: str) -> Any:
        if obj is None or obj.get("kind") != "Secret":
            return obj
        out = dict(obj)
        for key in ("data", "stringData"):
            if key in out and isinstance(out[key], dict):
                theirs = (other or {}).get(key) or {}
                out[key] = {k: (MASK if theirs.get(k) == v else tag) for k, v in out[key].items()}
        return out

    return masked(before, after, MASK_BEFORE), masked(after, before, MASK_AFTER)
