"""Small helpers shared by the unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from syncer.diagnostics import Diagnostic
from syncer.identity import Manifest, Unit
from syncer.models.base import validate_document
from syncer.models.federation import Federation
from syncer.models.supernode import SuperNodeValues, validate_values
from syncer.render.common import RenderContext
from syncer.render.federation import render_federation
from syncer.render.supernode import render_supernode
from syncer.yamldoc import load_documents

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def load_federation(text: str, file: str = "federations/test.yaml") -> tuple[Federation | None, list[Any]]:
    docs, diags = load_documents(text, file)
    assert docs, diags
    model, problems = validate_document(Federation, docs[0])
    return model, diags + problems


def render_federation_text(text: str, namespace: str = "flower") -> dict[tuple[str, str], Manifest]:
    model, diags = load_federation(text)
    assert model is not None, [d.render() for d in diags]
    ctx = RenderContext(Unit("federation", namespace, model.name), "federations/test.yaml")
    return {(m["kind"], m["metadata"]["name"]): m for m in render_federation(model, ctx)}


def container(manifest: Manifest, name: str) -> dict[str, Any]:
    for c in manifest["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name}")


# ---- SuperNode values (test_supernode.py, test_flower_eras.py) -------------------------------


NODE_AUTH = """\
global:
  nodeAuth:
    enabled: true
    authSupernodePrivateKey: |+
{private}
    authSupernodePublicKey: {public}
tls:
  enabled: true
supernode:
  enabled: true
  superlink:
    address: my-superlink.example.com
    port: 9092
superexec:
  enabled: true
  supernode:
    address: my-supernode.example.com
    port: 9094
"""


def indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.rstrip("\n").splitlines())


def load_values(text: str, release: str = "test", file: str = "supernodes/test/values.yaml",
         ) -> tuple[SuperNodeValues | None, list[Diagnostic]]:
    docs, diags = load_documents(text, file)
    assert not diags, [d.render() for d in diags]
    if not docs:
        return SuperNodeValues(), []
    return validate_values(docs[0], release, unit=f"supernode/flower/{release}")


def render_values_list(text: str, release: str = "test", namespace: str = "flower") -> list[Manifest]:
    model, diags = load_values(text, release)
    assert model is not None, [d.render() for d in diags]
    ctx = RenderContext(Unit("supernode", namespace, release), f"supernodes/{release}/values.yaml")
    return render_supernode(model, release, ctx)


def render_values(text: str, release: str = "test", namespace: str = "flower") -> dict[tuple[str, str], Manifest]:
    manifests = render_values_list(text, release, namespace)
    out = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    assert len(out) == len(manifests), "two objects with the same kind and name"
    return out


class Keys:
    """Real keys made for the test run: an OpenSSH EC P-384 pair, and the same kind of key in PKCS#8."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ssh_keygen = shutil.which("ssh-keygen")
        if self.ssh_keygen:
            self.private, self.public = self._keygen("ec")
            self.private2, self.public2 = self._keygen("ec2")
            self.pkcs8, _ = self._keygen("pkcs8", "-m", "PKCS8")
        else:  # pragma: no cover - depends on the machine
            crypto = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
            ser = pytest.importorskip("cryptography.hazmat.primitives.serialization")

            def pair(fmt: Any) -> tuple[str, str]:
                key = crypto.generate_private_key(crypto.SECP384R1())
                priv = key.private_bytes(ser.Encoding.PEM, fmt, ser.NoEncryption()).decode()
                pub = key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH).decode()
                return priv, pub

            self.private, self.public = pair(ser.PrivateFormat.OpenSSH)
            self.private2, self.public2 = pair(ser.PrivateFormat.OpenSSH)
            self.pkcs8, _ = pair(ser.PrivateFormat.PKCS8)

    def _keygen(self, name: str, *extra: str) -> tuple[str, str]:
        path = self.folder / name
        assert self.ssh_keygen
        subprocess.run([self.ssh_keygen, "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", "test", *extra,
                        "-f", str(path)], check=True, capture_output=True, timeout=30)
        return path.read_text(), path.with_suffix(".pub").read_text().strip()

    def node_auth_values(self, private: str | None = None, public: str | None = None) -> str:
        return NODE_AUTH.format(private=indent(private or self.private, 6), public=public or self.public)
