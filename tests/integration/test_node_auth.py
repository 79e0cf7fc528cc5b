"""SuperNode authentication against a real SuperLink (flwr 1.26.0, a test dependency, started as a
process on 127.0.0.1 with TLS and --enable-supernode-auth): the keys a Federation lists in Git are
registered through the Control API by a sync, a SuperNode with a listed key is admitted and one with
an unlisted key refused, a key removed from Git is unregistered, and a key registered by hand is
unregistered again (issue 12, part 2)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from syncer.cluster.client import Kube
from syncer.cluster.flower_control import ControlApi, connect
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.models.nodeauth import parse_key
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.conftest import IN_CI, KubeCluster, wait_until
from tests.integration.gitservers import free_port
from tests.integration.test_agent import AgentProc, Repos, repos, start_agent
from tests.reliability.test_sops_corpus import new_key, sops_encrypt
from tests.unit.test_node_auth import FED, keypair

__all__ = ["repos", "start_agent"]  # fixtures of the agent tests, used below
pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent


def pem(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def certificates() -> tuple[bytes, bytes, bytes]:
    """(CA certificate, server certificate for 127.0.0.1, server key), PEM."""
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


class SuperLink:
    def __init__(self, tmp: Path) -> None:
        self.ca, cert, key = certificates()
        for name, data in (("ca.crt", self.ca), ("tls.crt", cert), ("tls.key", key)):
            (tmp / name).write_bytes(data)
        self.tls = {"ca.crt": self.ca, "tls.crt": cert, "tls.key": key}
        self.fleet, self.control = free_port(), free_port()
        self.log = tmp / "superlink.log"
        self.tmp = tmp
        self.env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "FLWR_HOME": str(tmp / "flwr-home")}
        self.proc = subprocess.Popen(
            [str(BIN / "flower-superlink"), f"--ssl-ca-certfile={tmp / 'ca.crt'}",
             f"--ssl-certfile={tmp / 'tls.crt'}", f"--ssl-keyfile={tmp / 'tls.key'}", "--enable-supernode-auth",
             f"--fleet-api-address=127.0.0.1:{self.fleet}", f"--control-api-address=127.0.0.1:{self.control}",
             f"--serverappio-api-address=127.0.0.1:{free_port()}"],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        wait_until("the SuperLink's Fleet API", lambda: "Starting Fleet API" in self.log.read_text(errors="replace")
                   or self.proc.poll() is not None, timeout=60, log=self.log)
        assert self.proc.poll() is None, self.log.read_text()

    def supernode(self, key: Path, log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(BIN / "flower-supernode"), f"--superlink=127.0.0.1:{self.fleet}",
             f"--root-certificates={self.tmp / 'ca.crt'}", f"--auth-supernode-private-key={key}",
             f"--clientappio-api-address=127.0.0.1:{free_port()}", "--max-retries=1"],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def client(self) -> ControlClient:
        return ControlClient(f"127.0.0.1:{self.control}", self.ca)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def superlink(tmp_path: Path) -> Iterator[SuperLink]:
    if not (BIN / "flower-superlink").exists():
        message = f"flower-superlink is not installed beside {sys.executable} (pip install -e '.[dev]')"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    link = SuperLink(tmp_path)
    yield link
    stop(link.proc)


def test_keys_listed_in_git_are_the_keys_the_superlink_admits(superlink: SuperLink, kube: Kube, namespace: str,
                                                                tmp_path: Path) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in superlink.tls.items()}}, manager="kubectl")
    keys = {name: keypair(tmp_path, name) for name in ("site-a", "site-b", "stranger")}
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")

    def sync(listed: list[str]) -> SyncReport:
        text = FED.format(mode="enabled", keys="\n".join(f"      {keys[n][1]}" for n in listed), insecure="false",
                          replicas=1, image="flwr/superlink:1.26.0", args="--auth-supernode-private-key=/keys/a")
        text = text.replace("    flower-syncer.io/supernode-auth:",
                            f"    flower-syncer.io/control-api-address: 127.0.0.1:{superlink.control}\n"
                            "    flower-syncer.io/supernode-auth:")
        (repo / "federations" / "fed.yaml").write_text(text)
        state = load_repo(repo)
        assert not [d for d in state.diagnostics if d.severity == "error"], state.diagnostics
        return Engine(kube).sync(plan_repo(state, render_repo(state), revision="r"), SyncOptions())

    def active() -> set[bytes]:
        client = superlink.client()
        try:
            return {n.public_key.strip() for n in client.list_nodes() if n.status != "unregistered"}
        finally:
            client.close()

    def pem_of(name: str) -> bytes:
        key, _ = parse_key(keys[name][1])
        assert key is not None
        return key.pem.strip()

    report = sync(["site-a", "site-b"])
    assert report.ok, report.to_dict()
    (unit,) = report.units
    assert unit.node_keys is not None and unit.node_keys["admitted"] == 2 and len(unit.node_keys["registered"]) == 2
    assert active() == {pem_of("site-a"), pem_of("site-b")}

    # a SuperNode with a listed key is admitted; one with any other key is refused
    admitted = superlink.supernode(keys["site-a"][0], tmp_path / "site-a.log")
    refused = superlink.supernode(keys["stranger"][0], tmp_path / "stranger.log")
    try:
        wait_until("site-a admitted", lambda: "SuperNode ID" in (tmp_path / "site-a.log").read_text(errors="replace"),
                   timeout=60, log=tmp_path / "site-a.log")
        wait_until("the stranger refused", lambda: "No SuperNode found with the given public key" in (
            tmp_path / "stranger.log").read_text(errors="replace"), timeout=60, log=tmp_path / "stranger.log")
    finally:
        stop(admitted)
        stop(refused)

    # in step: nothing to do
    again = sync(["site-a", "site-b"]).units[0].node_keys
    assert again is not None and again["registered"] == [] and again["unregistered"] == []

    # site-b leaves Git, and someone registers the stranger by hand: both are unregistered
    client = superlink.client()
    client.register(pem_of("stranger"))
    client.close()
    report = sync(["site-a"])
    assert report.ok, report.to_dict()
    assert report.units[0].node_keys is not None and len(report.units[0].node_keys["unregistered"]) == 2
    assert active() == {pem_of("site-a")}

    # a key Flower will never admit again is an error with the fix, on the unit's Ready condition too
    report = sync(["site-a", "site-b"])
    assert not report.ok and "never admits it again" in report.units[0].errors[0]


def test_the_agent_applies_an_encrypted_tls_secret_and_registers_the_keys(
        superlink: SuperLink, repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster,
        namespace: str, tmp_path: Path) -> None:
    """End to end from a commit (issue 12, tests): the SuperLink's TLS Secret SOPS-encrypted beside
    the Federation, keys listed in it; the agent applies the Secret (its data is the plaintext),
    registers the keys with the real SuperLink (the metric says so), and its log never shows the
    server's private key."""
    keys_dir = tmp_path / "agekeys"
    keys_dir.mkdir()
    age_pub = new_key(keys_dir / "agent.agekey")
    site_key, site_pub = keypair(tmp_path, "site-a")
    fed = FED.format(mode="enabled", keys=f"      {site_pub}", insecure="false", replicas=1,
                     image="flwr/superlink:1.26.0", args="--auth-supernode-private-key=/keys/a")
    fed = fed.replace("    flower-syncer.io/supernode-auth:",
                      f"    flower-syncer.io/control-api-address: 127.0.0.1:{superlink.control}\n"
                      "    flower-syncer.io/supernode-auth:")
    tls = superlink.tls
    secret = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: superlink-tls\ntype: kubernetes.io/tls\nstringData:\n"
              + "".join(f"  {k}: |\n" + "".join(f"    {line}\n" for line in v.decode().splitlines())
                        for k, v in tls.items()))
    work = tmp_path / "enc"
    work.mkdir()
    encrypted = sops_encrypt(fed + "---\n" + secret, work, age_pub, args=("--encrypted-regex", "^stringData$"))
    assert "PRIVATE KEY" not in encrypted
    repos.commit({"federations/fed.yaml": encrypted}, "a federation with node auth")
    agent = start_agent(str(repos.bare), "--decryption-key-file", str(keys_dir))
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    applied = wait_until("the TLS Secret applied", lambda: kube.get("Secret", namespace, "superlink-tls"),
                        log=agent.log)
    assert base64.b64decode(applied["data"]["tls.key"]) == tls["tls.key"]
    unit = f"federation/{namespace}/fed"
    wait_until("the key registered", lambda: agent.metric("flower_syncer_supernode_keys", unit=unit,
                                                          state="admitted") == 1, timeout=60, log=agent.log)
    client = superlink.client()
    try:
        (node,) = [n for n in client.list_nodes() if n.status != "unregistered"]
    finally:
        client.close()
    key, _ = parse_key(site_pub)
    assert key is not None and node.public_key == key.pem
    admitted = superlink.supernode(site_key, tmp_path / "site-a.log")
    try:
        wait_until("site-a admitted", lambda: "SuperNode ID" in (tmp_path / "site-a.log").read_text(errors="replace"),
                   timeout=60, log=tmp_path / "site-a.log")
    finally:
        stop(admitted)
    private = tls["tls.key"].decode().splitlines()[1]
    assert private not in agent.log.read_text(errors="replace")

    # drift on the SuperLink's side: a key registered by hand is unregistered by the agent's checks
    _, stranger = keypair(tmp_path, "stranger")
    stranger_key, _ = parse_key(stranger)
    assert stranger_key is not None
    client = superlink.client()
    try:
        client.register(stranger_key.pem)
        wait_until("the hand-registered key unregistered", lambda: {
            n.public_key for n in client.list_nodes() if n.status != "unregistered"} == {key.pem},
            timeout=60, log=agent.log)
    finally:
        client.close()
