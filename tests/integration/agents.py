"""The agent as people run it, for tests of every directory: `flower-syncer run` in a subprocess
(`AgentProc`, started by the `start_agent` fixture) syncing a real Git repository (`Repos`, the
`repos` fixture: a bare remote and a work tree with the Federation `FED`). tests/conftest.py
imports both fixtures, so every directory has them. A helper module, not a test module: tests
import from here, never from each other."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.builders import federation, git, pool

if TYPE_CHECKING:
    from syncer.cluster.client import Kube
    from tests.conftest import KubeCluster

# The agent tests' Federation, `FED.format(image=..., replicas=...)`: tests/builders.py's with the
# SuperNodes' image and the replicas of its pool "a" left to fill in
FED = (federation(pools=pool("a", replicas="{replicas}")).replace("{}", "{{}}")
       .replace("flwr/supernode:1.25.0", "{image}"))


@dataclass
class Repos:
    bare: Path
    work: Path

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for rel, text in files.items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class AgentProc:
    proc: subprocess.Popen[str]
    url: str
    token: str
    log: Path
    clean_exit: bool = True  # False when a test kills it on purpose

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError):
            return 0, b""  # not listening (yet)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def metric(self, name: str, **labels: str) -> float | None:
        _, body = self.get("/metrics")
        for line in body.decode().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            # stuck: its threads' stacks into its log (SIGQUIT), for the failure to show where
            self.proc.send_signal(signal.SIGQUIT)
            wait_for_stacks(self.log)
            raise AssertionError("the agent did not stop within 30 s of SIGTERM; its log ends:\n"
                                 + self.log.read_text(errors="replace")[-6000:]) from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def wait_for_stacks(log: Path, timeout: float = 5.0) -> None:
    """Until faulthandler's dump (after a SIGQUIT) is in `log`, at most `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while "most recent call first" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)


def new_repos(root: Path, namespace: str, files: dict[str, str]) -> Repos:
    """A bare remote `root`/config.git and its clone `root`/work on `main`, whose first commit (pushed)
    has flower-syncer.yaml (named, and defaulting to, `namespace`) and `files`."""
    bare = root / "config.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    work = root / "work"
    git(root, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    r = Repos(bare, work)
    r.commit({"flower-syncer.yaml": f"name: {namespace}\ndefaultNamespace: {namespace}\n", **files}, "initial")
    return r


@pytest.fixture
def repos(tmp_path: Path, namespace: str) -> Repos:
    return new_repos(tmp_path, namespace, {"federations/fed.yaml": FED.format(image="flwr/supernode:1.25.0",
                                                                              replicas=2)})


@pytest.fixture
def start_agent(tmp_path: Path, kube_cluster: KubeCluster, namespace: str) -> Iterator[Callable[..., AgentProc]]:
    started: list[AgentProc] = []

    def start(repo: str, *extra: str, name: str = "agent", wait_ready: bool = True) -> AgentProc:
        port = free_port()
        token = "test-token-" + name
        (tmp_path / f"{name}.token").write_text(token)
        (tmp_path / f"{name}.hook").write_text("hook-secret")
        log = tmp_path / f"{name}.log"
        args = [sys.executable, "-m", "syncer", "run", "--repo", repo, "--kubeconfig", kube_cluster.kubeconfig,
                "--listen", f"127.0.0.1:{port}", "--namespaces", namespace, "--lease-namespace", namespace,
                "--api-token-file", str(tmp_path / f"{name}.token"),
                "--webhook-secret-file", str(tmp_path / f"{name}.hook"),
                "--cache-dir", str(tmp_path / f"{name}-cache"), "--identity", name, "--log-format", "json",
                "--interval", "3600", *extra]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)
        agent = AgentProc(proc, f"http://127.0.0.1:{port}", token, log)
        started.append(agent)
        if wait_ready:
            from tests.conftest import wait_until  # the conftest imports this module

            wait_until("agent ready", lambda: (agent.proc.poll() is None and agent.get("/readyz")[0] == 200)
                     or agent.proc.poll() is not None, timeout=60, log=log)
            assert agent.proc.poll() is None, log.read_text()[-3000:]
        return agent

    yield start
    for agent in started:
        code = agent.stop()
        if agent.clean_exit:
            assert code == 0, f"agent exited with {code}\n{agent.log.read_text()[-3000:]}"


def sts(kube: Kube, namespace: str, name: str = "fed-supernode-a") -> dict[str, Any]:
    return kube.get("StatefulSet", namespace, name) or {}


def reported(kube: Kube, namespace: str, reason: str) -> list[dict[str, Any]]:
    """The events.k8s.io Events flower-syncer posted in `namespace` with `reason`."""
    from syncer.cluster.client import path_for

    items = kube.request("GET", path_for("events.k8s.io/Event", namespace)).get("items", [])
    return [e for e in items if e.get("reason") == reason and e.get("reportingController") == "flower-syncer"]
