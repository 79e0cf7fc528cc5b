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
import binascii
import fnmatch
import hashlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

ANN_SUPERNODE_AUTH = "flower-syncer.io/supernode-auth"  # enabled | disabled (default)
ANN_SUPERNODE_KEYS = "flower-syncer.io/supernode-public-keys"  # one OpenSSH public key per line
ANN_CONTROL_API_ADDRESS = "flower-syncer.io/control-api-address"  # where the agent reaches the Control API
CONTROL_API_PORT = 9093  # gRPC Control (--control-api-address), Flower before 1.37
# Which transport and port a release's Control API has: syncer.models.flower (control_transport,
# control_port): gRPC on 9093 before 1.37, HTTP on the SuperLink's --port (8000) from 1.37.


@dataclass(frozen=True)
class NodeKey:
    pem: bytes  # SubjectPublicKeyInfo PEM: what the Control API stores and returns
    fingerprint: str  # SHA256:... of the OpenSSH key, as `ssh-keygen -lf` prints it
    comment: str = ""

    @property
    def label(self) -> str:
        return f"{self.fingerprint} ({self.comment})" if self.comment else self.fingerprint


_DNS_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(?!\d+$)")


def control_address_problem(address: str) -> str:
    """Why `address` is not a `host:port` the agent may dial ("" when it is one): no scheme (no
    `unix:`, `https://`), a DNS name or an IP address, a port 1-65535, nothing else."""
    if not address or any(c.isspace() or not c.isprintable() for c in address):
        return "is empty or holds spaces or control characters"
    if _SCHEME.match(address) or "/" in address or "@" in address:
        return "is not host:port (schemes such as unix: or https://, paths and user names are refused)"
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return "has no port 1-65535 (write host:port)"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "has a bracketed host that is not an IPv6 address"
        return ""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        if not _DNS_NAME.match(host):
            return "has a host that is neither a DNS name nor an IP address"
    return ""


def own_control_targets(superlink: str, namespace: str, port: int) -> tuple[str, ...]:
    """The addresses of a federation's own SuperLink Service at the Control port."""
    return tuple(f"{superlink}.{namespace}{suffix}:{port}" for suffix in ("", ".svc", ".svc.cluster.local"))


def control_target_allowed(address: str, own: Sequence[str], allowed: Sequence[str]) -> bool:
    """Whether the agent may register keys at `address`: the federation's own SuperLink Service,
    or a target the admin allows (`allowed`: patterns with * and ?, e.g. `*.flower.example.com:8000`,
    `127.0.0.1:*`)."""
    return address in own or any(fnmatch.fnmatchcase(address, pattern) for pattern in allowed)


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


KEY_HINT = "one OpenSSH ECDSA public key per line, as ssh-keygen -t ecdsa writes it (the .pub file)"


def parse_key(line: str) -> tuple[NodeKey | None, str]:
    """The key of one line, or None and why not. Never raises: what cannot be parsed is a problem."""
    parts = line.split(None, 2)
    if parts and parts[0] in ("-", "*"):
        return None, (f"starts with {parts[0]!r}: write the key alone on the line, without a list marker "
                      "(the annotation is one block of text, not a YAML list)")
    if len(parts) < 2:
        return None, "not an OpenSSH public key (expected: key type, base64 key, optional comment)"
    kind = _shown(parts[0])
    # cryptography's key parsers are slow to import: only a repository with keys makes `validate` pay it
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        public = serialization.load_ssh_public_key(" ".join(parts[:2]).encode())
    except UnsupportedAlgorithm:
        return None, f"a key of type {kind}, which is not an OpenSSH key type this parser knows"
    except (ValueError, IndexError, TypeError, binascii.Error) as exc:
        return None, f"not an OpenSSH public key of type {kind} ({_shown(str(exc))})"
    nist = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
    if not isinstance(public, ec.EllipticCurvePublicKey) or not isinstance(public.curve, nist):
        return None, (f"a {kind} key: Flower admits ECDSA keys on NIST curves only "
                      "(ssh-keygen -t ecdsa -b 384)")
    blob = base64.b64decode(parts[1])
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return NodeKey(pem, fingerprint, parts[2].strip() if len(parts) > 2 else ""), ""


def _shown(text: str, limit: int = 60) -> str:
    """Part of a line from Git, safe in a one-line diagnostic: escaped and bounded."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit - 3] + "..."
