"""Shared builders for tests: Federation YAML, config repositories on disk, and a sync of one
through the engine on a given API client. A helper module, not a test module: tests import from
here (and from tests/fakekube.py, tests/conftest.py), never from each other."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syncer.cluster.client import Kube
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo

if TYPE_CHECKING:
    from syncer.agent.agent import Agent
    from syncer.identity import Unit

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


def pool(name: str, replicas: int | str = 1, extra: str = "") -> str:
    """One entry of `spec.supernodes.pools`, indented for `FED`; `extra`: more lines of the entry
    (indented 8 spaces)."""
    return f"      - name: {name}\n        replicas: {replicas}\n        images: {{}}\n{extra}"


def federation(name: str = "fed", pools: str = "", annotations: str = "", *, insecure: bool | None = None,
               version: str = "1.25.0", mode: str = "StatefulSet", isolation: str = "subprocess",
               superlink: str = "", supernodes: str = "") -> str:
    """The text of a Federation `name` with `pools` (default: one pool "a" of one replica), the
    `annotations` (the inside of a flow mapping), `insecure` when given, and the images of Flower
    `version`, in `mode` and `isolation`. `superlink` and `supernodes`: more lines of those
    sections (indented 4 spaces; the SuperNodes' go before their pools)."""
    text = FED.format(name=name, pools=pools or pool("a"), annotations=annotations)
    if insecure is not None:
        text = text.replace("  isolationMode: subprocess\n",
                            f"  isolationMode: subprocess\n  insecure: {str(insecure).lower()}\n", 1)
    text = text.replace("  mode: StatefulSet\n", f"  mode: {mode}\n", 1)
    text = text.replace("  isolationMode: subprocess\n", f"  isolationMode: {isolation}\n", 1)
    text = text.replace("    image: flwr/superlink:1.25.0\n", f"    image: flwr/superlink:1.25.0\n{superlink}", 1)
    text = text.replace("    image: flwr/supernode:1.25.0\n", f"    image: flwr/supernode:1.25.0\n{supernodes}", 1)
    return text.replace(":1.25.0\n", f":{version}\n").rstrip("\n") + "\n"  # tests append more pools


def write(repo: Path, name: str = "fed", pools: str = "", annotations: str = "", repo_name: str = "team") -> Path:
    """A config repository at `repo` (settings named `repo_name`, default namespace NS) with the
    Federation `name` in federations/<name>.yaml; returns `repo`."""
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {repo_name}\ndefaultNamespace: {NS}\n")
    (repo / "federations" / f"{name}.yaml").write_text(federation(name, pools, annotations))
    return repo


# SuperNode release values that carry secrets (a token and a big number in the node config, an env
# value): what the SOPS and secret-leak tests encrypt
SECRET_VALUES = """\
tls:
  enabled: false
supernode:
  replicas: 2
  node:
    config:
      lr: 0.05
      epochs: 3
      big: 12345678901234567
      flag: true
      token: s3cr3t-token-value
  env:
    - name: API_KEY
      value: top-secret-api-key
"""


def secret_manifest(password: str) -> str:
    """A Secret manifest (edge-credentials) with `password` in its stringData."""
    return ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: edge-credentials\ntype: Opaque\nstringData:\n"
            f"  password: {password}\n")


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}


def git(cwd: Path, *args: str) -> str:
    """`git args` in `cwd` as the test author (no global config needed); its output, stripped."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                         env={**os.environ, **GIT_ENV})
    return out.stdout.strip()


def committed_repo(path: Path, namespace: str, *feds: str, settings: str = "", extra: Mapping[str, str] | None = None,
                   pools: str = "") -> Path:
    """A config repository at `path`, a Git work tree on `main`, with the federations `feds` (each
    with `pools`, default one pool "a") in `namespace`, the `extra` files and the lines `settings`
    of flower-syncer.yaml, all committed. Called again on the same path, it replaces the
    federations and commits again."""
    (path / "federations").mkdir(parents=True, exist_ok=True)
    for old in (path / "federations").glob("*.yaml"):
        old.unlink()
    for name in feds:
        (path / "federations" / f"{name}.yaml").write_text(federation(name, pools))
    for rel, text in (extra or {}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    (path / "flower-syncer.yaml").write_text(f"defaultNamespace: {namespace}\n{settings}")
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", "c")
    return path


def sync(kube: Kube, repo: Path, *, selectors: Sequence[str] = (), revision: str = "r1", **opts: Any) -> SyncReport:
    """Load, render, plan and sync the repository at `repo` once, as `revision` (the engine records
    a checked revision only when there is one), the units `selectors` name (default: all)."""
    state = load_repo(repo)
    rendered = render_repo(state, list(selectors))
    return Engine(kube).sync(plan_repo(state, rendered, selectors=selectors, revision=revision), SyncOptions(**opts))


def by_kind(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The manifest of `kind` named `name` (fails the test when there is none)."""
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def repo_at(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def install(agent: Agent, root: Path, revision: str) -> list[Unit]:
    """As the dispatcher does: load with the agent's caches, then install."""
    loaded = agent.installer.loader.load(root)
    changed = agent.installer.install(loaded.state, loaded.rendered, revision)
    agent.loaded.set()
    return changed


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


def keypair(tmp: Path, name: str) -> tuple[str, str]:
    """An OpenSSH ECDSA key pair (Flower reads no other private key format): (private, public)."""
    path = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", f"{name}@e2e", "-f", str(path)], check=True)
    return path.read_text(), (tmp / f"{name}.pub").read_text().strip()


def secret_yaml(name: str, data: dict[str, bytes], kind: str = "kubernetes.io/tls") -> str:
    """A Secret manifest with `data` as stringData (text: it stays readable once sops encrypts it,
    and `validate` without the key checks it with the values left opaque)."""
    import yaml

    return str(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind,
                               "stringData": {k: v.decode() for k, v in sorted(data.items())}}, sort_keys=False))


def tls_secret_yaml(name: str, sans: list[str]) -> str:
    """A kubernetes.io/tls Secret manifest with a fresh certificate for `sans` (its CA in ca.crt)."""
    return secret_yaml(name, tls_material(sans[0], sans))
