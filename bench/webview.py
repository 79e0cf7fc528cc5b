#!/usr/bin/env python3
"""What the web view costs: page load times, and the agent's CPU and memory with no page open and
with pages open (their event streams), against the local control plane.

The agent (`flower-syncer run`) syncs a generated repository (bench/repogen.py: `--federations`
federations of `--pools` pools and `--releases` SuperNode releases). Once every unit is applied:

1. closed: the agent's CPU (user + system, from /proc) over `--seconds`, and its resident memory;
2. page load: `GET /ui/` and `GET /ui/unit?id=...` (`--loads` times each; p50 and max; a unit page
   works out its Events and next sync when asked), and, when
   Playwright and /usr/bin/chromium are there, a headless Chromium's navigation to the overview
   until its `load` event;
3. open: `--pages` event streams (what open pages hold) for `--seconds`, the agent's CPU and memory
   again, and the bytes the streams received.

    python3 bench/webview.py                                    # the demo's size, a dedicated cluster
    python3 bench/webview.py --federations 1000 --releases 1000 # 2,001 units
    python3 bench/webview.py --kubeconfig FILE                  # a running (loopback) cluster
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchcluster import bench_cluster  # noqa: E402
from bench.repogen import make_repo  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402
from syncer.identity import INVENTORY_SELECTOR  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost",
                        "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@localhost"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_over(pid: int, seconds: float) -> float:
    """The agent's CPU use over `seconds`, as a percentage of one core."""
    before, t = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - t)


def timed_get(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()
    return time.perf_counter() - t


def browser_load(url: str, loads: int) -> list[float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not CHROMIUM.exists():
        return None
    from playwright.sync_api import Error as PlaywrightError

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        page = browser.new_page()
        for _ in range(loads):
            t = time.perf_counter()
            try:
                page.goto(url, wait_until="load", timeout=60_000)
            except PlaywrightError as exc:  # a loaded machine: say so, and measure the rest all the same
                print(f"Chromium load of /ui/    failed: {str(exc).splitlines()[0]}", flush=True)
                break
            out.append(time.perf_counter() - t)
        browser.close()
    return out or None


class Streams:
    """`n` open /ui/events streams, read on threads until `stop`."""

    def __init__(self, port: int, n: int) -> None:
        self.received = 0
        self._stop = threading.Event()
        self._socks = []
        self._threads = []
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            sock.sendall(b"GET /ui/events?view=overview HTTP/1.1\r\nHost: bench\r\n\r\n")
            self._socks.append(sock)
            thread = threading.Thread(target=self._read, args=(sock,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.received += len(chunk)

    def close(self) -> None:
        self._stop.set()
        for sock in self._socks:
            sock.close()


def summary(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:7.1f} ms   max {max(values) * 1000:7.1f} ms"


def run(args: argparse.Namespace, kubeconfig: str) -> int:
    kube = Kube.from_kubeconfig(kubeconfig)
    namespace = f"webview-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    units = args.federations + args.releases
    with tempfile.TemporaryDirectory() as tmp:
        bare, work = Path(tmp) / "config.git", Path(tmp) / "work"
        git(Path(tmp), "init", "-q", "--bare", "-b", "main", str(bare))
        git(Path(tmp), "clone", "-q", str(bare), str(work))
        git(work, "checkout", "-q", "-b", "main")
        make_repo(work, namespace, args.federations, args.pools, args.releases)
        git(work, "add", "-A")
        git(work, "commit", "-qm", "bench")
        git(work, "push", "-q", "origin", "HEAD:main")
        port = free_port()
        (Path(tmp) / "token").write_text(uuid.uuid4().hex)
        agent = subprocess.Popen([sys.executable, "-m", "syncer", "run", "--repo", str(bare), "--kubeconfig",
                                  kubeconfig, "--listen", f"127.0.0.1:{port}", "--namespaces", namespace,
                                  "--lease-namespace", namespace, "--cache-dir", str(Path(tmp) / "cache"),
                                  "--api-token-file", str(Path(tmp) / "token"), "--log-level", "warning"],
                                 stderr=subprocess.DEVNULL)
        try:
            t = time.monotonic()
            while len(kube.list("ConfigMap", namespace, labels=INVENTORY_SELECTOR, metadata_only=True)[0]) < units:
                if agent.poll() is not None or time.monotonic() - t > 3600:
                    raise RuntimeError("the agent did not apply every unit")
                time.sleep(1)
            print(f"units applied            {units:6d}   in {time.monotonic() - t:.0f} s", flush=True)
            time.sleep(args.settle)  # a status round or two: pools, GPUs, health
            base = f"http://127.0.0.1:{port}"
            closed_cpu, closed_rss = cpu_over(agent.pid, args.seconds), rss_mib(agent.pid)
            print(f"no page open             CPU {closed_cpu:5.1f} % of a core   RSS {closed_rss:6.1f} MiB", flush=True)
            overview = [timed_get(base + "/ui/") for _ in range(args.loads)]
            size = len(urllib.request.urlopen(base + "/ui/", timeout=60).read())
            print(f"GET /ui/                 {summary(overview)}   {size / 1024:.0f} KiB")
            unit = [timed_get(f"{base}/ui/unit?id=federation/{namespace}/fed-0") for _ in range(args.loads)]
            print(f"GET /ui/unit             {summary(unit)}   (the first: {unit[0] * 1000:.1f} ms, its Events "
                  "and next sync worked out; then kept 5 s unless the unit changed)")
            loads = browser_load(base + "/ui/", args.loads)
            if loads is not None:
                print(f"Chromium load of /ui/    {summary(loads)}")
            streams = Streams(port, args.pages)
            open_cpu, open_rss = cpu_over(agent.pid, args.seconds), rss_mib(agent.pid)
            streams.close()
            print(f"{args.pages} page(s) open         CPU {open_cpu:5.1f} % of a core   RSS {open_rss:6.1f} MiB   "
                  f"streams received {streams.received / 1024:.1f} KiB in {args.seconds:g} s", flush=True)
        finally:
            agent.terminate()
            agent.wait(60)
            kube.delete("Namespace", None, namespace)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--federations", type=int, default=4)
    ap.add_argument("--pools", type=int, default=2)
    ap.add_argument("--releases", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0, help="each CPU measurement (default 30)")
    ap.add_argument("--loads", type=int, default=20, help="page loads of each kind (default 20)")
    ap.add_argument("--pages", type=int, default=1, help="open pages (event streams) (default 1)")
    ap.add_argument("--settle", type=float, default=25.0, help="seconds after the first sync (default 25)")
    args = ap.parse_args()
    with bench_cluster(args.kubeconfig) as kubeconfig:
        return run(args, kubeconfig)


if __name__ == "__main__":
    sys.exit(main())
