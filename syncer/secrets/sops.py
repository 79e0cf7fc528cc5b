"""Decrypt SOPS-encrypted YAML documents natively, in memory (no sops binary, no temporary file).

The format, as the sops CLI writes it (v3): every value chosen for encryption becomes
`ENC[AES256_GCM,data:<b64>,iv:<b64>,tag:<b64>,type:<str|int|int64|float|bool|bytes|comment>]`,
sealed with AES-256-GCM under a random 32-byte data key, with the value's path in the document
(`key:key:...:`, list items sharing their list's path) as additional data. The data key is
encrypted for each recipient; here: age X25519 recipients (`sops.age[].enc`, armored). The `mac`
is the uppercase hex SHA-512 over every value's plaintext in document order (or only the
encrypted ones with `mac_only_encrypted`), itself sealed with the data key and `lastmodified` as
additional data. A file decrypts only if its MAC verifies: a value changed, added, removed or
moved is refused, as sops refuses it.

Plaintext never leaves the returned document: errors name the file and what failed, never a value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

METADATA_KEY = "sops"
_ENC = re.compile(r"ENC\[AES256_GCM,data:([^,]*),iv:([^,]*),tag:([^,]*),type:([^\]]*)\]\Z")
_MAC_ONLY_ENCRYPTED_INIT = hashlib.sha256(b"sops").digest()  # what sops prefixes to such a MAC
_ARMOR = re.compile(r"-----BEGIN AGE ENCRYPTED FILE-----(.*?)-----END AGE ENCRYPTED FILE-----", re.S)


class SopsError(Exception):
    """A SOPS file that cannot be used; `detail` says why in plain words, without secret values."""

    def __init__(self, detail: str, hint: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.hint = hint


def is_encrypted(data: Any) -> bool:
    """A document sops encrypted: a mapping with a `sops` metadata mapping (whether or not it is
    complete: a truncated one must be refused, not read as plain values)."""
    return isinstance(data, dict) and isinstance(data.get(METADATA_KEY), dict)


@dataclass(frozen=True)
class Decrypted:
    data: dict[str, Any]  # the document without its `sops` metadata, values in plaintext
    secrets: frozenset[str]  # the encrypted scalars as text (any type), so callers keep them out of output
    seal_key: bytes = b""
    """A key derived from the file's data key (known only to holders of a decryption key): what
    flower-syncer keys digests of this file's secrets with, never a plain hash."""


def decrypt_document(data: dict[str, Any], identities: Sequence[Any]) -> Decrypted:
    """Decrypt a sops document with any of the age identities (pyrage x25519 Identity objects).
    Raises SopsError for a missing key, a wrong key, a tampered or truncated file, and for
    what flower-syncer does not support (PGP/KMS/Vault-only files, several key groups)."""
    return decrypt_documents([data], identities)[0]


def decrypt_documents(docs: Sequence[dict[str, Any]], identities: Sequence[Any]) -> list[Decrypted]:
    """The documents of one multi-document file: sops encrypts them with one data key, writes the
    same metadata into each, and computes one MAC over all of them in order, so they are
    decrypted and verified together (a document moved, dropped or added fails the MAC)."""
    meta = docs[0][METADATA_KEY]
    if any(d.get(METADATA_KEY) != meta for d in docs[1:]):
        raise SopsError("the documents of this file carry different sops metadata (files encrypted apart and "
                        "joined?)", "encrypt the whole file with one `sops encrypt`, or keep one file per document")
    _check_supported(meta)
    key = _data_key(meta, identities)
    rules = _Rules.of(meta)
    digest = hashlib.sha512()
    if rules.mac_only_encrypted:
        digest.update(_MAC_ONLY_ENCRYPTED_INIT)
    out = []
    for data in docs:
        secrets: set[str] = set()
        body = {k: v for k, v in data.items() if k != METADATA_KEY}
        out.append((_walk_mapping(body, [], key, rules, digest, secrets), secrets))
    _verify_mac(meta, key, digest.hexdigest().upper())
    seal_key = hmac.new(key, b"flower-syncer seal key", hashlib.sha256).digest()
    return [Decrypted(plain, frozenset(s for s in secrets if s), seal_key) for plain, secrets in out]


# -- metadata and keys -------------------------------------------------------------------------------


def _check_supported(meta: dict[str, Any]) -> None:
    if meta.get("key_groups") and len(meta["key_groups"]) > 1:
        raise SopsError("the file splits its data key over several key groups (Shamir)",
                        "encrypt it for age recipients in one key group")
    for regex in ("encrypted_comment_regex", "unencrypted_comment_regex"):
        if meta.get(regex):
            raise SopsError(f"the sops option {regex} is not supported",
                            "use encrypted_regex, unencrypted_regex or a suffix instead")
    if not _age_entries(meta):
        others = sorted(k for k in ("pgp", "kms", "gcp_kms", "azure_kv", "hc_vault") if meta.get(k))
        raise SopsError(f"the file has no age recipient (only: {', '.join(others) or 'none'})",
                        "add an age recipient (sops updatekeys, with the agent's public key in .sops.yaml)")


def _age_entries(meta: dict[str, Any]) -> list[dict[str, Any]]:
    entries = list(meta.get("age") or [])
    for group in meta.get("key_groups") or []:
        if isinstance(group, dict):
            entries.extend(group.get("age") or [])
    return [e for e in entries if isinstance(e, dict)]


def _data_key(meta: dict[str, Any], identities: Sequence[Any]) -> bytes:
    import pyrage

    if not identities:
        raise SopsError("the file is encrypted with SOPS and no decryption key was given",
                        "pass --decryption-key-file with an age identity (AGE-SECRET-KEY-1...)")
    for entry in _age_entries(meta):
        blob = _dearmor(str(entry.get("enc", "")))
        if blob is None:
            continue
        try:
            key = pyrage.decrypt(blob, list(identities))
        except (pyrage.DecryptError, ValueError, TypeError):
            continue
        if len(key) == 32:
            return bytes(key)
    recipients = ", ".join(str(e.get("recipient", "?")) for e in _age_entries(meta))
    raise SopsError(f"none of the decryption keys opens the file (it is encrypted for {recipients})",
                    "give the key of one of these recipients, or re-encrypt the file for the agent's key")


def _dearmor(text: str) -> bytes | None:
    m = _ARMOR.search(text)
    if m is None:
        return None
    try:
        return base64.b64decode("".join(m.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return None


@dataclass(frozen=True)
class _Rules:
    unencrypted_suffix: str
    encrypted_suffix: str
    unencrypted_regex: re.Pattern[str] | None
    encrypted_regex: re.Pattern[str] | None
    mac_only_encrypted: bool

    @classmethod
    def of(cls, meta: dict[str, Any]) -> _Rules:
        def rx(name: str) -> re.Pattern[str] | None:
            value = meta.get(name)
            if not value:
                return None
            try:
                return re.compile(str(value))
            except re.error as exc:
                raise SopsError(f"the sops option {name} is not a valid regular expression: {exc}") from None

        return cls(str(meta.get("unencrypted_suffix") or ""), str(meta.get("encrypted_suffix") or ""),
                   rx("unencrypted_regex"), rx("encrypted_regex"), bool(meta.get("mac_only_encrypted")))

    def encrypted(self, path: list[str]) -> bool:
        """sops' rule for whether the value at `path` was encrypted."""
        result = True
        if self.unencrypted_suffix and any(p.endswith(self.unencrypted_suffix) for p in path):
            result = False
        if self.encrypted_suffix:
            result = any(p.endswith(self.encrypted_suffix) for p in path)
        if self.unencrypted_regex is not None and any(self.unencrypted_regex.search(p) for p in path):
            result = False
        if self.encrypted_regex is not None:
            result = any(self.encrypted_regex.search(p) for p in path)
        return result


# -- the tree ----------------------------------------------------------------------------------------


def _walk_mapping(node: dict[str, Any], path: list[str], key: bytes, rules: _Rules, digest: Any,
                  secrets: set[str]) -> dict[str, Any]:
    return {k: _walk(v, [*path, str(k)], key, rules, digest, secrets) for k, v in node.items()}


def _walk(value: Any, path: list[str], key: bytes, rules: _Rules, digest: Any, secrets: set[str]) -> Any:
    if isinstance(value, dict):
        return _walk_mapping(value, path, key, rules, digest, secrets)
    if isinstance(value, list):
        return [_walk(item, path, key, rules, digest, secrets) for item in value]  # items share the path
    if value is None:
        return None
    encrypted = rules.encrypted(path)
    plain = _decrypt_value(value, key, ":".join(path) + ":") if encrypted else value
    if not rules.mac_only_encrypted or encrypted:
        digest.update(_to_bytes(plain))
    if encrypted:
        secrets.add(scalar_text(plain))
    return plain


def scrubbable(text: str) -> bool:
    """Whether a secret's text may be blanked out wherever it occurs in output: three characters or
    more (shorter ones would blank out ordinary words), and not a boolean (`true` is everywhere;
    encrypted booleans and short numbers reach pods through Secrets instead, see
    syncer.render.encrypted_values)."""
    return len(text) >= 3 and text not in ("true", "false")


REDACTED = "**redacted**"  # what output shows in place of a secret's value


def redact_text(text: str, secrets: frozenset[str]) -> str:
    """`text` with every plaintext value of an encrypted file replaced by REDACTED (the values
    `scrubbable` allows), longest first."""
    for value in sorted((v for v in secrets if scrubbable(v)), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def scalar_text(value: Any) -> str:
    """How a decrypted scalar of any type reads in rendered text (args, env): ints exactly,
    floats as Python writes them, booleans as YAML does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return value if isinstance(value, str) else str(value)


def _decrypt_value(value: Any, key: bytes, aad: str) -> Any:
    if value == "":
        return ""  # sops leaves empty strings as they are
    m = _ENC.match(value) if isinstance(value, str) else None
    if m is None:
        raise SopsError(f"the value at {aad[:-1] or '(top)'} should be encrypted but is not",
                        "the file was edited by hand after encryption: edit it with `sops` instead")
    from cryptography.exceptions import InvalidTag  # only for a file that is decrypted
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        data, iv, tag = (base64.b64decode(m.group(i), validate=True) for i in (1, 2, 3))
        raw = AESGCM(key).decrypt(iv, data + tag, aad.encode())
    except (binascii.Error, ValueError, InvalidTag):
        raise SopsError(f"the value at {aad[:-1]} does not decrypt (changed, moved or truncated)",
                        "restore the file from Git, or edit it with `sops`") from None
    return _typed(raw, m.group(4), aad)


def _typed(raw: bytes, kind: str, aad: str) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        if kind == "str":
            return raw.decode("utf-8")
        if kind in ("int", "int64"):
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            return {"true": True, "false": False}[text.lower()]
        if kind == "bytes":
            return raw.decode("utf-8", "replace")
    except (ValueError, KeyError, UnicodeDecodeError):
        raise SopsError(f"the value at {aad[:-1]} is not a valid {kind}") from None
    raise SopsError(f"the value at {aad[:-1]} has a type sops does not write here: {kind}")


def _to_bytes(value: Any) -> bytes:
    """sops' ToBytes: what a value contributes to the MAC."""
    if isinstance(value, bool):
        return b"True" if value else b"False"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return _go_float(value).encode()
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def _go_float(value: float) -> str:
    """Go's strconv.FormatFloat(v, 'f', -1, 64): the shortest decimal that reads back, no exponent."""
    text = repr(value)
    if "e" in text or "E" in text:
        from decimal import Decimal

        text = format(Decimal(text), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _verify_mac(meta: dict[str, Any], key: bytes, computed: str) -> None:
    mac = meta.get("mac")
    lastmodified = meta.get("lastmodified")
    if not isinstance(mac, str) or not mac:
        raise SopsError("the file has no MAC: it cannot be checked for tampering", "encrypt it again with `sops`")
    try:
        stored = _decrypt_value(mac, key, str(lastmodified if lastmodified is not None else ""))
    except SopsError:
        raise SopsError("the file's MAC (or its lastmodified time) was changed or damaged",
                        "restore it from Git, or edit it with `sops`, which updates the MAC") from None
    if not isinstance(stored, str) or not hmac.compare_digest(stored.upper(), computed):
        raise SopsError("the file's MAC does not match its contents: it was changed after it was encrypted",
                        "restore it from Git, or edit it with `sops`, which updates the MAC")


def walk_secrets(data: Any) -> Iterator[str]:
    """Every string in a decrypted document (for redaction by callers)."""
    if isinstance(data, dict):
        for v in data.values():
            yield from walk_secrets(v)
    elif isinstance(data, list):
        for v in data:
            yield from walk_secrets(v)
    elif isinstance(data, str):
        yield data
