"""The devcluster's processes as the host sees them: free ports, HTTP probes, whether a pid is
still the binary this tool started (/proc), its RSS, a log's last lines. Standard library only."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from devutil import DevclusterError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_ok(url: str, *, insecure: bool = False) -> bool:
    ctx = ssl._create_unverified_context() if insecure else None  # self-signed serving certs
    try:
        with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError):
        return False


def is_our_process(pid: int, binary: str) -> bool:
    """True if pid runs `binary` (guards against pid reuse) and is not a zombie.

    A process caught in the middle of execve() shows an empty /proc/<pid>/cmdline for a few
    milliseconds (measured: 8 in 200 spawns right after Popen returned). Reading that as "not
    ours" made `up` declare a healthy etcd or apiserver dead and stop the cluster, so an empty
    command line is read again until the exec has finished.
    """
    for _ in range(100):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return False
        argv0 = cmdline.split(b"\0")[0].decode(errors="replace")
        if cmdline and argv0 != "nsenter":  # a real node's daemon is nsenter until it has exec'd
            return argv0 == binary
        time.sleep(0.005)
    return False  # still no command line after 0.5 s: a kernel thread, not ours


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0




def tail_file(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def api_request(url: str, context: ssl.SSLContext, method: str, body: dict[str, Any] | None = None, *,
                timeout: float = 10, content_type: str = "application/json") -> tuple[int, Any]:
    """(HTTP status, decoded JSON or text) of one request to the API server; errors are answers too."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            text = resp.read().decode()
            status = int(resp.status)
    except urllib.error.HTTPError as err:
        text = err.read().decode()
        status = err.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Watched(Protocol):
    """What `wait_for` reads of a cluster (devlifecycle.Cluster): its processes and their logs."""

    logs: Path

    def load_state(self) -> dict[str, Any] | None: ...

    def running_pids(self, state: dict[str, Any] | None = None) -> dict[str, int]: ...


def wait_for(check: Callable[[], object], deadline: float, what: str, cluster: Watched, component: str) -> None:
    """Poll `check` until true; fail early if `component` died, or at the deadline."""
    while True:
        with contextlib.suppress(OSError, DevclusterError):
            if check():
                return
        state = cluster.load_state() or {}
        if component in state.get("processes", {}) and component not in cluster.running_pids(state):
            raise DevclusterError(
                f"{component} exited while waiting for {what}:\n" + tail_file(cluster.logs / f"{component}.log")
            )
        if time.monotonic() > deadline:
            raise DevclusterError(
                f"timed out waiting for {what}; last log lines of {component}:\n"
                + tail_file(cluster.logs / f"{component}.log")
            )
        time.sleep(0.1)
