"""Node authentication's test helpers, shared by the unit, integration and reliability tests: a
Federation template with SuperNode keys (`FED`), an SSH key pair made by `ssh-keygen` (`keypair`),
`FakeSuperLink`, a Control API that behaves as Flower's does, and `certificates` for a SuperLink on
127.0.0.1 (a CA and a server certificate). A helper module, not a test module: tests import from
here, never from each other."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from syncer.cluster.flower_control import (
    ControlApiError,
    ControlErrorCode,
    Listing,
    RegisteredNode,
    RunInfo,
    Transport,
)


def keypair(tmp_path: Path, name: str, kind: str = "ecdsa") -> tuple[Path, str]:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"{name}@site", "-f", str(path)], check=True)
    return path, (tmp_path / f"{name}.pub").read_text().strip()


FED = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: fed
  annotations:
    flower-syncer.io/superlink-tls-secret: superlink-tls
    flower-syncer.io/supernode-auth: {mode}
    flower-syncer.io/supernode-public-keys: |
{keys}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: {insecure}
  superlink:
    image: {image}
  supernodes:
    image: flwr/supernode:1.26.0
    pools:
      - name: a
        replicas: {replicas}
        extraArgs: [{args}]
"""


class FakeSuperLink:
    """A SuperLink's Control API as Flower behaves: a key once registered is never registered
    again (not even after it was unregistered)."""

    address = "fake:8000"
    transport: Transport = "http"

    def __init__(self, nodes: list[RegisteredNode]) -> None:
        self.nodes = nodes
        self.calls: list[str] = []

    def list_nodes(self) -> Listing[RegisteredNode]:
        return Listing(self.nodes)

    def register(self, public_key: bytes) -> int:
        self.calls.append("register")
        if any(n.public_key == public_key for n in self.nodes):
            raise ControlApiError("RegisterNode", "fake", ControlErrorCode.KEY_IN_USE, "Public key already in use.")
        node = RegisteredNode(100 + len(self.nodes), "registered", public_key)
        self.nodes.append(node)
        return node.node_id

    def unregister(self, node_id: int) -> None:
        self.calls.append(f"unregister {node_id}")
        self.nodes = [RegisteredNode(n.node_id, "unregistered", n.public_key) if n.node_id == node_id else n
                      for n in self.nodes]

    def list_runs(self) -> Listing[RunInfo]:
        return Listing()

    def close(self) -> None:
        pass


def pem(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def certificates() -> tuple[bytes, bytes, bytes]:
    """(CA certificate, server certificate for localhost and 127.0.0.1, server key), PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flower-syncer test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    return pem(ca), pem(server), pem(key)


def auth_federation(name: str, address: str | None = None, *, keys: str = "      # none") -> str:
    """`FED` on Flower 1.42 as the Federation `name`, node authentication enabled with the `keys`
    (lines indented 6 spaces) and, when given, the Control API `address` annotation."""
    text = FED.format(mode="enabled", keys=keys, insecure="false", replicas=1, image="flwr/superlink:1.42.0",
                      args="--auth-supernode-private-key=/keys/a").replace("flwr/supernode:1.26.0",
                                                                          "flwr/supernode:1.42.0")
    text = text.replace("name: fed\n", f"name: {name}\n", 1)
    if address is not None:
        text = text.replace("    flower-syncer.io/supernode-auth:", f"    flower-syncer.io/control-api-address: "
                            f"{address}\n    flower-syncer.io/supernode-auth:")
    return text


def error_of(call: Callable[[], object]) -> ControlApiError:
    """The ControlApiError that `call` raises (the test fails if it raises none)."""
    with pytest.raises(ControlApiError) as caught:
        call()
    return caught.value
