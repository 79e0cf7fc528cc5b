"""The key of the fingerprints of Secrets: what flower-syncer records of a Secret it applied (the
`flower-syncer.io/applied-hash` annotation and the inventory entry) is an HMAC of the object under
a random key, never a plain hash, so a user who may read the inventory ConfigMap (`view`) cannot
test guesses ("sunshine") against it.

The key lives in a Secret `flower-syncer.digest-key` of each namespace that holds Secrets from Git,
made with 32 random bytes by the first sync that needs it: readable exactly by those who may read
that namespace's Secrets (who can read the Secrets themselves anyway), and the same for the agent
and a one-shot CLI run, so both record the same fingerprints and an unchanged repository makes
zero writes. It carries no unit labels, so no unit ever prunes it. Objects that hold nothing from
Git in their data (other kinds; Secrets without data, or whose data is copied at sync time from
another Secret's public CA) keep plain fingerprints.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import threading
from typing import Any

from syncer.cluster.client import ApiError, Kube
from syncer.identity import ANN_COPY_FROM, Manifest

KEY_SECRET = "flower-syncer.digest-key"
KEY_FIELD = "key"
KEY_LABEL = "flower-syncer.io/digest-key"  # not managed-by: no unit owns, lists or prunes it


class DigestKeyError(Exception):
    """The namespace's digest key can be neither read nor made; `detail` says why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def holds_git_content(m: Manifest) -> bool:
    """A Secret whose data comes from Git (and so must not be fingerprinted in the clear)."""
    if m.get("kind") != "Secret" or not (m.get("data") or m.get("stringData")):
        return False
    return not ((m.get("metadata") or {}).get("annotations") or {}).get(ANN_COPY_FROM)


class DigestKeys:
    """The digest key of each namespace, read (or made) once per engine."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def key_for(self, m: Manifest, *, dry_run: bool) -> bytes | None:
        """The key to fingerprint `m` with; None when its fingerprint may stay plain. In a dry run
        a missing key is not made: a key of this run only (nothing is written with it)."""
        if not holds_git_content(m):
            return None
        namespace = str(m["metadata"]["namespace"])
        with self._lock:
            key = self._keys.get(namespace)
            if key is None:
                key = self._read(namespace)
                if key is None and dry_run:
                    return secrets.token_bytes(32)
                if key is None:
                    key = self._make(namespace)
                self._keys[namespace] = key
            return key

    def _read(self, namespace: str) -> bytes | None:
        try:
            obj = self.kube.get("Secret", namespace, KEY_SECRET)
        except ApiError as exc:
            raise DigestKeyError(f"cannot read the digest key Secret {namespace}/{KEY_SECRET}: {exc.reason}") from None
        if obj is None:
            return None
        return _decode(obj, namespace)

    def _make(self, namespace: str) -> bytes:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": KEY_SECRET, "namespace": namespace, "labels": {KEY_LABEL: "true"}},
            "data": {KEY_FIELD: base64.b64encode(secrets.token_bytes(32)).decode()},
        }
        try:
            made = self.kube.create(body)
        except ApiError as exc:
            if not exc.conflict:  # made by another replica or run meanwhile: read theirs
                raise DigestKeyError(f"cannot create the digest key Secret {namespace}/{KEY_SECRET}: "
                                     f"{exc.reason}") from None
            made = self.kube.get("Secret", namespace, KEY_SECRET) or {}
        return _decode(made, namespace)


def _decode(obj: dict[str, Any], namespace: str) -> bytes:
    try:
        key = base64.b64decode(str((obj.get("data") or {}).get(KEY_FIELD, "")), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < 16:
        raise DigestKeyError(f"the digest key Secret {namespace}/{KEY_SECRET} holds no usable key (key)")
    return key
