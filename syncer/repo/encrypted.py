"""SOPS-encrypted documents in the loader: opened with the repository's decryption keys (or, for
`validate` without keys, checked with their encrypted values left opaque), and diagnostics kept
free of the plaintext."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import BaseModel

from syncer.diagnostics import DECRYPTION, Diagnostic, format_path
from syncer.secrets.keys import Decryption
from syncer.secrets.sops import METADATA_KEY, SopsError, decrypt_documents, redact_text
from syncer.yamldoc import YamlDoc

M = TypeVar("M", bound=BaseModel)
_ENC = re.compile(r"ENC\[AES256_GCM,data:[^,]*,iv:[^,]*,tag:[^,]*,type:([^\]]*)\]\Z")
_PLACEHOLDERS: dict[str, Any] = {"int": 0, "int64": 0, "float": 0.0, "bool": False}


@dataclass(frozen=True)
class Opened:
    doc: YamlDoc
    secrets: frozenset[str] = frozenset()
    opaque: tuple[str, ...] = ()  # field paths left encrypted (no key; validate only)
    seal_key: bytes = b""  # see syncer.secrets.sops.Decrypted


def open_document(doc: YamlDoc, decryption: Decryption) -> tuple[Opened | None, Diagnostic | None]:
    """The document decrypted; or, without a key when none is required, with placeholders where
    values are encrypted (and a warning); or None and an error naming the file."""
    opened, problems = open_documents([doc], decryption)
    return opened[0], (problems[0] if problems else None)


def open_documents(docs: Sequence[YamlDoc], decryption: Decryption) -> tuple[list[Opened | None], list[Diagnostic]]:
    """The SOPS documents of one file, decrypted together (sops computes one MAC over all the
    documents of a file); see `open_document`. The loader keeps what it opened by file content, so
    an unchanged file is not decrypted again."""
    first = docs[0]
    line = first.position((METADATA_KEY,))[0] or first.start_line
    if not decryption.identities and not decryption.required:
        out: list[Opened | None] = []
        for doc in docs:
            opaque: list[str] = []
            body = _placeholders({k: v for k, v in doc.data.items() if k != METADATA_KEY}, (), opaque)
            out.append(Opened(replace(doc, data=body), opaque=tuple(opaque)))
        warning = Diagnostic(first.file, line, 1, "", "encrypted with SOPS: its encrypted values are not checked "
                             "(no decryption key)", "pass --decryption-key-file to check them too", "warning")
        return out, [warning]
    try:
        decrypted = decrypt_documents([d.data for d in docs], decryption.identities)
    except SopsError as exc:
        return [None] * len(docs), [Diagnostic(first.file, line, 1, "", f"cannot decrypt this SOPS file: "
                                               f"{exc.detail}", exc.hint or "check the file and the decryption keys",
                                               code=DECRYPTION)]
    return [Opened(replace(doc, data=d.data), d.secrets, seal_key=d.seal_key)
            for doc, d in zip(docs, decrypted, strict=True)], []


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
    return [_redacted(d, secrets.get(d.file, frozenset())) for d in diags if not _about(d, opaque.get(d.file, ()))]


def _about(d: Diagnostic, opaque: Sequence[str]) -> bool:
    return any(d.path == p or d.path.startswith((p + ".", p + "[")) for p in opaque)


def opaque_only(cls: type[M], doc: YamlDoc, opaque: Sequence[str], problems: Sequence[Diagnostic]) -> M | None:
    """The model of a document checked without its key (`validate`, or another cluster's file:
    syncer.repo.clusters) whose only errors are about values left encrypted (a node-auth private
    key, say): `scrub` drops those errors, so the unit must not fail for them either. A model with
    placeholders, which nothing applies (an apply needs the key); None when other errors remain."""
    errors = [d for d in problems if d.severity == "error"]
    if not opaque or not errors or not all(_about(d, opaque) for d in errors):
        return None
    try:
        return cls.model_validate(doc.data)
    except ValueError:
        return None


def redact_values(diags: Sequence[Diagnostic], secrets: frozenset[str]) -> list[Diagnostic]:
    """Diagnostics made after loading (rendering, guardrails, the admin's policy) with no plaintext
    of any encrypted file of the repository in them: a rendered value may come from any file."""
    return [_redacted(d, secrets) for d in diags] if secrets else list(diags)


def _redacted(d: Diagnostic, secrets: frozenset[str]) -> Diagnostic:
    message, hint = redact_text(d.message, secrets), redact_text(d.hint, secrets)
    return replace(d, message=message, hint=hint) if (message, hint) != (d.message, d.hint) else d

