"""The parts of `tools/demo` (tools/demo.py is its command line): the demo's paths and processes,
the cluster, the config repo and the agent on the host. tools/demoextras.py has the rest:
cert-manager, Prometheus, the agent in the cluster, training on a real node, `down [--purge]`.

Every process the demo starts is recorded in `<demo dir>/pids/<what>.pid` with the end of its
command line, and `down` signals only a pid whose /proc/<pid>/cmdline still ends so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEVCLUSTER = REPO / "tools" / "devcluster.py"
AGENT_IMAGE = "localhost/flower-syncer:dev"
GIT_TOKEN_FILE = "git-token"


def step(what: str) -> None:
    print(f"\n==> {what}", flush=True)


def cache_root() -> Path:
    return Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))


@dataclass
class Demo:
    name: str
    dir: Path
    repo: Path

    @property
    def state_dir(self) -> Path:
        given = os.environ.get("FLOWER_SYNCER_DEVCLUSTER_DIR")
        return Path(given) if given else cache_root() / "devcluster" / self.name

    def cmd(self, *words: str) -> str:
        """How a user runs tools/demo on this demo: with its --name unless it is the default."""
        return " ".join(["tools/demo", *([] if self.name == "demo" else ["--name", self.name]), *words])

    def devcluster_args(self, command: str, *args: str) -> list[str]:
        """`devcluster.py COMMAND` on this demo's cluster (named as the demo, so what it prints,
        e.g. its `use it with:` line, names it too)."""
        where = (["--state-dir", os.environ["FLOWER_SYNCER_DEVCLUSTER_DIR"]]
                 if os.environ.get("FLOWER_SYNCER_DEVCLUSTER_DIR") else ["--name", self.name])
        return [sys.executable, str(DEVCLUSTER), command, *where, *args]

    def devcluster(self, command: str, *args: str, capture: bool = False) -> str:
        done = subprocess.run(self.devcluster_args(command, *args), text=True, capture_output=capture, check=False)
        if done.returncode != 0:
            raise SystemExit(f"error: devcluster {command} {' '.join(args)} failed (exit {done.returncode})"
                             + (f": {done.stderr.strip()}" if capture else ""))
        return done.stdout if capture else ""

    def cluster_info(self) -> dict[str, Any]:
        info: dict[str, Any] = json.loads(self.devcluster("status", "--json", capture=True))
        return info

    def env(self) -> dict[str, str]:
        """The environment of the commands the demo runs: `tools/demo env`'s exports."""
        info = self.cluster_info()
        out = {**os.environ, "KUBECONFIG": str(info["kubeconfig"]),
               "PATH": f"{info['bin_dir']}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        port = (self.dir / "port").read_text().strip()
        out.update(FLOWER_SYNCER_LISTEN=f"127.0.0.1:{port}", FLOWER_SYNCER_API_TOKEN_FILE=str(self.dir / "api-token"))
        key = self.decryption_key()
        if key is not None:
            out.update(FLOWER_SYNCER_DECRYPTION_KEY_FILES=str(key), SOPS_AGE_KEY_FILE=str(key))
        return out

    def decryption_key(self) -> Path | None:
        recorded = self.dir / "decryption-key"
        return Path(recorded.read_text().strip()) if recorded.exists() else None

    def run(self, args: Sequence[str], *, check: bool = True, capture: bool = False, input: str | None = None,
            quiet: bool = False, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(args), env={**self.env(), **(extra_env or {})}, text=True,
                              capture_output=capture or quiet, input=input, check=False)
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout or "").strip()[-2000:] if capture or quiet else ""
            raise SystemExit(f"error: {' '.join(args)} failed (exit {done.returncode})"
                             + (f": {detail}" if detail else ""))
        return done

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(["kubectl", *args], check=check, capture=True, input=input)

    # -- processes ------------------------------------------------------------------------------

    def spawn(self, what: str, args: Sequence[str], log: Path, *, env: dict[str, str] | None = None) -> int:
        """Start a process that outlives tools/demo (its own session), recorded for `down`."""
        self.stop(what)
        (self.dir / "pids").mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env or self.env(), start_new_session=True)
        # the pid and the end of its command line (the start may be an interpreter or `ip netns exec`,
        # and the child may not have exec'd yet): `alive` trusts a pid only while it still runs that
        (self.dir / "pids" / f"{what}.pid").write_text(f"{proc.pid}\n{' '.join(args[-2:])}\n")
        return proc.pid

    def alive(self, what: str) -> int | None:
        record = self.dir / "pids" / f"{what}.pid"
        if not record.exists():
            return None
        pid_text, _, tail = record.read_text().partition("\n")
        pid = int(pid_text)
        cmdline = _cmdline(pid)
        for _ in range(40):  # a process in execve has no command line for a moment (Popen returns then)
            if cmdline or not Path(f"/proc/{pid}").exists() or _zombie(pid):
                break
            time.sleep(0.05)
            cmdline = _cmdline(pid)
        return pid if tail.strip() and cmdline.endswith(tail.strip()) and not _zombie(pid) else None

    def stop(self, what: str) -> bool:
        """SIGTERM, then SIGKILL after 10 s, to the recorded process if it is still ours."""
        pid = self.alive(what)
        (self.dir / "pids" / f"{what}.pid").unlink(missing_ok=True)
        if pid is None:
            return False
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return True
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and not _zombie(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not Path(f"/proc/{pid}").exists() or _zombie(pid):
                return True
        return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def wait_for(what: str, check: Callable[[], bool], timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise SystemExit(f"error: timed out after {timeout:.0f}s waiting for {what}"
                             + (f"; the end of {log}:\n{tail}" if tail else ""))
        time.sleep(0.2)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


# -- the config repo and the edge TLS Secret --------------------------------------------------------

def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=demo", "-c", "user.email=demo@localhost", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def config_repo(demo: Demo, *, with_cert_manager: bool) -> None:
    config = demo.dir / "config"
    step(f"config repo: {config} (a Git repository made from config/examples)")
    if not (config / ".git").exists():
        config.mkdir(parents=True, exist_ok=True)
        shutil.copytree(demo.repo / "config" / "examples", config, dirs_exist_ok=True)
        git(config, "init", "-q", "-b", "main")
        git(config, "add", "-A")
        git(config, "commit", "-qm", "Flower infrastructure from config/examples")
    tls = config / "federations" / "federation-tls.yaml"
    if with_cert_manager and not tls.exists():
        shutil.copy(demo.repo / "config" / "demo" / "cert-manager" / "federations" / tls.name, tls)
        git(config, "add", "-A")
        git(config, "commit", "-qm", "A Federation whose SuperLink certificate cert-manager issues")
    print(git(config, "log", "--oneline", "-2"))


def edge_tls_secret(demo: Demo) -> None:
    """The SuperLink's TLS Secret for the secure-edge release (what cert-manager would issue)."""
    if demo.kubectl("-n", "flower-edge", "get", "secret", "superlink-tls", check=False).returncode == 0:
        return
    step("the SuperLink's TLS Secret for the secure-edge release (what cert-manager would issue)")
    pki = demo.dir / "pki"
    pki.mkdir(exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], capture_output=True, check=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=demo-ca",
            "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=superlink", "-keyout", str(pki / "tls.key"),
            "-out", str(pki / "tls.csr"))
    openssl("x509", "-req", "-in", str(pki / "tls.csr"), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
            "-CAcreateserial", "-days", "30", "-out", str(pki / "tls.crt"))
    ensure_namespace(demo, "flower-edge")
    demo.kubectl("-n", "flower-edge", "create", "secret", "generic", "superlink-tls", "--type=kubernetes.io/tls",
                 f"--from-file=tls.crt={pki / 'tls.crt'}", f"--from-file=tls.key={pki / 'tls.key'}",
                 f"--from-file=ca.crt={pki / 'ca.crt'}")
    shutil.rmtree(pki)


def ensure_namespace(demo: Demo, name: str) -> None:
    made = demo.kubectl("create", "namespace", name, "--dry-run=client", "-o", "yaml").stdout
    demo.kubectl("apply", "-f", "-", input=made)


# -- the agent on the host ------------------------------------------------------------------------

def start_agent(demo: Demo, port: int, key: Path | None) -> None:
    log = demo.dir / "agent.log"
    step(f"starting the agent: flower-syncer run --repo {demo.dir / 'config'} (log: {log})")
    token = demo.dir / "api-token"
    if not token.exists():
        token.write_text(os.urandom(16).hex() + "\n")
        token.chmod(0o600)
    env = demo.env()
    args = ["flower-syncer", "run", "--repo", str(demo.dir / "config"), "--listen", f"127.0.0.1:{port}",
            "--kubeconfig", env["KUBECONFIG"], "--api-token-file", str(token), "--cache-dir", str(demo.dir / "cache"),
            "--log-format", "json", "--no-leader-elect", *(["--decryption-key-file", str(key)] if key else [])]
    demo.stop("agent")
    log.write_text("")
    demo.spawn("agent", args, log, env=env)
    wait_for("the agent's /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz")
             or demo.alive("agent") is None, timeout=60, log=log)
    if demo.alive("agent") is None:
        raise SystemExit(f"error: the agent exited; see {log}:\n{log.read_text()[-2000:]}")
    demo.run(["flower-syncer", "resync", "--wait", "--timeout", "2m"], check=False)


def wait_ready(demo: Demo, timeout: float = 90) -> None:
    """Until `flower-syncer status` says every unit is synced and every pool ready; at the deadline,
    what was not (its table), and the demo stops there: training on a pool still 0/2 would wait for
    SuperNodes that are not there."""
    step(f"waiting until every pool is ready (flower-syncer status; at most {timeout:.0f}s)")
    deadline = time.monotonic() + timeout
    while True:
        status = demo.run(["flower-syncer", "status"], check=False, quiet=True)
        if status.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"error: after {timeout:.0f}s not every pool is ready; `flower-syncer status` says:\n"
                             f"{status.stdout.strip()}\n(the demo keeps running: `{demo.cmd()} logs`, or wait and "
                             "run `flower-syncer status` again; `tools/demo down` stops it)")
        time.sleep(1)


def follow_logs(demo: Demo) -> int:
    if (demo.dir / "in-cluster").exists():
        env = demo.env()
        os.execvpe("kubectl", ["kubectl", "-n", "flower-syncer", "logs", "-f", "deploy/flower-syncer"], env)
    os.execvp("tail", ["tail", "-f", str(demo.dir / "agent.log")])

