"""SuperNode authentication for a Federation, declared in its annotations (the document stays a
valid flower-operator document):

    flower-syncer.io/supernode-auth: enabled
    flower-syncer.io/supernode-public-keys: |
      ecdsa-sha2-nistp384 AAAAE2VjZHNh... edge-site-1
      ecdsa-sha2-nistp256 AAAAE2VjZHNh... edge-site-2

The SuperLink then runs with `--enable-supernode-auth` (Flower 1.23+, TLS only) and admits only
SuperNodes whose public key was registered through its Control API; flower-syncer keeps the
registered set equal to this list (syncer.engine.nodekeys). Keys are OpenSSH public keys on a NIST
elliptic curve, as `ssh-keygen -t ecdsa` writes them and `flwr supernode register` accepts.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ANN_SUPERNODE_AUTH = "flower-syncer.io/supernode-auth"  # enabled | disabled (default)
ANN_SUPERNODE_KEYS = "flower-syncer.io/supernode-public-keys"  # one OpenSSH public key per line
ANN_CONTROL_API_ADDRESS = "flower-syncer.io/control-api-address"  # where the agent reaches the Control API
CONTROL_API_PORT = 9093
AUTH_SINCE = (1, 23)  # --enable-supernode-auth with keys registered through the Control API
# From 1.37 Flower serves the Control API over HTTP and marks its gRPC address flag deprecated
# (checked in the wheels: HTTP routers since 1.33, the flag deprecated since 1.37).
GRPC_CONTROL_DEPRECATED = (1, 37)

_NIST = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)


@dataclass(frozen=True)
class NodeKey:
    pem: bytes  # SubjectPublicKeyInfo PEM: what the Control API stores and returns
    fingerprint: str  # SHA256:... of the OpenSSH key, as `ssh-keygen -lf` prints it
    comment: str = ""

    @property
    def label(self) -> str:
        return f"{self.fingerprint} ({self.comment})" if self.comment else self.fingerprint


def parse_keys(text: str) -> tuple[list[NodeKey], list[tuple[int, str]]]:
    """The keys, and (line index in `text`, problem) for each line that is not a usable key.
    Empty lines and `#` comments are skipped."""
    keys: list[NodeKey] = []
    problems: list[tuple[int, str]] = []
    seen: set[bytes] = set()
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, problem = parse_key(line)
        if key is None:
            problems.append((i, problem))
        elif key.pem in seen:
            problems.append((i, f"key {key.fingerprint} is listed twice"))
        else:
            seen.add(key.pem)
            keys.append(key)
    return keys, problems


def parse_key(line: str) -> tuple[NodeKey | None, str]:
    parts = line.split(None, 2)
    try:
        public = serialization.load_ssh_public_key(" ".join(parts[:2]).encode())
    except (ValueError, IndexError, TypeError) as exc:
        return None, f"not an OpenSSH public key ({exc})"
    if not isinstance(public, ec.EllipticCurvePublicKey) or not isinstance(public.curve, _NIST):
        return None, (f"a {parts[0]} key: Flower admits ECDSA keys on NIST curves only "
                      "(ssh-keygen -t ecdsa -b 384)")
    blob = base64.b64decode(parts[1])
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return NodeKey(pem, fingerprint, parts[2].strip() if len(parts) > 2 else ""), ""
