"""SuperNode authentication against real SuperLinks (flwr 1.26.0 with gRPC Control, a test
dependency, and 1.42.0 with Control over HTTPS, installed by the set-up into a cached virtualenv;
started as processes on 127.0.0.1 with TLS and --enable-supernode-auth): the keys a Federation lists
in Git are registered through the Control API by a sync, a SuperNode with a listed key is admitted
and one with an unlisted key refused, a key removed from Git is unregistered, and a key registered
by hand is left alone: a federation unregisters only what it registered, as its inventory records
(issue 12, part 2; issue 24, item 4; issue 25, finding 4)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApi
from syncer.engine.inventory import NODE_KEYS_KEY, inventory_name
from syncer.engine.keyresult import KeyOutcome
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.identity import Unit
from syncer.models.nodeauth import parse_key
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import AgentProc, Repos
from tests.integration.superlinks import SuperLink, stop
from tests.nodeauth import FED, keypair
from tests.sops_cli import new_key, sops_encrypt

pytestmark = pytest.mark.cluster


@pytest.fixture(params=["1.26.0", "1.42.0"])
def superlink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SuperLink]:
    """A real SuperLink of each Control API transport: gRPC (1.26), HTTPS (1.42)."""
    link = SuperLink(tmp_path, request.param)
    yield link
    stop(link.proc)


ALLOWED = ["127.0.0.1:*"]  # Control API targets allowed besides each federation's own SuperLink Service


def with_address(text: str, address: str) -> str:
    return text.replace("    flower-syncer.io/supernode-auth:",
                        f"    flower-syncer.io/control-api-address: {address}\n    flower-syncer.io/supernode-auth:")


def client(link: SuperLink) -> ControlApi:
    return connect(link.address, "http" if link.http else "grpc", link.ca)


def test_keys_listed_in_git_are_the_keys_the_superlink_admits(superlink: SuperLink, kube: Kube, namespace: str,
                                                                tmp_path: Path) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in superlink.tls.items()}}, manager="kubectl")
    keys = {name: keypair(tmp_path, name) for name in ("site-a", "site-b", "stranger")}
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n"
                                             "guardrails: {allowedSecrets: [superlink-tls]}\n")

    def sync(listed: list[str]) -> SyncReport:
        text = FED.format(mode="enabled", keys="\n".join(f"      {keys[n][1]}" for n in listed), insecure="false",
                          replicas=1, image=f"flwr/superlink:{superlink.version}",
                          args="--auth-supernode-private-key=/keys/a"
                          ).replace("flwr/supernode:1.26.0", f"flwr/supernode:{superlink.version}")
        (repo / "federations" / "fed.yaml").write_text(with_address(text, superlink.address))
        state = load_repo(repo)
        assert not [d for d in state.diagnostics if d.severity == "error"], state.diagnostics
        return Engine(kube).sync(plan_repo(state, render_repo(state, control_targets=ALLOWED), revision="r"),
                                 SyncOptions())

    def active() -> set[bytes]:
        api = client(superlink)
        try:
            return {n.public_key.strip() for n in api.list_nodes() if n.status != "unregistered"}
        finally:
            api.close()

    def pem_of(name: str) -> bytes:
        key, _ = parse_key(keys[name][1])
        assert key is not None
        return key.pem.strip()

    def recorded() -> dict[str, object]:
        inventory = kube.get("ConfigMap", namespace, inventory_name(Unit("federation", namespace, "fed")))
        assert inventory is not None
        return dict(json.loads(inventory["data"][NODE_KEYS_KEY]))

    report = sync(["site-a", "site-b"])
    assert report.ok, report.to_dict()
    (unit,) = report.units
    assert unit.node_keys is not None and unit.node_keys.outcome is KeyOutcome.CHANGED
    assert unit.node_keys.admitted == 2 and len(unit.node_keys.registered) == 2
    assert unit.node_keys.transport == superlink.transport
    assert active() == {pem_of("site-a"), pem_of("site-b")}
    assert recorded()["address"] == superlink.address and len(recorded()["nodes"]) == 2  # type: ignore[arg-type]

    # a SuperNode of this release with a listed key is admitted; one with any other key is refused
    admitted = superlink.supernode(keys["site-a"][0], tmp_path / "site-a.log")
    refused = superlink.supernode(keys["stranger"][0], tmp_path / "stranger.log")
    try:
        wait_until("site-a admitted", lambda: "SuperNode ID" in (tmp_path / "site-a.log").read_text(errors="replace"),
                   timeout=60, log=tmp_path / "site-a.log")
        wait_until("the stranger refused", lambda: superlink.refused(tmp_path / "stranger.log"), timeout=60,
                   log=tmp_path / "stranger.log")
    finally:
        stop(admitted)
        stop(refused)

    # in step: nothing to do
    again = sync(["site-a", "site-b"]).units[0].node_keys
    assert again is not None and again.outcome is KeyOutcome.IN_STEP and not again.changed

    # site-b leaves Git, and someone registers the stranger by hand: site-b (ours) is unregistered,
    # the stranger (not ours) is left alone and counted
    api = client(superlink)
    api.register(pem_of("stranger"))
    api.close()
    report = sync(["site-a"])
    assert report.ok, report.to_dict()
    keys_now = report.units[0].node_keys
    assert keys_now is not None and len(keys_now.unregistered) == 1 and keys_now.foreign == 1
    assert active() == {pem_of("site-a"), pem_of("stranger")}
    assert len(recorded()["nodes"]) == 1  # type: ignore[arg-type]

    # a key Flower will never admit again is an error with the fix, on the unit's Ready condition too
    report = sync(["site-a", "site-b"])
    assert not report.ok and "never admits it again" in report.units[0].errors[0]


def test_the_agent_applies_an_encrypted_tls_secret_and_registers_the_keys(
        superlink: SuperLink, repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster,
        namespace: str, tmp_path: Path) -> None:
    """End to end from a commit (issue 12, tests): the SuperLink's TLS Secret SOPS-encrypted beside
    the Federation, keys listed in it; the agent applies the Secret (its data is the plaintext),
    registers the keys with the real SuperLink over the transport of its release (the metric says
    so), unregisters a key that leaves Git, and its log never shows the server's private key. The
    repository's guardrails allow the test's SuperLink as a Control API target (no admin policy)."""
    keys_dir = tmp_path / "agekeys"
    keys_dir.mkdir()
    age_pub = new_key(keys_dir / "agent.agekey")
    site_key, site_pub = keypair(tmp_path, "site-a")
    fed = with_address(FED.format(mode="enabled", keys=f"      {site_pub}", insecure="false", replicas=1,
                                  image=f"flwr/superlink:{superlink.version}",
                                  args="--auth-supernode-private-key=/keys/a"
                                  ).replace("flwr/supernode:1.26.0", f"flwr/supernode:{superlink.version}"),
                       superlink.address)
    tls = superlink.tls
    secret = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: superlink-tls\ntype: kubernetes.io/tls\nstringData:\n"
              + "".join(f"  {k}: |\n" + "".join(f"    {line}\n" for line in v.decode().splitlines())
                        for k, v in tls.items()))
    work = tmp_path / "enc"
    work.mkdir()
    encrypted = sops_encrypt(fed + "---\n" + secret, work, age_pub, args=("--encrypted-regex", "^stringData$"))
    without_key = sops_encrypt(fed.replace(site_pub, "# none") + "---\n" + secret, work, age_pub,
                               args=("--encrypted-regex", "^stringData$"))
    assert "PRIVATE KEY" not in encrypted
    repos.commit({"federations/fed.yaml": encrypted,
                  "flower-syncer.yaml": f"name: {namespace}\ndefaultNamespace: {namespace}\n"
                                        f"guardrails: {{allowedControlApiTargets: {ALLOWED}, "
                                        "allowedSecrets: [superlink-tls]}\n"},
                 "a federation with node auth")
    agent = start_agent(str(repos.bare), "--decryption-key-file", str(keys_dir))
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    applied = wait_until("the TLS Secret applied", lambda: kube.get("Secret", namespace, "superlink-tls"),
                        log=agent.log)
    assert base64.b64decode(applied["data"]["tls.key"]) == tls["tls.key"]
    unit = f"federation/{namespace}/fed"
    wait_until("the key registered", lambda: agent.metric("flower_syncer_supernode_keys", unit=unit,
                                                          state="admitted") == 1, timeout=60, log=agent.log)
    api = client(superlink)
    try:
        (node,) = [n for n in api.list_nodes() if n.status != "unregistered"]
    finally:
        api.close()
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

    # the key leaves Git: the agent unregisters it (it registered it, as the inventory records)
    repos.commit({"federations/fed.yaml": without_key}, "site-a leaves")
    api = client(superlink)
    try:
        wait_until("site-a unregistered", lambda: [n.status for n in api.list_nodes()] == ["unregistered"],
                   timeout=60, log=agent.log)
    finally:
        api.close()
