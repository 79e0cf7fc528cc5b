"""A cross-site federation from one repository (issue 27): the SuperLink in a hub cluster, a
SuperNode chart release in a site cluster, each cluster with its own real node and its own agent
(`--cluster hub`, `--cluster site-a`), both syncing the same repository. The two nodes reach each
other only through `devcluster.py link` (a veth pair between their network namespaces).

One `git push` brings up the hub's SuperLink, exposed on a NodePort at the hub node's link address
with TLS (a certificate SOPS-encrypted in Git for the hub's key that names that address) and node
authentication (the site's public key listed on the hub's Federation), and the site's SuperNodes
(their private key SOPS-encrypted for the site's key, the hub's CA from Git) dialing it. They
connect across the clusters, a Flower app trains over both sites, and when the site's node stops
(its cluster goes down, the link with it) the hub's SuperLink sees its SuperNode go offline.

Run it holding the machine's real-node lock: `flock /tmp/realnode.lock python -m pytest
tests/e2e/test_cross_site.py`. It starts and purges two clusters of its own (xs-hub-<pid>,
xs-site-<pid>)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.control_transports import connect
from syncer.models.nodeauth import parse_keys
from tests.builders import keypair, secret_yaml, tls_material
from tests.conftest import DEVCLUSTER, IN_CI, wait_until
from tests.e2e.apps import APP, CLIENT_LINE, FLWR
from tests.e2e.conftest import (
    UP_TIMEOUT_S,
    Agent,
    ConfigRepo,
    RealCluster,
    flwr_run,
    host_leftovers,
    syncer_status,
    wait_ready,
)
from tests.integration.agents import free_port
from tests.sops_writer import encrypt

pytestmark = pytest.mark.e2e


NS = "xs"
CRDS = Path(__file__).resolve().parents[2] / "charts" / "flower-syncer" / "crds"
HUB, SITE = f"xs-hub-{os.getpid()}", f"xs-site-{os.getpid()}"
FLEET_NODE_PORT, CONTROL_NODE_PORT = 30092, 30093


def _devcluster(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(DEVCLUSTER), args[0], "--name", name, *args[1:]],
                          capture_output=True, text=True, timeout=timeout, check=False)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"end-to-end clusters unavailable: {reason}", pytrace=False)
    pytest.skip(f"end-to-end clusters unavailable: {reason}")


@dataclass
class Site:
    cluster: RealCluster
    info: dict[str, Any]

    @property
    def link_address(self) -> str:
        return str(self.info["real_nodes"][0]["link_address"])

    @property
    def node_ip(self) -> str:
        """The node's address on its veth to this machine (where the host reaches a NodePort)."""
        return str(self.info["real_nodes"][0]["node_ip"])


@pytest.fixture(scope="module")
def linked() -> Iterator[tuple[Site, Site]]:
    """Two clusters, each with one real node, linked; stopped and purged at the end."""
    if os.geteuid() != 0:
        _unavailable("real nodes need root (network namespaces, cgroups, mounts)")
    sites: list[Site] = []
    try:
        for name in (HUB, SITE):
            started = time.monotonic()
            up = _devcluster(name, "up", "--real-nodes", "1", "--cpu-nodes", "0", "--nvidia-nodes", "0",
                             "--amd-nodes", "0", "--timeout", "240", "--build", timeout=UP_TIMEOUT_S)
            if up.returncode != 0:
                _unavailable(f"`devcluster up --name {name} --real-nodes 1` failed:\n{up.stdout[-3000:]}"
                             f"{up.stderr[-3000:]}")
            sys.stderr.write(f"{name} up in {time.monotonic() - started:.0f}s\n")
            info = json.loads(_devcluster(name, "status", "--json").stdout)
            sites.append(Site(RealCluster(kubeconfig=info["kubeconfig"], bin_dir=Path(info["bin_dir"]),
                                          node=info["real_nodes"][0], state_dir=Path(info["state_dir"])), info))
        link = _devcluster(HUB, "link", "--peer", SITE)
        assert link.returncode == 0, link.stdout + link.stderr
        yield sites[0], sites[1]
    finally:
        problems = []
        for site in reversed(sites):
            name = HUB if site is sites[0] else SITE
            down = _devcluster(name, "down", "--purge")
            if down.returncode != 0:
                problems.append(f"devcluster down --name {name}: {down.stdout}{down.stderr}")
            shutil.rmtree(site.info["state_dir"], ignore_errors=True)
            problems += host_leftovers(site.info["real_nodes"][0])
    assert problems == [], "`down` left these on the host"


def _agent(tmp_path: Path, name: str, cluster: RealCluster, repo: ConfigRepo, key: Path) -> Agent:
    """`flower-syncer run --cluster NAME` on this machine against `cluster`, watching `repo`."""
    log = tmp_path / f"agent-{name}.log"
    listen = f"127.0.0.1:{free_port()}"
    args = [sys.executable, "-m", "syncer", "run", "--repo", str(repo.bare), "--cluster", name, "--kubeconfig",
            cluster.kubeconfig, "--listen", listen, "--namespaces", NS, "--lease-namespace", NS,
            "--cache-dir", str(tmp_path / f"cache-{name}"), "--identity", f"xs-{name}", "--interval", "3600",
            "--decryption-key-files", str(key)]
    with log.open("w") as err:
        return Agent(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err), log, f"http://{listen}")


def _age(tmp: Path, name: str) -> tuple[Path, str]:
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    path = tmp / f"{name}.agekey"
    path.write_text(f"{identity}\n")
    return path, str(identity.to_public())


def hub_federation(hub: Site, public_keys: list[str]) -> str:
    keys = "\n".join(f"      {k}" for k in public_keys)
    return f"""\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: hub
  annotations:
    flower-syncer.io/superlink-tls-secret: hub-tls
    flower-syncer.io/superlink-external-address: {hub.link_address}:{FLEET_NODE_PORT}
    flower-syncer.io/fleet-api-from: "10.202.0.0/16"
    flower-syncer.io/supernode-auth: enabled
    flower-syncer.io/control-api-address: {hub.node_ip}:{CONTROL_NODE_PORT}
    flower-syncer.io/supernode-public-keys: |
{keys}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: false
  superlink:
    image: flwr/superlink:{FLWR}
    service:
      type: NodePort
      nodePorts:
        grpc: {FLEET_NODE_PORT}
        extra: {CONTROL_NODE_PORT}
  supernodes:
    image: flwr/supernode:{FLWR}
    pools:
      - name: hub
        replicas: 1
        images: {{}}
        nodeConfig:
          partition-id: "0"
          num-partitions: "2"
        volumes:
          - name: key
            secret:
              secretName: hub-supernode-key
        volumeMounts:
          - name: key
            mountPath: /keys
            readOnly: true
        extraArgs: ["--auth-supernode-private-key=/keys/key"]
"""


def site_values(hub: Site, key: tuple[str, str]) -> str:
    private = "\n".join(f"      {line}" for line in key[0].strip().splitlines())
    return f"""\
global:
  nodeAuth:
    enabled: true
    authSupernodePrivateKey: |
{private}
    authSupernodePublicKey: {key[1]}
tls:
  enabled: true
supernode:
  replicas: 1
  superlink:
    address: {hub.link_address}
    port: {FLEET_NODE_PORT}
    certificate:
      existingSecret: hub-ca
  node:
    config:
      partition-id: 1
      num-partitions: 2
  image:
    registry: docker.io
    repository: flwr/supernode
    tag: {FLWR}
"""


def _nodes(hub: Site, ca: bytes) -> dict[str, str]:
    """The SuperNodes the hub's SuperLink knows, by the fingerprint of their public key: status."""
    api = connect(f"{hub.node_ip}:{CONTROL_NODE_PORT}", "http", ca)
    try:
        nodes = api.list_nodes()
    finally:
        api.close()
    out = {}
    for node in nodes:
        for key in parse_keys_pem(node.public_key):
            out[key] = node.status
    return out


def parse_keys_pem(pem: bytes) -> list[str]:
    """The OpenSSH fingerprint of a SubjectPublicKeyInfo PEM (as syncer.models.nodeauth makes them)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pem)
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return [k.fingerprint for k in parse_keys(line)[0]]


def _flower(report: Any, unit: str) -> dict[str, Any]:
    for entry in report.get("units", []):
        if entry["unit"] == unit:
            return dict(entry.get("flower") or {})
    return {}


def test_one_push_brings_up_a_federation_across_two_clusters(linked: tuple[Site, Site], config_repo: ConfigRepo,
                                                             tmp_path: Path) -> None:
    hub, site = linked
    started = time.monotonic()
    for cluster in (hub.cluster, site.cluster):
        cluster.kubectl("apply", "-f", str(CRDS))  # as the chart installs them: `status` reads FlowerUnits
        cluster.kubectl("create", "namespace", NS)
        wait_until("default ServiceAccount", lambda c=cluster: c.kubectl(
            "-n", NS, "get", "serviceaccount", "default", check=False).returncode == 0)
    hub_age, hub_recipient = _age(tmp_path, "hub")
    site_age, site_recipient = _age(tmp_path, "site")
    hub_key, site_key = keypair(tmp_path, "hub-node"), keypair(tmp_path, "site-node")
    # the hub pool's own key, made by hand (as tests/e2e/test_secure.py does)
    hub.cluster.kubectl("-n", NS, "create", "secret", "generic", "hub-supernode-key",
                        f"--from-file=key={tmp_path / 'hub-node'}")
    # The hub's certificate names its Service, 127.0.0.1 (Flower 1.42's own ServerApp API), the link
    # address the site dials, and the node address this machine (agent, flwr) reaches the Control API at.
    sans = ["hub-superlink", f"hub-superlink.{NS}", f"hub-superlink.{NS}.svc", f"hub-superlink.{NS}.svc.cluster.local",
            "127.0.0.1", hub.link_address, hub.node_ip]
    tls = tls_material("hub-superlink", sans)
    site_fingerprint = parse_keys(site_key[1])[0][0].fingerprint
    config_repo.commit({
        "flower-syncer.yaml": f"name: cross-site\ndefaultNamespace: {NS}\n"
                              "guardrails:\n  allowedSecrets: [hub-supernode-key]\n"
                              "  allowedControlApiTargets: ['10.201.*:*']\n",
        "clusters/hub/federations/hub.yaml": hub_federation(hub, [hub_key[1], site_key[1]]) + "---\n"
        + encrypt(secret_yaml("hub-tls", tls), hub_recipient, "^(data|stringData)$"),
        "clusters/site-a/supernodes/edge/values.yaml": encrypt(site_values(hub, site_key), site_recipient,
                                                               "^authSupernodePrivateKey$"),
        "clusters/site-a/supernodes/edge/secrets.yaml": secret_yaml("hub-ca", {"ca.crt": tls["ca.crt"]}, "Opaque"),
    }, "a hub and a site")
    # the whole repository validates, each cluster with its own key (a site never needs the hub's)
    for name, key in (("hub", hub_age), ("site-a", site_age)):
        check = subprocess.run([sys.executable, "-m", "syncer", "validate", str(config_repo.work), "--cluster", name,
                                "--decryption-key-file", str(key)], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr

    hub_agent = _agent(tmp_path, "hub", hub.cluster, config_repo, hub_age)
    site_agent = _agent(tmp_path, "site-a", site.cluster, config_repo, site_age)
    try:
        wait_ready(hub.cluster, NS, "statefulset", "hub-superlink", 1, hub_agent)
        svc = hub.cluster.json("-n", NS, "get", "service", "hub-superlink")
        assert svc["spec"]["type"] == "NodePort"
        assert {p["name"]: p["nodePort"] for p in svc["spec"]["ports"]} == {"fleet": FLEET_NODE_PORT,
                                                                           "control": CONTROL_NODE_PORT}
        # each agent applies only its own cluster's units
        assert site.cluster.kubectl("-n", NS, "get", "statefulset", "hub-superlink", check=False).returncode != 0
        assert hub.cluster.kubectl("-n", NS, "get", "deployment", "edge-flower-client-supernode",
                                   check=False).returncode != 0
        wait_ready(site.cluster, NS, "deployment", "edge-flower-client-supernode", 1, site_agent, timeout=300)
        wait_ready(hub.cluster, NS, "statefulset", "hub-supernode-hub", 1, hub_agent, timeout=300)
        online = wait_until("the site's SuperNode online at the hub's SuperLink",
                            lambda: _nodes(hub, tls["ca.crt"]).get(site_fingerprint) == "online",
                            timeout=180, interval=2, log=hub_agent.log)
        assert online
        sys.stderr.write(f"cross-site federation connected {time.monotonic() - started:.0f}s after the push\n")

        home = tmp_path / "flwr"
        home.mkdir()
        (home / "ca.crt").write_bytes(tls["ca.crt"])
        output = flwr_run(APP, f"{hub.node_ip}:{CONTROL_NODE_PORT}", home, run_config="num-nodes=2",
                          root_certificates=home / "ca.crt", version=FLWR)
        assert "E2E-SERVER rounds=2 final=[2.0, 2.0, 2.0, 2.0]" in output, output[-4000:]
        pods = [p["metadata"]["name"] for p in site.cluster.json("-n", NS, "get", "pods")["items"]]
        edge = next(p for p in pods if p.startswith("edge-flower-client-supernode-"))
        assert set(CLIENT_LINE.findall(site.cluster.logs(NS, edge, "supernode"))) == {("1", "int", "2", "int")}

        def connected() -> dict[str, Any]:  # a recorded answer from before the SuperLink served says less
            flower = _flower(syncer_status(hub.cluster, NS), f"federation/{NS}/hub")
            pools = {p["unit"]: p for p in (flower.get("supernodes") or {}).get("pools") or []}
            return flower if pools.get(f"supernode/{NS}/edge", {}).get("online") == 1 else {}

        flower = wait_until("the hub's status showing the site's SuperNode connected", connected, timeout=120,
                            interval=2, log=hub_agent.log)
        pools = {p["unit"]: p for p in flower["supernodes"]["pools"]}
        assert pools[f"supernode/{NS}/edge"]["cluster"] == "site-a", flower
        assert pools[f"supernode/{NS}/edge"]["online"] == 1, flower
        assert hub_agent.metric("flower_syncer_federation_supernodes", unit=f"federation/{NS}/hub",
                                pool=f"supernode/{NS}/edge", state="online") == 1

        # The site's node stops (its cluster goes down, and the link with it): the hub's SuperLink
        # sees the site's SuperNode go offline (Flower's heartbeat timeout), the hub's own stays.
        stopped = time.monotonic()
        down = _devcluster(SITE, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        hub_netns, site_netns = hub.info["real_nodes"][0]["netns"], site.info["real_nodes"][0]["netns"]
        link_end = f"fsl-{site_netns.rsplit('-', 1)[1]}"
        assert subprocess.run(["ip", "-n", hub_netns, "link", "show", link_end], capture_output=True,
                              check=False).returncode != 0, "the link outlived the site's node"
        wait_until("the site's SuperNode offline at the hub's SuperLink",
                   lambda: _nodes(hub, tls["ca.crt"]).get(site_fingerprint) == "offline",
                   timeout=240, interval=2, log=hub_agent.log)
        sys.stderr.write(f"site SuperNode offline {time.monotonic() - stopped:.0f}s after its node stopped\n")
        wait_until("the hub's status showing the site's SuperNode offline", lambda: {
            p["unit"]: p for p in _flower(syncer_status(hub.cluster, NS), f"federation/{NS}/hub")
            .get("supernodes", {}).get("pools", [])}.get(f"supernode/{NS}/edge", {}).get("offline") == 1,
            timeout=120, interval=2, log=hub_agent.log)
        assert hub_agent.metric("flower_syncer_federation_supernodes", unit=f"federation/{NS}/hub",
                                pool=f"supernode/{NS}/edge", state="offline") == 1
        wait_until("a SuperNodesLost Event on the hub", lambda: any(
            e.get("reason") == "SuperNodesLost" for e in hub.cluster.json("-n", NS, "get", "events")["items"]),
            timeout=120, interval=2, log=hub_agent.log)
        assert _nodes(hub, tls["ca.crt"]).get(parse_keys(hub_key[1])[0][0].fingerprint) == "online"
    finally:
        for agent in (hub_agent, site_agent):
            agent.proc.send_signal(signal.SIGTERM)
            try:
                agent.proc.wait(30)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
