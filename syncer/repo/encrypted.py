"""SOPS-encrypted documents in the loader: opened with the repository's decryption keys (or, for
`validate` without keys, checked with their encrypted values left opaque), and diagnostics kept
free of the plaintext."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from syncer.diagnostics import Diagnostic, format_path
from syncer.secrets.keys import Decryption
from syncer.secrets.sops import METADATA_KEY, Decrypted, SopsError, decrypt_document
from syncer.yamldoc import YamlDoc

REDACTED = "**redacted**"
_ENC = re.compile(r"ENC\[AES256_GCM,data:[^,]*,iv:[^,]*,tag:[^,]*,type:([^\]]*)\]\Z")
_PLACEHOLDERS: dict[str, Any] = {"int": 0, "int64": 0, "float": 0.0, "bool": False}


@dataclass(frozen=True)
class Opened:
    doc: YamlDoc
    secrets: frozenset[str] = frozenset()
    opaque: tuple[str, ...] = ()  # field paths left encrypted (no key; validate only)


def open_document(doc: YamlDoc, decryption: Decryption) -> tuple[Opened | None, Diagnostic | None]:
    """The document decrypted; or, without a key when none is required, with placeholders where
    values are encrypted (and a warning); or None and an error naming the file."""
    data: dict[str, Any] = doc.data
    line = doc.position((METADATA_KEY,))[0] or doc.start_line
    if not decryption.identities and not decryption.required:
        opaque: list[str] = []
        body = _placeholders({k: v for k, v in data.items() if k != METADATA_KEY}, (), opaque)
        warning = Diagnostic(doc.file, line, 1, "", "encrypted with SOPS: its encrypted values are not checked "
                             "(no decryption key)", "pass --decryption-key-file to check them too", "warning")
        return Opened(replace(doc, data=body), opaque=tuple(opaque)), warning
    key = (doc.file, _fingerprint(data), tuple(str(i) for i in decryption.identities))
    cached = _CACHE.get(key)
    if cached is None:
        try:
            cached = decrypt_document(data, decryption.identities)
        except SopsError as exc:
            return None, Diagnostic(doc.file, line, 1, "", f"cannot decrypt this SOPS file: {exc.detail}",
                                    exc.hint or "check the file and the decryption keys")
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = cached
    return Opened(replace(doc, data=copy.deepcopy(cached.data)), cached.secrets), None


# Decrypted documents by file, content and keys: a new revision decrypts only the encrypted files
# that changed (an age decryption costs ~0.5 ms). In memory only, bounded.
CACHE_SIZE = 4096
_CACHE: dict[tuple[str, str, tuple[str, ...]], Decrypted] = {}


def _fingerprint(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _placeholders(value: Any, path: tuple[str | int, ...], opaque: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: _placeholders(v, (*path, k), opaque) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders(v, (*path, i), opaque) for i, v in enumerate(value)]
    m = _ENC.match(value) if isinstance(value, str) else None
    if m is None:
        return value
    opaque.append(format_path(path))
    return _PLACEHOLDERS.get(m.group(1), "opaque")


def scrub(diags: Sequence[Diagnostic], secrets: Mapping[str, frozenset[str]],
          opaque: Mapping[str, Sequence[str]]) -> list[Diagnostic]:
    """Diagnostics with no plaintext of an encrypted file in them (messages may quote values), and
    none about values that were left encrypted."""
    out = []
    for d in diags:
        if any(d.path == p or d.path.startswith((p + ".", p + "[")) for p in opaque.get(d.file, ())):
            continue
        values = sorted((s for s in secrets.get(d.file, ()) if len(s) >= 3), key=len, reverse=True)
        message, hint = d.message, d.hint
        for v in values:
            message, hint = message.replace(v, REDACTED), hint.replace(v, REDACTED)
        out.append(replace(d, message=message, hint=hint) if values else d)
    return out
