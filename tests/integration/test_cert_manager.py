"""The real cert-manager controller (tools/build_cert_manager.py) on the local control plane issues a
SuperLink's certificate from a CA Issuer; a TLS Federation names the Secret it writes, flower-syncer
copies the CA for the SuperNodes, and a real Flower SuperLink serving that certificate is trusted
through the copied CA (issue 12, part 2: the Secret can come from cert-manager)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.cluster.client import Kube
from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApi
from syncer.engine.sync import Engine, SyncOptions
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import federation
from tests.conftest import IN_CI, KubeCluster, wait_until
from tests.integration.gitservers import free_port
from tests.integration.superlinks import stop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from build_cert_manager import binary_path, crd_paths

pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent


def tls_federation(annotations: str) -> str:
    """The builders' Federation with `insecure: false` and `annotations` (a YAML flow mapping)."""
    return federation(annotations=annotations[1:-1], insecure=False)


@pytest.fixture
def cert_manager(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """Its CRDs (cluster-wide, kept: every test may use them) and a controller limited to the test's
    namespace. Yields the controller's log."""
    if not binary_path().exists() or not all(p.exists() for p in crd_paths()):
        message = "the cert-manager controller is not built: python3 tools/build_cert_manager.py"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    for path in crd_paths():
        crd = yaml.safe_load(path.read_text())
        crd["metadata"]["labels"] = {"app.kubernetes.io/name": "cert-manager"}  # the file's are Helm templates
        kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(crd))
    kube_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                         *[f"crd/{p.stem.removeprefix('crd-')}.cert-manager.io" for p in crd_paths()
                           if p.stem.removeprefix("crd-") not in ("orders", "challenges")])
    log = tmp_path / "cert-manager.log"
    proc = subprocess.Popen(
        [str(binary_path()), f"--kubeconfig={kube_cluster.kubeconfig}", "--leader-elect=false",
         f"--namespace={namespace}", f"--cluster-resource-namespace={namespace}",
         f"--metrics-listen-address=127.0.0.1:{free_port()}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    yield log
    stop(proc)


def certificate(name: str, secret: str, issuer: str, **spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                           "metadata": {"name": name},
                           "spec": {"secretName": secret, "issuerRef": {"name": issuer, "kind": "Issuer"},
                                    "privateKey": {"algorithm": "ECDSA", "size": 256}, **spec}})


def test_a_certificate_cert_manager_issues_serves_a_tls_superlink(cert_manager: Path, kube_cluster: KubeCluster,
                                                                   namespace: str, tmp_path: Path) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    # a CA of its own (self-signed), a CA Issuer from it, and the SuperLink's certificate from that
    objects = [
        yaml.safe_dump({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "selfsigned"},
                        "spec": {"selfSigned": {}}}),
        certificate("flower-ca", "flower-ca", "selfsigned", isCA=True, commonName="flower-ca"),
        yaml.safe_dump({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "flower-ca"},
                        "spec": {"ca": {"secretName": "flower-ca"}}}),
        certificate("fed-superlink", "superlink-tls", "flower-ca", commonName="fed-superlink",
                    dnsNames=["fed-superlink", f"fed-superlink.{namespace}.svc", "localhost"],
                    ipAddresses=["127.0.0.1"], usages=["server auth", "digital signature"]),
    ]
    kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", input="---\n".join(objects))
    def issued_secret() -> dict[str, Any] | None:
        secret = kube.get("Secret", namespace, "superlink-tls")
        return secret if secret and {"tls.crt", "tls.key", "ca.crt"} <= set(secret.get("data") or {}) else None

    issued = wait_until("cert-manager issued the SuperLink's certificate", issued_secret, timeout=90, log=cert_manager)
    assert issued["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in issued["data"].items()}

    # the Federation names that Secret: flower-syncer copies its CA for the SuperNodes
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n"
                                             "guardrails: {allowedSecrets: [superlink-tls]}\n")  # made by hand
    (repo / "federations" / "fed.yaml").write_text(
        tls_federation('{"flower-syncer.io/superlink-tls-secret": superlink-tls}'))
    state = load_repo(repo)
    report = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    assert report.ok, report.to_dict()
    copied = base64.b64decode((kube.get("Secret", namespace, "fed-superlink-ca") or {})["data"]["ca.crt"])
    assert copied == data["ca.crt"] and b"PRIVATE KEY" not in copied

    # real Flower serves the issued certificate; a client that trusts only the copied CA gets in
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_bytes(data[name])
    control = free_port()
    log = tmp_path / "superlink.log"
    superlink = subprocess.Popen(
        [str(BIN / "flower-superlink"), f"--ssl-ca-certfile={tmp_path / 'ca.crt'}",
         f"--ssl-certfile={tmp_path / 'tls.crt'}", f"--ssl-keyfile={tmp_path / 'tls.key'}",
         f"--fleet-api-address=127.0.0.1:{free_port()}", f"--control-api-address=127.0.0.1:{control}",
         f"--serverappio-api-address=127.0.0.1:{free_port()}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "FLWR_HOME": str(tmp_path / "flwr")})
    try:
        wait_until("the SuperLink's Control API", lambda: "Starting Control API" in log.read_text(errors="replace"),
                   timeout=60, log=log)
        client = connect(f"127.0.0.1:{control}", "grpc", copied)
        try:
            assert wait_until("a TLS call trusted through the copied CA", lambda: _listed(client), timeout=30) == "ok"
        finally:
            client.close()
    finally:
        stop(superlink)


def _listed(client: ControlApi) -> str | None:
    try:
        client.list_nodes()
    except Exception:  # the server may still be starting
        return None
    return "ok"


def test_flower_syncer_renders_the_certificate_and_cert_manager_issues_it(
        cert_manager: Path, kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """The Federation names an Issuer: flower-syncer applies the SuperLink's Certificate, the real
    cert-manager issues it, the next sync copies its CA, and an unchanged repository writes nothing."""
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", input="---\n".join([
        yaml.safe_dump({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "selfsigned"},
                        "spec": {"selfSigned": {}}}),
        certificate("flower-ca", "flower-ca", "selfsigned", isCA=True, commonName="flower-ca"),
        yaml.safe_dump({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "flower-ca"},
                        "spec": {"ca": {"secretName": "flower-ca"}}})]))
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    (repo / "federations" / "fed.yaml").write_text(tls_federation('{"flower-syncer.io/superlink-issuer": flower-ca, '
                         '"flower-syncer.io/superlink-tls-extra-names": "127.0.0.1, localhost"}'))
    state = load_repo(repo)
    assert state.diagnostics == []

    def sync() -> Any:
        return Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())

    first = sync()
    assert {str(c.ref): c.action.value for c in first.units[0].changes}[
        f"Certificate/{namespace}/fed-superlink"] == "created"
    issued = wait_until("cert-manager issued the Certificate flower-syncer applied", lambda: (
        kube.get("Secret", namespace, "fed-superlink-tls") or {}).get("data", {}).get("ca.crt"),
        timeout=90, log=cert_manager)
    def synced_ok() -> Any:
        report = sync()
        return report if report.ok else None

    assert wait_until("a sync that copies the CA", synced_ok, timeout=30).ok
    copied = (kube.get("Secret", namespace, "fed-superlink-ca") or {})["data"]["ca.crt"]
    assert copied == issued
    cert = x509_of(kube, namespace)
    assert "127.0.0.1" in cert and f"fed-superlink.{namespace}.svc" in cert
    assert sync().writes == 0


def x509_of(kube: Kube, namespace: str) -> str:
    """The issued certificate's subject alternative names, as text."""
    from cryptography import x509

    secret = kube.get("Secret", namespace, "fed-superlink-tls") or {}
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    return str(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
