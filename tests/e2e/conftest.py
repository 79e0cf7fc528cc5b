"""End-to-end fixtures: a devcluster with a real node (containerd, kubelet, CNI, CoreDNS), the agent
running against it from a Git repository, and a way to reach Services from this machine.

The cluster is this session's own (``e2e-<pid>``, or the name in ``FLOWER_SYNCER_E2E_CLUSTER``:
one of your own, beside others' on a shared machine), started with ``--real-nodes 1`` and no fake
nodes, so every pod runs in a real container; it is stopped and purged at the end. When a cluster
of that name is already running with a real node (``devcluster up --real-nodes 1`` by hand), the
session uses it and leaves it up: tests run again without an ``up``. It needs root and the images
from tools/images.py (``up`` builds them when missing). Under ``CI=true`` anything missing is a
failure, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApiError, RegisteredNode, RunInfo, Transport
from tests.conftest import DEVCLUSTER, IN_CI, wait_until
from tests.integration.agents import Repos, free_port, git
from tests.integration.superlinks import DEV, flower_bin

CLUSTER_NAME = os.environ.get("FLOWER_SYNCER_E2E_CLUSTER") or f"e2e-{os.getpid()}"
UP_TIMEOUT_S = 900  # a cold image build is part of it
ConfigRepo = Repos  # a bare remote and a working clone: `commit` is a user's commit and push


def _unavailable(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"end-to-end cluster unavailable: {reason}", pytrace=False)
    pytest.skip(f"end-to-end cluster unavailable: {reason}")


def _devcluster(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command, rest = args[0], args[1:]
    return subprocess.run([sys.executable, str(DEVCLUSTER), command, "--name", CLUSTER_NAME, *rest],
                          capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class RealCluster:
    kubeconfig: str
    bin_dir: Path
    node: dict[str, Any]
    state_dir: Path

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin_dir / "kubectl"), *args], capture_output=True, text=True, check=check,
                              timeout=timeout, input=input, env={**os.environ, "KUBECONFIG": self.kubeconfig})

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    @contextmanager
    def port_forward(self, namespace: str, target: str, port: int, local: int = 0) -> Iterator[int]:
        """`kubectl port-forward` to `target` (svc/name or pod/name): a local port on 127.0.0.1."""
        local = local or free_port()
        proc = subprocess.Popen(
            [str(self.bin_dir / "kubectl"), "-n", namespace, "port-forward", "--address", "127.0.0.1", target,
             f"{local}:{port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "KUBECONFIG": self.kubeconfig},
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "Forwarding from" in line, f"kubectl port-forward {target}: {line}{proc.stdout.read()}"
            yield local
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        args = ["-n", namespace, "logs", pod, *(["-c", container] if container else [])]
        return self.kubectl(*args, check=False).stdout


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    if os.geteuid() != 0:
        _unavailable("a real node needs root (network namespaces, cgroups, mounts)")
    running = json.loads(_devcluster("status", "--json").stdout or "{}")
    if running.get("running") and running.get("real_nodes"):  # yours, brought up by hand: used and left up
        yield RealCluster(kubeconfig=running["kubeconfig"], bin_dir=Path(running["bin_dir"]),
                          node=running["real_nodes"][0], state_dir=Path(running["state_dir"]))
        return
    try:
        up = _devcluster("up", "--real-nodes", "1", "--cpu-nodes", "0", "--nvidia-nodes", "0", "--amd-nodes", "0",
                         "--timeout", "240", "--build", timeout=UP_TIMEOUT_S)
    except BaseException:  # stopped during `up` (Ctrl-C, SIGTERM): what it made so far goes
        _devcluster("down", "--purge")
        raise
    if up.returncode != 0:
        _devcluster("down", "--purge")
        _unavailable(f"`devcluster up --real-nodes 1` failed:\n{up.stdout[-4000:]}{up.stderr[-4000:]}")
    sys.stderr.write(up.stdout)
    info = json.loads(_devcluster("status", "--json").stdout)
    try:
        yield RealCluster(kubeconfig=info["kubeconfig"], bin_dir=Path(info["bin_dir"]), node=info["real_nodes"][0],
                          state_dir=Path(info["state_dir"]))
    finally:
        down = _devcluster("down", "--purge")
        if down.returncode != 0:
            sys.stderr.write(f"devcluster down failed:\n{down.stdout}{down.stderr}")
        shutil.rmtree(info["state_dir"], ignore_errors=True)
    assert down.returncode == 0, down.stdout + down.stderr
    assert host_leftovers(info["real_nodes"][0]) == [], "`down` left these on the host"


def host_leftovers(node: dict[str, Any]) -> list[str]:
    """What of a real node is still on the host after `down`: its network namespace, the host end
    of its veth, cgroups, mounts, processes."""
    left = []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    if node["netns"] in namespaces.split():
        left.append(f"network namespace {node['netns']}")
    if subprocess.run(["ip", "link", "show", node["host_if"]], capture_output=True, check=False).returncode == 0:
        left.append(f"link {node['host_if']}")
    left += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{node['cgroup_root'].lstrip('/')}")]
    left += [line.split()[1] for line in Path("/proc/self/mountinfo").read_text().splitlines()
             if node["dir"] in line.split()[4]]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if node["dir"].encode() in (proc / "cmdline").read_bytes():
                    left.append(f"process {proc.name}")
            except OSError:
                pass
    return left


@pytest.fixture
def e2e_namespace(real_cluster: RealCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "e2e-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].strip("-")
    wait_until(f"namespace {name} of an earlier session gone (a cluster left up)", lambda: real_cluster.kubectl(
        "get", "namespace", name, check=False).returncode != 0, timeout=180, interval=1)
    real_cluster.kubectl("create", "namespace", name)
    wait_until("default ServiceAccount", lambda: real_cluster.kubectl(
        "-n", name, "get", "serviceaccount", "default", check=False).returncode == 0)
    yield name
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def config_repo(tmp_path: Path) -> ConfigRepo:
    bare = tmp_path / "config.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    return ConfigRepo(bare, work)


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    log: Path
    url: str

    def unit(self, unit: str) -> dict[str, Any]:
        """`unit` in the agent's /api/v1/status ({} while the agent does not answer or list it)."""
        try:
            with urllib.request.urlopen(self.url + "/api/v1/status", timeout=10) as resp:
                report = json.loads(resp.read())
        except OSError:
            return {}
        return next((dict(u) for u in report.get("units", []) if u["unit"] == unit), {})

    def metric(self, name: str, **labels: str) -> float | None:
        """A sample of the agent's /metrics with these labels, or None."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
                body = resp.read().decode()
        except OSError:
            return None
        for line in body.splitlines():
            if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None


@pytest.fixture
def run_agent(tmp_path: Path, real_cluster: RealCluster) -> Iterator[Callable[[ConfigRepo, str], Agent]]:
    """`flower-syncer run` on this machine against the real cluster, watching `repo`."""
    agents: list[Agent] = []

    def start(repo: ConfigRepo, namespace: str) -> Agent:
        log = tmp_path / "agent.log"
        listen = f"127.0.0.1:{free_port()}"
        args = [sys.executable, "-m", "syncer", "run", "--repo", str(repo.bare), "--kubeconfig",
                real_cluster.kubeconfig, "--listen", listen, "--namespaces", namespace,
                "--lease-namespace", namespace, "--cache-dir", str(tmp_path / "agent-cache"), "--identity", "e2e",
                "--interval", "3600"]
        with log.open("w") as err:
            agent = Agent(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err), log, f"http://{listen}")
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.proc.send_signal(signal.SIGTERM)
        try:
            agent.proc.wait(30)
        except subprocess.TimeoutExpired:
            agent.proc.kill()


def flwr_command(app: Path, address: str, home: Path, run_config: str = "", root_certificates: Path | None = None,
                 version: str = "") -> tuple[list[str], dict[str, str]]:
    """The command line and environment of `flwr run APP e2e --stream` against the Control API at
    `address` (TLS when given the CA), with the `flwr` CLI of `version` (default: the dev venv's)."""
    home.mkdir(parents=True, exist_ok=True)
    tls = f'root-certificates = "{root_certificates}"' if root_certificates else "insecure = true"
    connection = f'[superlink.e2e]\naddress = "{address}"\n{tls}\n'
    (home / "config.toml").write_text(f'[superlink]\ndefault = "e2e"\n\n{connection}')
    work = home / "app"
    shutil.copytree(app, work, dirs_exist_ok=True)
    # The CLI of the SuperLink's release (a CLI speaks its own release's Control API: gRPC up to
    # 1.36, HTTP from 1.37): the dev venv's 1.26.0, the newest release's from the compatibility test's
    # dependency set (tools/flower_releases.py), or a venv made once by the set-up under
    # ~/.cache/flower-syncer/flwr/<version> (shared with the Control API tests and tools/demo --real).
    # That costs ~1-3 min once (the wheels mostly come from pip's cache after tools/images.py) and
    # nothing after; running the CLI in a container image instead would need the app and its config
    # copied into a pod, and a pod, for every run.
    flwr = flower_bin(version or DEV) / "flwr"
    extra = ["--run-config", run_config] if run_config else []
    return [str(flwr), "run", str(work), "e2e", "--stream", *extra], {**os.environ, "FLWR_HOME": str(home)}


def flwr_run(app: Path, address: str, home: Path, timeout: float = 300, run_config: str = "",
             root_certificates: Path | None = None, version: str = "",
             where: tuple[RealCluster, str] | None = None) -> str:
    """`flwr run` (see flwr_command) to its end; returns its output. `where` (the cluster and the
    namespace of the federation): a failure also says whether Flower refused its own app processes
    for starting too slowly (see task_token_refusals)."""
    argv, env = flwr_command(app, address, home, run_config, root_certificates, version)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout  # bytes, whatever `text` says
        output = out.decode(errors="replace") if isinstance(out, bytes) else out or ""
        raise AssertionError(f"flwr run did not end in {timeout:g}s\n{output[-4000:]}"
                             + (task_token_refusals(*where) if where else "")) from None
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, (f"flwr run failed ({proc.returncode}):\n{output[-4000:]}"
                                  + (task_token_refusals(*where) if where else ""))
    return output


TASK_TOKEN_REFUSED = "Runtime task-token authentication failed"


def task_token_refusals(cluster: RealCluster, namespace: str) -> str:
    """Why a run of Flower 1.41+ never trained on a starved machine, or "": the SuperExec claims a
    task and gets a token valid for 30 s (`HEARTBEAT_DEFAULT_INTERVAL`, a constant of Flower: no
    flag or variable sets it); the ServerApp (ClientApp) process it launches must send its first
    heartbeat or pull its input within those 30 s. A pod that gets too little CPU to start Python
    and import flwr in that time is refused by its own SuperLink (SuperNode) with this message, its
    task goes back to pending, is claimed again, refused again: the run stays `starting`."""
    counts = []
    for obj in cluster.json("-n", namespace, "get", "pods")["items"]:
        logs = cluster.kubectl("-n", namespace, "logs", obj["metadata"]["name"], "--all-containers", check=False).stdout
        if hits := logs.count(TASK_TOKEN_REFUSED):
            counts.append(f"{obj['metadata']['name']} {hits}x")
    if not counts:
        return ""
    return (f"\n--- Flower refused its own app processes: {TASK_TOKEN_REFUSED!r} ({', '.join(counts)}): each "
            "started later than 30 s after its task was claimed (Flower's fixed start window): the node is "
            f"starved of CPU (load {os.getloadavg()[0]:.0f}), not a flower-syncer fault ---")


def syncer_status(cluster: RealCluster, namespace: str) -> Any:
    """`flower-syncer status -n NS -o json`, as a user would run it."""
    proc = subprocess.run([sys.executable, "-m", "syncer", "status", "--kubeconfig", cluster.kubeconfig, "-n",
                           namespace, "-o", "json"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def control_api(address: str, ca: bytes | None = None, transport: Transport = "http",
                ) -> tuple[list[RunInfo], list[RegisteredNode]] | None:
    """The runs and nodes the Control API at `address` lists (over HTTP, Flower 1.37+; gRPC before),
    or None while it does not answer (a SuperLink restarting, a port-forward to a pod that is gone)."""
    try:
        api = connect(address, transport, ca, timeout=5)
    except (ControlApiError, OSError):
        return None
    try:
        return list(api.list_runs()), list(api.list_nodes())
    except (ControlApiError, OSError):
        return None
    finally:
        api.close()


def pod(cluster: RealCluster, namespace: str, name: str) -> dict[str, Any]:
    """The pod `name` ({} while there is none)."""
    got = cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return dict(json.loads(got.stdout)) if got.returncode == 0 else {}


def ready_replicas(cluster: RealCluster, namespace: str, kind: str, name: str) -> int:
    obj = cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json", check=False)
    if obj.returncode != 0:
        return 0
    return int(json.loads(obj.stdout).get("status", {}).get("readyReplicas") or 0)


def namespace_state(cluster: RealCluster, namespace: str) -> str:
    """The pods (their phase, conditions and containers' states), the claims and the last Events
    of `namespace`: what a failed wait prints, for a cluster that is gone when the session ends."""
    lines = []
    for obj in cluster.json("-n", namespace, "get", "pods")["items"]:
        status = obj.get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        lines.append(f"pod {obj['metadata']['name']}: {status.get('phase')} {conditions}")
        for c in status.get("containerStatuses") or []:
            lines.append(f"  {c['name']}: ready={c.get('ready')} restarts={c.get('restartCount')} "
                         f"state={json.dumps(c.get('state'))[:300]}")
            if not c.get("ready"):
                tail = cluster.kubectl("-n", namespace, "logs", obj["metadata"]["name"], "-c", c["name"], "--tail",
                                       "15", check=False).stdout
                lines += [f"    | {line[:300]}" for line in tail.splitlines()]
    for obj in cluster.json("-n", namespace, "get", "pvc")["items"]:
        lines.append(f"pvc {obj['metadata']['name']}: {obj.get('status', {}).get('phase')}")
    events = cluster.json("-n", namespace, "get", "events")["items"]
    for e in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))[-20:]:
        lines.append(f"event {e.get('involvedObject', {}).get('name')}: {e.get('reason')}: "
                     f"{str(e.get('message') or '')[:300]}")
    return "\n".join(lines)


def wait_ready(cluster: RealCluster, namespace: str, kind: str, name: str, want: int, agent: Agent,
               timeout: float = 180) -> None:
    started = time.monotonic()
    try:
        wait_until(f"{kind}/{name} {want} ready", lambda: ready_replicas(cluster, namespace, kind, name) >= want,
                   timeout=timeout, interval=0.5, log=agent.log)
    except AssertionError as exc:
        shows = namespace_state(cluster, namespace)
        raise AssertionError(f"{exc}\n--- what the namespace shows ---\n{shows}") from None
    sys.stderr.write(f"{kind}/{name}: {want} ready after {time.monotonic() - started:.1f}s\n")
