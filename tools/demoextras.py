"""The larger parts of `tools/demo` (see tools/demoparts.py for the rest): cert-manager and
Prometheus beside the agent, the agent in the cluster from the chart with a Git server on the real
node, training on a real node, and `down [--purge]`.

`python3 tools/demoextras.py git-serve ...` is the Git server of the in-cluster mode: the smart-HTTP
server the tests use (tests/integration/gitservers.py), run in the real node's network namespace
(`ip netns exec`) on the node's address, where the pods reach it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_cert_manager import binary_path, build, kubectl_crd_paths
from demoparts import (
    AGENT_IMAGE,
    GIT_TOKEN_FILE,
    REPO,
    Demo,
    cache_root,
    ensure_namespace,
    free_port,
    git,
    http_ok,
    step,
    wait_for,
)
from devutil import remove_unless_mounted

ISSUERS = REPO / "config" / "demo" / "cert-manager" / "issuers.yaml"
ALERTS = REPO / "dashboards" / "alerts.yaml"
PROCESSES = ("agent", "agent-forward", "prometheus", "cert-manager", "git-server")
AGENT_NAMESPACE = "flower-syncer"
GIT_PORT = 8418  # in the real node's own network namespace: no other demo's; fixed, as the agent's source URL


def sops_binary() -> Path | None:
    from build_sops import sops_path

    path = sops_path()
    return path if path.exists() else None


# -- cert-manager ------------------------------------------------------------------------------

def start_cert_manager(demo: Demo, metrics_port: int) -> None:
    step("cert-manager: the controller the tests build (tools/build_cert_manager.py; cold: ~5 min), its CRDs, "
         "and the demo's CA Issuer (config/demo/cert-manager/issuers.yaml)")
    build()
    for crd in kubectl_crd_paths():
        demo.kubectl("apply", "-f", str(crd))
    demo.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                 *[f"crd/{yaml.safe_load(p.read_text())['metadata']['name']}" for p in kubectl_crd_paths()])
    log = demo.dir / "cert-manager.log"
    env = demo.env()
    demo.spawn("cert-manager", [str(binary_path()), f"--kubeconfig={env['KUBECONFIG']}", "--leader-elect=false",
                                "--cluster-resource-namespace=flower",
                                f"--metrics-listen-address=127.0.0.1:{metrics_port}"], log, env=env)
    ensure_namespace(demo, "flower")
    demo.kubectl("-n", "flower", "apply", "-f", str(ISSUERS))
    deadline = time.monotonic() + 120
    while demo.kubectl("-n", "flower", "wait", "--for=condition=Ready", "issuer/flower-ca", "--timeout=5s",
                       check=False).returncode != 0:
        if demo.alive("cert-manager") is None or time.monotonic() > deadline:
            raise SystemExit(f"error: the Issuer flower-ca did not get ready; see {log}:\n"
                             f"{log.read_text(errors='replace')[-2000:]}")
    print(f"cert-manager {binary_path().parent.name} running (log: {log}); Issuer flower/flower-ca ready")


def wait_certificate(demo: Demo) -> None:
    step("cert-manager issues the Certificate flower-syncer rendered for federation-tls's SuperLink")
    demo.kubectl("-n", "flower", "wait", "--for=condition=Ready", "certificate/federation-tls-superlink",
                 "--timeout=120s")
    if not (demo.dir / "in-cluster").exists():  # the next sync copies the issued CA for the SuperNodes
        demo.run(["flower-syncer", "resync", "--wait", "--timeout", "1m"], check=False, quiet=True)
    print(demo.kubectl("-n", "flower", "get", "certificates,issuers").stdout.rstrip())


# -- node authentication (in the cluster) -------------------------------------------------------

NODE_AUTH = REPO / "config" / "demo" / "node-auth" / "federations" / "federation-auth.yaml"
HUB_KEY_SECRET = "federation-auth-hub-key"


def node_auth_federation(demo: Demo) -> None:
    """The hub pool's key pair (OpenSSH ECDSA, as Flower reads it) made here, its private key a
    Secret, its public key listed in federation-auth, committed with the guardrail that lets the
    pool mount that Secret."""
    config = demo.dir / "config"
    target = config / "federations" / NODE_AUTH.name
    step("node authentication: a key pair for federation-auth's hub SuperNode (ssh-keygen), its private key a "
         "Secret, its public key listed in the Federation")
    keys = demo.dir / "node-auth"
    keys.mkdir(exist_ok=True)
    if not (keys / "hub").exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", f"demo {demo.name} hub",
                        "-f", str(keys / "hub")], check=True, capture_output=True)
    ensure_namespace(demo, "flower")
    if demo.kubectl("-n", "flower", "get", "secret", HUB_KEY_SECRET, check=False).returncode != 0:
        demo.kubectl("-n", "flower", "create", "secret", "generic", HUB_KEY_SECRET,
                     f"--from-file=key={keys / 'hub'}")
    if target.exists():  # committed by an earlier up (the cluster may be a fresh one: the Secret is made above)
        return
    public = (keys / "hub.pub").read_text().strip()
    target.write_text(NODE_AUTH.read_text().replace("PUBLIC_KEY", public))
    settings = config / "flower-syncer.yaml"  # within the admin's policy, which allows it too (start_in_cluster)
    settings.write_text(settings.read_text().rstrip("\n") + "\n# the hub pool of federation-auth mounts its key "
                        f"(tools/demo --with node-auth)\nguardrails:\n  allowedSecrets: [{HUB_KEY_SECRET}]\n")
    git(config, "add", "-A")
    git(config, "commit", "-qm", "A Federation with SuperNode authentication")


def show_node_auth(demo: Demo) -> None:
    """federation-auth once Synced (its keys registered: a failed registration is a SyncFailed) and
    Healthy (the hub SuperNode, which the SuperLink admits only with its key, is ready)."""
    step("node authentication: the agent registers the hub's key with federation-auth's SuperLink "
         "(federation-auth-superlink.flower.svc:9093)")
    deadline = time.monotonic() + 180
    shown = demo.kubectl("-n", "flower", "get", "flowerunit", "federation.federation-auth", check=False)
    while time.monotonic() < deadline:
        shown = demo.kubectl("-n", "flower", "get", "flowerunit", "federation.federation-auth", check=False)
        if " True " in shown.stdout:
            break
        time.sleep(2)
    print(shown.stdout.rstrip() or shown.stderr.rstrip())


# -- Prometheus --------------------------------------------------------------------------------

def start_prometheus(demo: Demo, agent_port: int, port: int) -> None:
    exe = shutil.which("prometheus")
    if exe is None:
        raise SystemExit("error: prometheus is not installed: apt-get install prometheus (tools/env.sh does)")
    step(f"Prometheus ({exe}) on 127.0.0.1:{port}, scraping the agent every 5 s, with dashboards/alerts.yaml")
    work = demo.dir / "prometheus"
    work.mkdir(parents=True, exist_ok=True)
    target = f"127.0.0.1:{agent_port}"
    if (demo.dir / "in-cluster").exists():  # the agent's Service, forwarded to the agent's port here
        env = demo.env()
        demo.spawn("agent-forward", ["kubectl", "-n", AGENT_NAMESPACE, "port-forward", "--address", "127.0.0.1",
                                     "svc/flower-syncer", f"{agent_port}:9090"], demo.dir / "agent-forward.log",
                   env=env)
    config = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
              "rule_files": [str(ALERTS)],
              "scrape_configs": [{"job_name": "flower-syncer", "static_configs": [
                  {"targets": [target], "labels": {"demo": demo.name}}]}]}
    (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = demo.dir / "prometheus.log"
    url = f"http://127.0.0.1:{port}"
    demo.spawn("prometheus", [exe, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                              f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], log)
    wait_for("Prometheus ready", lambda: http_ok(f"{url}/-/ready"), timeout=60, log=log)

    def scraped() -> bool:
        try:
            import urllib.request

            with urllib.request.urlopen(f"{url}/api/v1/query?query=up", timeout=2) as resp:
                result = json.load(resp)["data"]["result"]
            return any(r["value"][1] == "1" for r in result)
        except (OSError, ValueError, KeyError):
            return False

    wait_for("Prometheus's first scrape of the agent", scraped, timeout=60, log=log)
    (demo.dir / "prometheus-url").write_text(url + "\n")
    print(f"Prometheus: {url} (targets: {url}/targets, alert rules: {url}/rules)")


# -- the agent in the cluster ------------------------------------------------------------------

def start_in_cluster(demo: Demo, key: Path | None, allowed_secrets: tuple[str, ...] = ()) -> None:
    step("the agent's image: python3 tools/images.py agent (cached per source change; cold: ~3 min)")
    built = demo.run([sys.executable, str(REPO / "tools" / "images.py"), "agent"], capture=True)
    archive = built.stdout.strip().splitlines()[-1]
    demo.devcluster("load-image", archive)
    info = demo.cluster_info()
    node = info["real_nodes"][0]

    step(f"a Git server on the real node ({node['node_ip']}), which the pods reach; the config repo pushes to "
         "it after every commit")
    served = demo.dir / "git"
    bare = served / "config.git"
    if not bare.exists():
        served.mkdir(parents=True, exist_ok=True)
        git(served, "clone", "-q", "--bare", str(demo.dir / "config"), str(bare))
        git(demo.dir / "config", "remote", "add", "origin", str(bare))
        hook = demo.dir / "config" / ".git" / "hooks" / "post-commit"
        hook.write_text("#!/bin/sh\n# tools/demo --in-cluster: the agent pulls from the Git server on the node\n"
                        "exec git push -q origin HEAD:main\n")
        hook.chmod(0o755)
    git(demo.dir / "config", "push", "-q", "origin", "HEAD:main")
    token_file = demo.dir / GIT_TOKEN_FILE
    if not token_file.exists():
        token_file.write_text(os.urandom(16).hex())  # no newline: --set-file takes the file's bytes
        token_file.chmod(0o600)
    port_file = demo.dir / "git-server.port"
    port_file.unlink(missing_ok=True)
    log = demo.dir / "git-server.log"
    demo.spawn("git-server", ["ip", "netns", "exec", node["netns"], sys.executable, str(Path(__file__).resolve()),
                              "git-serve", "--root", str(served), "--host", node["node_ip"],
                              "--token-file", str(token_file), "--port-file", str(port_file)], log)
    wait_for("the Git server", port_file.exists, timeout=30, log=log)
    repo_url = f"http://{node['node_ip']}:{port_file.read_text().strip()}/config.git"

    step(f"helm install flower-syncer charts/flower-syncer -n {AGENT_NAMESPACE} (image {AGENT_IMAGE})")
    ensure_namespace(demo, AGENT_NAMESPACE)
    values = {"image.repository": AGENT_IMAGE.rsplit(":", 1)[0], "image.tag": "dev", "image.pullPolicy": "Never",
              "git.repo": repo_url, "git.interval": "5", "grafanaDashboards.enabled": "false"}
    sets = [arg for k, v in values.items() for arg in ("--set", f"{k}={v}")]
    sets += ["--set-file", f"git.token={token_file}"]
    for i, name in enumerate(allowed_secrets):  # the admin's policy (the chart's) decides, not the repo's own
        sets += ["--set", f"policy.default.guardrails.allowedSecrets[{i}]={name}"]
    if key is not None:  # the chart mounts every key of the Secret as an identity file
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-age-key"},
                  "data": {"age.key": base64.b64encode(key.read_bytes()).decode()}}
        demo.kubectl("-n", AGENT_NAMESPACE, "apply", "-f", "-", input=json.dumps(secret))
        sets += ["--set", "decryption.existingSecret=demo-age-key"]
    demo.run(["helm", "upgrade", "--install", "flower-syncer", str(REPO / "charts" / "flower-syncer"),
              "-n", AGENT_NAMESPACE, *sets, "--wait", "--timeout", "180s"], capture=True)
    (demo.dir / "in-cluster").write_text(repo_url + "\n")
    print(f"the agent runs in the cluster (kubectl -n {AGENT_NAMESPACE} get pods), pulling {repo_url} every 5 s")


def git_serve(argv: list[str]) -> int:
    """The in-cluster mode's Git server (run in the node's network namespace): until SIGTERM."""
    p = argparse.ArgumentParser(prog="demoextras.py git-serve")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--token-file", type=Path, required=True)
    p.add_argument("--port-file", type=Path, required=True)
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.integration.gitservers import GitHttpServer  # the tests' server, shared: not a test module

    server = GitHttpServer(args.root, args.token_file.read_text().strip(), host=args.host, port=GIT_PORT).start()
    args.port_file.write_text(server.base_url.rsplit(":", 1)[1] + "\n")
    print(f"serving {args.root} at {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


# -- training on the real node -----------------------------------------------------------------

def train(demo: Demo, timeout: float = 1200) -> None:
    """`flwr run tests/fixtures/e2e-app`, 2 rounds on every SuperNode that dials
    federation-statefulset's SuperLink: its pools (3 + 2) and the pytorch (1) and tensorflow (3)
    releases. The Control API is reached through a port-forward; the CLI is the SuperLink's own
    Flower version (a CLI speaks its own release's Control API), in a venv of its own, made once
    (the tests use the same one: flower_bin in tests/integration/superlinks.py)."""
    step("training: flwr run tests/fixtures/e2e-app, 2 rounds on every SuperNode of federation-statefulset")
    nodes = 9
    text = (REPO / "config" / "examples" / "federations" / "statefulset.yaml").read_text()
    version = next(line.split("flwr/superlink:")[1].strip() for line in text.splitlines()
                   if "image: flwr/superlink:" in line)
    cli = cache_root() / "flwr" / version
    if not (cli / ".complete").exists():
        step(f"installing the flwr CLI {version} into {cli} (once; ~1 min)")
        shutil.rmtree(cli, ignore_errors=True)
        demo.run([sys.executable, "-m", "venv", str(cli)])
        demo.run([str(cli / "bin" / "pip"), "install", "--quiet", f"flwr=={version}"])
        (cli / ".complete").write_text(f"flwr=={version}\n")
    port = free_port()
    env = demo.env()
    demo.spawn("train-forward", ["kubectl", "-n", "flower", "port-forward", "--address", "127.0.0.1",
                                 "svc/federation-statefulset-superlink", f"{port}:9093"],
               demo.dir / "port-forward.log", env=env)
    try:
        wait_for("the port-forward", lambda: "Forwarding from" in (demo.dir / "port-forward.log").read_text(),
                 timeout=20)
        app, home = demo.dir / "app", demo.dir / "flwr"
        shutil.rmtree(app, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(REPO / "tests" / "fixtures" / "e2e-app", app)
        home.mkdir()
        (home / "config.toml").write_text(f'[superlink]\ndefault = "demo"\n\n[superlink.demo]\n'
                                          f'address = "127.0.0.1:{port}"\ninsecure = true\n')
        # the connection is in the CLI's own config (FLWR_HOME/config.toml), which every release since 1.26 reads
        run = subprocess.Popen([str(cli / "bin" / "flwr"), "run", str(app), "demo", "--stream", "--run-config",
                                f"num-nodes={nodes}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**env, "FLWR_HOME": str(home)})
        marks = ("ROUND", "_train:", "Strategy execution", "E2E-SERVER", "rror")
        last: list[str] = []
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            run.kill()

        expired = threading.Timer(timeout, expire)  # the output loop below would wait for ever
        expired.start()
        assert run.stdout is not None
        try:
            for line in run.stdout:  # as the rounds go
                last = [*last[-40:], line]
                if any(m in line for m in marks):
                    print(line, end="", flush=True)
            run.wait()
        finally:
            expired.cancel()
            if run.poll() is None:  # Ctrl-C: the CLI goes too
                run.kill()
                run.wait()
        if fired.is_set():
            raise SystemExit(f"error: flwr run did not finish within {timeout:.0f}s (--train-timeout); its last "
                             f"lines:\n{''.join(last)}\nwhich pools are ready: flower-syncer status; the SuperNodes' "
                             "logs: kubectl -n flower logs <pod>")
        if run.returncode != 0:
            raise SystemExit(f"error: flwr run failed (exit {run.returncode}); its last lines:\n{''.join(last)}")
    finally:
        demo.stop("train-forward")
    print("ClientApp output of one SuperNode (kubectl -n flower logs federation-statefulset-supernode-default-0):")
    logs = demo.kubectl("-n", "flower", "logs", "federation-statefulset-supernode-default-0", check=False).stdout
    print("\n".join(line for line in logs.splitlines() if "E2E-CLIENT" in line))


# -- down --------------------------------------------------------------------------------------

def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).lstat().st_size
            except OSError:
                continue
    return total


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} GB"


def down(demo: Demo, *, purge: bool) -> int:
    state_is_ours = demo.state_dir == cache_root() / "devcluster" / demo.name
    if not demo.dir.exists() and not (demo.state_dir / "state.json").exists() and not (
            purge and state_is_ours and demo.state_dir.exists()):
        print(f"there is no demo named {demo.name} (nothing in {demo.dir} or {demo.state_dir})")
        return 0
    stopped = [what for what in (*PROCESSES, "train-forward") if demo.alive(what) and demo.stop(what)]
    print(f"stopped: {', '.join(stopped) or 'no demo process was running'}")
    parts = [("cluster state (certificates, logs, a real node's containers and images)", demo.state_dir),
             ("config repo, logs, Prometheus data, Git server, agent cache", demo.dir)]
    sizes = {path: _size(path) for _, path in parts if purge and path.exists()}  # before `down` deletes some
    if (demo.state_dir / "state.json").exists() or (purge and demo.state_dir.exists()):
        demo.devcluster("down", *(["--purge"] if purge else []))
    if not purge:
        print(f"kept: {demo.dir} (config repo, logs) and the cluster's certificates; `{demo.cmd('down')} --purge` "
              "deletes them")
        return 0
    removed = []
    for what, path in parts:
        if path not in sizes or (path == demo.state_dir and not state_is_ours):
            continue
        if path == demo.state_dir:  # what `devcluster down --purge` left, never through a mount under it
            remove_unless_mounted(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
        left = " (some of it could not be removed)" if path.exists() else ""
        removed.append(f"  {path}: {human(sizes[path])}, {what}{left}")
    total = "removed:\n" + "\n".join(removed) if removed else "nothing left to remove"
    print(total)
    if not state_is_ours and demo.state_dir.exists():
        print(f"kept {demo.state_dir} (FLOWER_SYNCER_DEVCLUSTER_DIR names it; not the demo's own)")
    print("kept: the shared caches under ~/.cache/flower-syncer (binaries, images, the flwr CLI), which other "
          "demos and the tests reuse")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["git-serve"]:
        sys.exit(git_serve(sys.argv[2:]))
    sys.exit("usage: demoextras.py git-serve --root DIR --host ADDR --token-file FILE --port-file FILE")
