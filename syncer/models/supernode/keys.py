"""OpenSSH private keys (the format Flower reads for node authentication) and public-key checks."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

_PUBLIC_KEY = re.compile(r"^(ecdsa-sha2-nistp(?:256|384|521)) ([A-Za-z0-9+/]+={0,2})(?: \S.*)?\Z")




# ---------------------------------------------------------------------------------------------
# Node-auth keys


class KeyFormatError(ValueError):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


_OPENSSH_BEGIN = "-----BEGIN OPENSSH PRIVATE KEY-----"
_OPENSSH_END = "-----END OPENSSH PRIVATE KEY-----"
_OPENSSH_MAGIC = b"openssh-key-v1\x00"
_CONVERT_HINT = ("Flower reads node-auth keys in OpenSSH format only: convert the key in place with "
                 "`ssh-keygen -p -m RFC4716 -f <keyfile>`, or generate one with `ssh-keygen -t ecdsa -b 384`")
GENERATE_HINT = 'generate an ECDSA key with `ssh-keygen -t ecdsa -b 384 -N "" -f <keyfile>`'


@dataclass(frozen=True)
class OpenSSHKey:
    key_type: str
    public_blob: bytes


def _ssh_string(buf: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    length = int.from_bytes(buf[pos:pos + 4], "big")
    end = pos + 4 + length
    if end > len(buf):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    return buf[pos + 4:end], end


def _printable(raw: bytes) -> str:
    text = raw.decode("ascii", errors="replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_openssh_private_key(text: str) -> OpenSSHKey:
    """Check that `text` is an unencrypted OpenSSH-format ECDSA private key, as Flower's loader
    demands. Raises KeyFormatError; messages never contain key material."""
    lines = [line.strip() for line in text.strip().splitlines()]
    first = lines[0] if lines else ""
    if first != _OPENSSH_BEGIN:
        if first in ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----"):
            raise KeyFormatError("node-auth private key is in PKCS#8 format, which Flower cannot read",
                                 _CONVERT_HINT)
        if first.startswith("-----BEGIN ") and first.endswith(" PRIVATE KEY-----"):
            kind = first[len("-----BEGIN "):-len(" PRIVATE KEY-----")]
            raise KeyFormatError(f"node-auth private key is a PEM {_printable(kind.encode())} key, not an "
                                 "OpenSSH-format key", _CONVERT_HINT)
        raise KeyFormatError(f"node-auth private key must start with {_OPENSSH_BEGIN}",
                             "paste the whole private key file, e.g. with `authSupernodePrivateKey: |+`")
    if lines[-1] != _OPENSSH_END or len(lines) < 3:
        raise KeyFormatError(f"node-auth private key must end with {_OPENSSH_END}",
                             "paste the whole key, including the END line")
    try:
        raw = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError(
            "node-auth private key body is not valid base64",
            "paste the key unchanged; a YAML block scalar (|+) keeps its lines intact",
        ) from None
    if not raw.startswith(_OPENSSH_MAGIC):
        raise KeyFormatError("node-auth private key is not an openssh-key-v1 structure", GENERATE_HINT)
    pos = len(_OPENSSH_MAGIC)
    cipher, pos = _ssh_string(raw, pos)
    _kdf, pos = _ssh_string(raw, pos)
    _kdf_options, pos = _ssh_string(raw, pos)
    if pos + 4 > len(raw):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    count = int.from_bytes(raw[pos:pos + 4], "big")
    pos += 4
    if count != 1:
        raise KeyFormatError(f"node-auth private key file holds {count} keys; Flower needs exactly one",
                             GENERATE_HINT)
    public_blob, pos = _ssh_string(raw, pos)
    key_type_raw, _ = _ssh_string(public_blob, 0)
    key_type = _printable(key_type_raw)
    if not key_type.startswith("ecdsa-sha2-"):
        raise KeyFormatError(f"node-auth private key is a {key_type} key; Flower needs an ECDSA key "
                             "(ecdsa-sha2-nistp384)", GENERATE_HINT)
    if cipher != b"none":
        raise KeyFormatError("node-auth private key is protected by a passphrase, which Flower cannot supply",
                             'remove the passphrase with `ssh-keygen -p -N "" -f <keyfile>`')
    return OpenSSHKey(key_type, public_blob)


def public_key_problem(text: str, private: OpenSSHKey | None) -> tuple[str, str] | None:
    """Why an OpenSSH public key line is unusable (message, hint), or None."""
    match = _PUBLIC_KEY.match(text.strip())
    hint = "paste the public key line, e.g. the content of <keyfile>.pub: `ecdsa-sha2-nistp384 AAAA...`"
    if not match:
        return "node-auth public key must look like `ecdsa-sha2-nistp384 <base64>`", hint
    try:
        blob = base64.b64decode(match.group(2), validate=True)
        key_type, _ = _ssh_string(blob, 0)
    except (binascii.Error, ValueError):
        return "node-auth public key is not valid base64 OpenSSH key data", hint
    if key_type.decode("ascii", errors="replace") != match.group(1):
        return "node-auth public key data does not match its type prefix", hint
    if private is not None and blob != private.public_blob:
        return ("node-auth public key does not belong to the private key",
                "use the .pub file written next to the private key, or `ssh-keygen -y -f <keyfile>`")
    return None
