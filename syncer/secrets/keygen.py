"""A new age key pair, as `age-keygen` makes it (it is not installed everywhere; the `sops` CLI and
flower-syncer need only the identity file): an X25519 private key, spelled in Bech32 as age spells
it, `AGE-SECRET-KEY-1...` (upper case) for the identity and `age1...` for the recipient.
tests/unit/test_keygen.py checks it against pyrage, the age implementation that decrypts."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


def _polymod(values: list[int]) -> int:
    chk = 1
    for value in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ value
        for i, g in enumerate(_GENERATOR):
            chk ^= g if (top >> i) & 1 else 0
    return chk


def bech32(hrp: str, data: bytes) -> str:
    """BIP 173 Bech32 (not Bech32m, and without its 90-character limit, as age uses it)."""
    acc, bits, words = 0, 0, []
    for byte in data:  # 8-bit bytes to 5-bit words, the last one padded with zeros
        acc, bits = acc << 8 | byte, bits + 8
        while bits >= 5:
            bits -= 5
            words.append(acc >> bits & 31)
    if bits:
        words.append(acc << (5 - bits) & 31)
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    mod = _polymod(expanded + words + [0] * 6) ^ 1
    checksum = [mod >> 5 * (5 - i) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[w] for w in words + checksum)


@dataclass(frozen=True)
class AgeKey:
    identity: str  # AGE-SECRET-KEY-1...: the private key, for flower-syncer and sops
    recipient: str  # age1...: the public key, for .sops.yaml's creation rules

    def file_text(self, now: datetime | None = None) -> str:
        """The identity file as age-keygen writes it: two comment lines, then the key."""
        created = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"# created: {created}\n# public key: {self.recipient}\n{self.identity}\n"


def from_private_bytes(secret: bytes) -> AgeKey:
    public = X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return AgeKey(bech32("age-secret-key-", secret).upper(), bech32("age", public))


def generate() -> AgeKey:
    return from_private_bytes(secrets.token_bytes(32))
