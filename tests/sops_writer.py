"""A small SOPS (v3, age) writer for tests that must not depend on the sops CLI: encrypts the
values of a YAML document as sops does (AES-256-GCM per value with its path as additional data,
the SHA-512 MAC sealed with `lastmodified`, the data key for an age recipient), honouring
`encrypted_regex` (as sops: a value is encrypted when any key on its path matches). What
syncer.secrets.sops decrypts; the corpus of tests/reliability/test_sops_corpus.py checks the
decryptor against the real CLI."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from typing import Any

import yaml
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

LASTMODIFIED = "2026-11-26T00:00:00Z"


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _seal(key: bytes, plain: str, aad: str, kind: str) -> str:
    iv = os.urandom(32)
    sealed = AESGCM(key).encrypt(iv, plain.encode(), aad.encode())
    data, tag = sealed[:-16], sealed[-16:]
    b64 = base64.b64encode
    return f"ENC[AES256_GCM,data:{b64(data).decode()},iv:{b64(iv).decode()},tag:{b64(tag).decode()},type:{kind}]"


def encrypt(text: str, recipient: str, encrypted_regex: str | None = None) -> str:
    """`text` (one YAML mapping) encrypted for the age `recipient`."""
    import pyrage

    doc = yaml.safe_load(text)
    key = os.urandom(32)
    digest = hashlib.sha512()
    rx = re.compile(encrypted_regex) if encrypted_regex else None

    def walk(value: Any, path: list[str]) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, [*path, str(k)]) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, path) for v in value]
        if value is None:
            return None
        digest.update(_text(value).encode())
        if rx is not None and not any(rx.search(p) for p in path):
            return value
        if value == "":
            return ""
        return _seal(key, value if isinstance(value, str) else str(value).lower() if isinstance(value, bool)
                     else str(value), ":".join(path) + ":", _type(value))

    body = walk(doc, [])
    enc = base64.b64encode(pyrage.encrypt(key, [pyrage.x25519.Recipient.from_str(recipient)])).decode()
    armored = "-----BEGIN AGE ENCRYPTED FILE-----\n" + "\n".join(
        enc[i:i + 64] for i in range(0, len(enc), 64)) + "\n-----END AGE ENCRYPTED FILE-----\n"
    meta: dict[str, Any] = {"age": [{"recipient": recipient, "enc": armored}], "lastmodified": LASTMODIFIED,
                            "mac": _seal(key, digest.hexdigest().upper(), LASTMODIFIED, "str"), "version": "3.10.2"}
    if encrypted_regex:
        meta["encrypted_regex"] = encrypted_regex
    body["sops"] = meta
    return yaml.safe_dump(body, sort_keys=False)
