"""Shared builders for tests: Federation YAML, config repositories on disk, and a sync of one
through the engine on a given API client. A helper module, not a test module: tests import from
here (and from tests/fakekube.py, tests/conftest.py), never from each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.cluster.client import Kube
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo

NS = "flower"
# A minimal valid Federation: `FED.format(name=..., pools=..., annotations=...)`, pools from `pool`.
FED = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:1.25.0
  supernodes:
    image: flwr/supernode:1.25.0
    pools:
{pools}
"""


def pool(name: str, replicas: int = 1) -> str:
    """One entry of `spec.supernodes.pools`, indented for `FED`."""
    return f"      - name: {name}\n        replicas: {replicas}\n        images: {{}}\n"


def federation(name: str = "fed", pools: str = "", annotations: str = "", *, insecure: bool | None = None,
               version: str = "1.25.0") -> str:
    """The text of a Federation `name` with `pools` (default: one pool "a" of one replica), the
    `annotations` (the inside of a flow mapping), `insecure` when given, and the images of Flower
    `version`."""
    text = FED.format(name=name, pools=pools or pool("a"), annotations=annotations)
    if insecure is not None:
        text = text.replace("  isolationMode: subprocess\n",
                            f"  isolationMode: subprocess\n  insecure: {str(insecure).lower()}\n", 1)
    return text.replace(":1.25.0\n", f":{version}\n")


def write(repo: Path, name: str = "fed", pools: str = "", annotations: str = "", repo_name: str = "team") -> Path:
    """A config repository at `repo` (settings named `repo_name`, default namespace NS) with the
    Federation `name` in federations/<name>.yaml; returns `repo`."""
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {repo_name}\ndefaultNamespace: {NS}\n")
    (repo / "federations" / f"{name}.yaml").write_text(federation(name, pools, annotations))
    return repo


def sync(kube: Kube, repo: Path, **opts: bool) -> SyncReport:
    """Load, render, plan and sync the repository at `repo` once (revision "r1")."""
    state = load_repo(repo)
    return Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions(**opts))


def by_kind(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The manifest of `kind` named `name` (fails the test when there is none)."""
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def tls_material(common_name: str, sans: list[str]) -> dict[str, bytes]:
    """A fresh CA and a server certificate for `sans` (DNS names and IPs), PEM: tls.crt, tls.key, ca.crt."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    names: list[x509.GeneralName] = []
    for san in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return {"tls.crt": cert.public_bytes(serialization.Encoding.PEM),
            "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()),
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM)}


def secret_yaml(name: str, data: dict[str, bytes], kind: str = "kubernetes.io/tls") -> str:
    """A Secret manifest with `data` as stringData (text: it stays readable once sops encrypts it,
    and `validate` without the key checks it with the values left opaque)."""
    import yaml

    return str(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind,
                               "stringData": {k: v.decode() for k, v in sorted(data.items())}}, sort_keys=False))


def tls_secret_yaml(name: str, sans: list[str]) -> str:
    """A kubernetes.io/tls Secret manifest with a fresh certificate for `sans` (its CA in ca.crt)."""
    return secret_yaml(name, tls_material(sans[0], sans))
