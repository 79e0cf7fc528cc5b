"""`tools/demo --sites`: a cross-site federation on this machine. Two clusters, each with a real node
(`<name>-hub`, `<name>-site`), linked (`devcluster.py link`); one Git repository laid out by cluster
(clusters/hub/, clusters/site-a/) with the hub's Federation (SuperLink on a NodePort at the hub node's
link address, TLS, node authentication) and a site's SuperNode chart release; its secrets
encrypted with the pinned sops CLI for each cluster's own age key; one flower-syncer agent per
cluster (`--cluster hub`, `--cluster site-a`); then `flwr run` trains over both clusters.

    tools/demo --sites [--name NAME] [--port PORT]    set up, start, train (needs root)
    tools/demo --sites [--name NAME] down [--purge]   stop both agents and both clusters (--purge:
                                                      and delete their state and the config repo)

The agents keep running afterwards: commit to the config repository and both clusters follow.
Run by tools/demo (in the project's virtualenv); it shares nothing with the one-cluster demo.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
CACHE = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))
FLWR = "1.42.0"
NS = "flower"
FLEET_PORT, CONTROL_PORT = 30092, 30093
SITE = "site-a"


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, capture: bool = False,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, env={**os.environ, **(env or {})}, text=True, check=check,
                          capture_output=capture)


def devcluster(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, str(TOOLS / "devcluster.py"), *args, capture=capture)


def status(cluster: str) -> dict[str, Any]:
    return dict(json.loads(devcluster("status", "--name", cluster, "--json", capture=True).stdout))


def tls_files(out: Path, names: list[str]) -> None:
    """A CA and a server certificate for `names` (what cert-manager would issue): ca.crt, tls.crt, tls.key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "demo hub CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca_key, hashes.SHA256()))
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (out / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))


def age_key(path: Path) -> str:
    """An age identity file (made once); returns its recipient."""
    import pyrage

    if not path.exists():
        path.write_text(f"{pyrage.x25519.Identity.generate()}\n")
        path.chmod(0o600)
    return str(pyrage.x25519.Identity.from_str(path.read_text().strip()).to_public())


def ssh_key(path: Path) -> tuple[str, str]:
    if not path.exists():
        run("ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", path.name, "-f", str(path))
    return path.read_text(), path.with_suffix(".pub").read_text().strip()


def indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.strip().splitlines())


def write_repo(config: Path, demo: Path, hub: dict[str, Any], hub_recipient: str, site_recipient: str) -> None:
    link, node_ip = hub["link_address"], hub["node_ip"]
    pki = demo / "pki"
    if not (pki / "tls.crt").exists():
        tls_files(pki, ["hub-superlink", f"hub-superlink.{NS}", f"hub-superlink.{NS}.svc",
                        f"hub-superlink.{NS}.svc.cluster.local", "127.0.0.1", link, node_ip])
    hub_node, site_node = ssh_key(demo / "hub-node"), ssh_key(demo / "site-node")
    files = {
        "flower-syncer.yaml": f"name: flower-fleet\ndefaultNamespace: {NS}\nguardrails:\n"
                              f"  allowedControlApiTargets: ['{node_ip}:{CONTROL_PORT}']\n",
        # each cluster's secrets for its own agent's key only
        ".sops.yaml": f"""creation_rules:
  - path_regex: clusters/hub/.*
    age: {hub_recipient}
    encrypted_regex: ^(data|stringData)$
  - path_regex: clusters/{SITE}/.*values\\.yaml
    age: {site_recipient}
    encrypted_regex: ^authSupernodePrivateKey$
""",
        "clusters/hub/federations/hub.yaml": f"""apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: hub
  annotations:
    flower-syncer.io/superlink-tls-secret: hub-tls
    flower-syncer.io/superlink-external-address: {link}:{FLEET_PORT}   # what the sites dial
    flower-syncer.io/fleet-api-from: "10.202.0.0/16"
    flower-syncer.io/supernode-auth: enabled
    flower-syncer.io/control-api-address: {node_ip}:{CONTROL_PORT}     # where the agent registers keys
    flower-syncer.io/supernode-public-keys: |
      {hub_node[1]}
      {site_node[1]}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: false
  superlink:
    image: flwr/superlink:{FLWR}
    service:
      type: NodePort
      nodePorts: {{grpc: {FLEET_PORT}, extra: {CONTROL_PORT}}}
  supernodes:
    image: flwr/supernode:{FLWR}
    pools:
      - name: hub
        replicas: 1
        images: {{}}
        nodeConfig: {{partition-id: "0", num-partitions: "2"}}
        volumes: [{{name: key, secret: {{secretName: hub-supernode-key}}}}]
        volumeMounts: [{{name: key, mountPath: /keys, readOnly: true}}]
        extraArgs: ["--auth-supernode-private-key=/keys/key"]
---
apiVersion: v1
kind: Secret
metadata:
  name: hub-tls
type: kubernetes.io/tls
stringData:
  tls.crt: |
{indent((pki / 'tls.crt').read_text(), 4)}  tls.key: |
{indent((pki / 'tls.key').read_text(), 4)}  ca.crt: |
{indent((pki / 'ca.crt').read_text(), 4)}---
apiVersion: v1
kind: Secret
metadata:
  name: hub-supernode-key
stringData:
  key: |
{indent(hub_node[0], 4)}""",
        f"clusters/{SITE}/supernodes/edge/values.yaml": f"""global:
  nodeAuth:
    enabled: true
    authSupernodePrivateKey: |
{indent(site_node[0], 6)}tls:
  enabled: true
supernode:
  superlink:
    address: {link}        # the hub node's link address
    port: {FLEET_PORT}
    certificate:
      existingSecret: hub-ca
  node:
    config: {{partition-id: 1, num-partitions: 2}}
  image: {{registry: docker.io, repository: flwr/supernode, tag: "{FLWR}"}}
""",
        f"clusters/{SITE}/supernodes/edge/secrets.yaml": f"""apiVersion: v1
kind: Secret
metadata:
  name: hub-ca
stringData:
  ca.crt: |
{indent((pki / 'ca.crt').read_text(), 4)}""",
    }
    sops = CACHE / "sops"
    binary = next(iter(sorted(sops.glob("*/sops"))), None)
    if binary is None:
        run(sys.executable, str(TOOLS / "build_sops.py"))
        binary = next(iter(sorted(sops.glob("*/sops"))))
    for rel, text in files.items():
        path = config / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel in ("clusters/hub/federations/hub.yaml", f"clusters/{SITE}/supernodes/edge/values.yaml"):
        run(str(binary), "--disable-version-check", "encrypt", "-i", rel, cwd=config)
    run("git", "-C", str(config), "add", "-A")
    run("git", "-C", str(config), "-c", "user.name=demo", "-c", "user.email=demo@localhost", "commit", "-qm",
        "a hub and a site")


def agent(demo: Path, cluster: str, name: str, port: int, key: Path) -> None:
    pid_file = demo / f"agent-{name}.pid"
    stop_agent(pid_file)
    kubeconfig = status(cluster)["kubeconfig"]
    log = (demo / f"agent-{name}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "syncer", "run", "--repo", str(demo / "config.git"), "--cluster",
                             name, "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}", "--cache-dir",
                             str(demo / f"cache-{name}"), "--no-leader-elect", "--log-format", "json",
                             "--decryption-key-files", str(key)],
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the {name} agent exited; see {demo / f'agent-{name}.log'}") from None
            time.sleep(0.2)


def stop_agent(pid_file: Path) -> None:
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists() and b"syncer" in cmdline.read_bytes():
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not cmdline.exists():
                break
            time.sleep(0.2)
    pid_file.unlink()


def wait(what: str, check: Any, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(2)
    print(f"    {what}", flush=True)


def ready(cluster: str, kind: str, name: str) -> bool:
    kubectl = Path(status(cluster)["bin_dir"]) / "kubectl"
    out = run(str(kubectl), "-n", NS, "get", kind, name, "-o", "jsonpath={.status.readyReplicas}", capture=True,
              check=False, env={"KUBECONFIG": status(cluster)["kubeconfig"]}).stdout
    return out.strip() not in ("", "0")


def online(address: str, ca: bytes) -> list[str]:
    from syncer.cluster.control_transports import connect

    try:
        api = connect(address, "http", ca)
        try:
            return [n.status for n in api.list_nodes()]
        finally:
            api.close()
    except Exception:  # not up yet
        return []


def train(demo: Path, address: str) -> None:
    cli = CACHE / "flwr" / FLWR
    if not (cli / ".complete").exists():
        step(f"installing the flwr CLI {FLWR} into {cli} (once; ~1 min)")
        shutil.rmtree(cli, ignore_errors=True)
        run(sys.executable, "-m", "venv", str(cli))
        run(str(cli / "bin" / "pip"), "install", "--quiet", f"flwr=={FLWR}")
        (cli / ".complete").write_text(f"flwr=={FLWR}\n")
    home = demo / "flwr"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(REPO / "tests" / "fixtures" / "e2e-app", home / "app")
    (home / "config.toml").write_text(f'[superlink]\ndefault = "hub"\n\n[superlink.hub]\naddress = "{address}"\n'
                                      f'root-certificates = "{demo / "pki" / "ca.crt"}"\n')
    out = run(str(cli / "bin" / "flwr"), "run", str(home / "app"), "hub", "--stream", "--run-config", "num-nodes=2",
              env={"FLWR_HOME": str(home)}, capture=True, check=False)
    for line in (out.stdout + out.stderr).splitlines():
        if any(w in line for w in ("ROUND", "E2E-SERVER", "ERROR", "rror:")):
            print("    " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/demo --sites",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--name", default="demo")
    parser.add_argument("--port", type=int, default=9190, help="the hub agent's port; the site's is the next one")
    parser.add_argument("--purge", action="store_true", help="with down: also delete the clusters' state and the repo")
    parser.add_argument("command", nargs="?", choices=["down"])
    args = parser.parse_args(argv)
    os.environ.pop("FLOWER_SYNCER_DEVCLUSTER_DIR", None)  # each cluster by its name
    hub, site = f"{args.name}-hub", f"{args.name}-site"
    demo = CACHE / f"{args.name}-sites"
    if args.command == "down":
        for name in ("hub", SITE):
            stop_agent(demo / f"agent-{name}.pid")
        for cluster in (site, hub):
            devcluster("down", "--name", cluster, *(["--purge"] if args.purge else []))
        if args.purge and demo.exists():
            shutil.rmtree(demo)
            print(f"removed {demo} (config repository, keys, logs) and both clusters' state")
        return 0
    if os.geteuid() != 0:
        raise SystemExit("tools/demo --sites runs real nodes: it needs root")
    started = time.monotonic()
    demo.mkdir(parents=True, exist_ok=True)
    step("two clusters, each with a real node (first run: ~3-9 min more to build the images)")
    devcluster("build")
    for cluster in (hub, site):
        devcluster("up", "--name", cluster, "--real-nodes", "1", "--cpu-nodes", "0", "--nvidia-nodes", "0",
                   "--amd-nodes", "0", "--timeout", "300")
    step(f"linking {hub} and {site} (a veth pair between their nodes' network namespaces)")
    devcluster("link", "--name", hub, "--peer", site)
    hub_node = status(hub)["real_nodes"][0]
    step(f"config repo: {demo / 'config'} (clusters/hub, clusters/{SITE}; secrets encrypted with sops)")
    keys = {name: demo / f"{name}.agekey" for name in ("hub", SITE)}
    recipients = {name: age_key(path) for name, path in keys.items()}
    config, bare = demo / "config", demo / "config.git"
    if not (config / ".git").exists():
        shutil.rmtree(config, ignore_errors=True)
        shutil.rmtree(bare, ignore_errors=True)
        shutil.rmtree(demo / "pki", ignore_errors=True)
        run("git", "init", "-q", "--bare", "-b", "main", str(bare))
        run("git", "clone", "-q", str(bare), str(config))
        run("git", "-C", str(config), "checkout", "-q", "-b", "main")
        write_repo(config, demo, hub_node, recipients["hub"], recipients[SITE])
        run("git", "-C", str(config), "push", "-q", "origin", "HEAD:main")
    for name in ("hub", SITE):
        run(sys.executable, "-m", "syncer", "validate", str(config), "--cluster", name, "--decryption-key-file",
            str(keys[name]))
    step(f"two agents: flower-syncer run --cluster hub (127.0.0.1:{args.port}), --cluster {SITE} "
         f"(127.0.0.1:{args.port + 1})")
    agent(demo, hub, "hub", args.port, keys["hub"])
    agent(demo, site, SITE, args.port + 1, keys[SITE])
    step("waiting for the SuperLink, the pools and the site's SuperNode to connect")
    wait("hub SuperLink ready", lambda: ready(hub, "statefulset", "hub-superlink"))
    wait("site SuperNode ready", lambda: ready(site, "deployment", "edge-flower-client-supernode"))
    control = f"{hub_node['node_ip']}:{CONTROL_PORT}"
    ca = (demo / "pki" / "ca.crt").read_bytes()
    wait("both SuperNodes online at the hub's SuperLink", lambda: online(control, ca).count("online") >= 2)
    step("training: flwr run tests/fixtures/e2e-app on the hub, 2 rounds over both clusters")
    train(demo, control)
    for name, cluster in (("hub", hub), (SITE, site)):
        step(f"flower-syncer status, on the {name} cluster (its agent's units only)")
        run(sys.executable, "-m", "syncer", "status", "--kubeconfig", status(cluster)["kubeconfig"], check=False)
    print(f"\ncross-site demo ready in {time.monotonic() - started:.0f}s; both agents keep running. Try:")
    print(f"  cd {config} && $EDITOR clusters/{SITE}/supernodes/edge/values.yaml && git commit -am change "
          "&& git push   # only the site follows")
    print(f"  flower-syncer validate {config}      # the whole fleet, each cluster's units checked against the others")
    print(f"  tools/demo --sites{' --name ' + args.name if args.name != 'demo' else ''} down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
