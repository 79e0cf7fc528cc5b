"""Federations secure by default (issue 12, part 2, first step): `insecure: false` renders a TLS
SuperLink from a named kubernetes.io/tls Secret, and SuperNodes that trust its CA (copied at sync
time, so no SuperNode pod mounts the server's key); without a named certificate it is a
validation error instead of a SuperLink that exits at start-up."""

from __future__ import annotations

import base64
from pathlib import Path

from syncer.agent.reporting import sync_events
from syncer.engine.changeset import Cause
from syncer.engine.outcome import outcome_condition
from syncer.engine.sync import Engine, SyncOptions
from syncer.observe.conditions import synced_condition
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, by_kind, federation
from tests.fakekube import FakeApiServer, FakeKube


def repo(tmp_path: Path, annotations: str) -> Path:
    (tmp_path / "federations").mkdir(parents=True, exist_ok=True)
    (tmp_path / "flower-syncer.yaml").write_text(f"name: tls\ndefaultNamespace: {NS}\n"
                                                 "guardrails: {allowedSecrets: [superlink-tls]}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(federation(annotations=annotations[1:-1], insecure=False))
    return tmp_path


def test_insecure_false_without_a_certificate_is_a_validation_error(tmp_path: Path) -> None:
    state = load_repo(repo(tmp_path, "{}"))
    (error,) = [d for d in state.diagnostics if d.severity == "error"]
    assert error.path == "spec.insecure" and "flower-syncer.io/superlink-tls-secret" in error.hint


def test_tls_superlink_and_supernodes_that_trust_its_ca(tmp_path: Path) -> None:
    state = load_repo(repo(tmp_path, '{"flower-syncer.io/superlink-tls-secret": superlink-tls}'))
    assert state.diagnostics == []
    manifests = next(iter(render_repo(state).units.values()))
    sl = by_kind(manifests, "StatefulSet", "fed-superlink")["spec"]["template"]["spec"]
    args = sl["containers"][0]["args"]
    assert "--insecure" not in args
    assert {"--ssl-ca-certfile=/app/certificates/ca.crt", "--ssl-certfile=/app/certificates/tls.crt",
            "--ssl-keyfile=/app/certificates/tls.key"} <= set(args)
    sources = sl["volumes"][0]["projected"]["sources"]
    assert [s["secret"]["name"] for s in sources] == ["superlink-tls", "fed-superlink-ca"]
    sn = by_kind(manifests, "StatefulSet", "fed-supernode-a")["spec"]["template"]["spec"]
    assert "--root-certificates=/app/certificates/ca.crt" in sn["containers"][0]["args"]
    assert "--insecure" not in sn["containers"][0]["args"]
    assert sn["volumes"] == [{"name": "superlink-ca", "secret": {"secretName": "fed-superlink-ca",
                                                                 "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    assert "superlink-tls" not in str(sn)  # the server's key never reaches a SuperNode pod


def test_the_ca_is_copied_from_the_tls_secret(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nself-signed\n").decode()
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",  # kubectl create secret tls
                "metadata": {"name": "superlink-tls", "namespace": NS},
                "data": {"tls.crt": cert, "tls.key": base64.b64encode(b"key").decode()}}, manager="kubectl")
    state = load_repo(repo(tmp_path, '{"flower-syncer.io/superlink-tls-secret": superlink-tls}'))
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    ca = kube.get("Secret", NS, "fed-superlink-ca")
    assert ca is not None and ca["data"] == {"ca.crt": cert}  # no ca.crt: the self-signed tls.crt is the CA


def test_a_named_issuer_renders_the_superlinks_certificate(tmp_path: Path) -> None:
    """cert-manager path (issue 12): the Certificate for the SuperLink's Service names, into the
    Secret the SuperLink mounts; applied like any object, read with one GET (it is not watched)."""
    state = load_repo(repo(tmp_path, '{"flower-syncer.io/superlink-issuer": ClusterIssuer/flower-ca, '
                                     '"flower-syncer.io/superlink-tls-extra-names": "fl.example.com, 10.0.0.7"}'))
    assert state.diagnostics == []
    manifests = next(iter(render_repo(state).units.values()))
    cert = by_kind(manifests, "Certificate", "fed-superlink")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == "fed-superlink-tls"
    assert cert["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "flower-ca"}
    assert cert["spec"]["dnsNames"] == ["fed-superlink", f"fed-superlink.{NS}", f"fed-superlink.{NS}.svc",
                                        f"fed-superlink.{NS}.svc.cluster.local", "fl.example.com"]
    assert cert["spec"]["ipAddresses"] == ["10.0.0.7"]
    sl = by_kind(manifests, "StatefulSet", "fed-superlink")["spec"]["template"]["spec"]
    (tls,) = [v for v in sl["volumes"] if v["name"] == "superlink-tls"]
    assert tls["projected"]["sources"][0]["secret"]["name"] == "fed-superlink-tls"
    ca = by_kind(manifests, "Secret", "fed-superlink-ca")
    assert ca["metadata"]["annotations"]["flower-syncer.io/copy-from"] == "fed-superlink-tls"

    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    first = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    changes = {str(c.ref): c.action.value for u in first.units for c in u.changes}
    assert changes[f"Certificate/{NS}/fed-superlink"] == "created"
    assert "does not exist" in first.units[0].errors[0]  # until cert-manager has written the Secret
    assert first.units[0].cause is Cause.MISSING_SECRET_KEY
    kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "fed-superlink-tls", "namespace": NS},
                 "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="}})
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    before = dict(kube.counts)
    again = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    assert again.ok and again.writes == 0
    assert kube.counts["GET"] - before.get("GET", 0) >= 1  # the Certificate, read by name


def test_bad_issuer_and_names_are_validation_errors(tmp_path: Path) -> None:
    state = load_repo(repo(tmp_path, '{"flower-syncer.io/superlink-issuer": Vault/x, '
                                     '"flower-syncer.io/superlink-tls-extra-names": "bad_name"}'))
    messages = sorted(d.message for d in state.diagnostics if d.severity == "error")
    assert messages == ["'Vault/x' is not an issuer", "'bad_name' is neither a DNS name nor an IP address"]


def test_a_certificate_without_cert_manager_names_the_crd_and_what_to_install(tmp_path: Path) -> None:
    """Issue 26: the API server answers a kind it does not serve with a bare `404 page not found`;
    the failed object names the CustomResourceDefinition and what to install (cause MissingCRD),
    never the server's text, and the objects that do exist are still applied."""
    state = load_repo(repo(tmp_path, '{"flower-syncer.io/superlink-issuer": Issuer/flower-ca}'))
    server = FakeApiServer(absent={"Certificate"})
    server.add_namespace(NS)
    kube = FakeKube(server)
    result = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    (unit,) = result.units
    (failed,) = [c for c in unit.changes if c.action.value == "failed"]
    assert str(failed.ref) == f"Certificate/{NS}/fed-superlink"
    assert failed.cause is Cause.MISSING_CRD
    assert "certificates.cert-manager.io is not installed" in failed.message
    assert "install cert-manager" in failed.message
    assert "404 page not found" not in failed.message
    assert unit.first_error().startswith(f"Certificate/{NS}/fed-superlink: the cluster has no Certificate kind")
    synced = synced_condition(result=unit)  # status, the FlowerUnit; Events and the log say first_error too
    assert not synced.status and "certificates.cert-manager.io" in synced.message
    assert "certificates.cert-manager.io" in outcome_condition(unit, "abc").message  # the inventory's record
    (event,) = [e for e in sync_events(unit.unit, unit, (), "abc") if e.reason == "SyncFailed"]
    assert "CustomResourceDefinition certificates.cert-manager.io is not installed" in event.note
    assert kube.get("Service", NS, "fed-superlink") is not None  # the rest was applied
    server.absent.clear()  # cert-manager installed: the next sync applies it
    again = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    assert {c.cause for u in again.units for c in u.changes if c.action.value == "failed"} == set()
    assert kube.get("Certificate", NS, "fed-superlink") is not None
