"""A TLS Federation on the real API server: its objects are accepted (projected volume, args,
the CA Secret copied from a `kubectl create secret tls` Secret), and a resync makes no writes."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.engine.sync import Engine, SyncOptions
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import federation

pytestmark = pytest.mark.cluster


def tls_federation(annotations: str) -> str:
    """The builders' Federation with `insecure: false` and `annotations` (a YAML flow mapping)."""
    return federation(annotations=annotations[1:-1], insecure=False)


def test_a_tls_federation_syncs_on_a_real_api_server(kube: Kube, namespace: str, tmp_path: Path) -> None:
    cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nself-signed\n").decode()
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {"tls.crt": cert, "tls.key": base64.b64encode(b"key").decode()}}, manager="kubectl")
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n"
                                                 "guardrails: {allowedSecrets: [superlink-tls]}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(
        tls_federation('{"flower-syncer.io/superlink-tls-secret": superlink-tls}'))
    state = load_repo(tmp_path)

    def sync() -> int:
        report = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
        assert report.ok, report.to_dict()
        return report.writes

    assert sync() > 0
    assert (kube.get("Secret", namespace, "fed-superlink-ca") or {}).get("data") == {"ca.crt": cert}
    assert sync() == 0
