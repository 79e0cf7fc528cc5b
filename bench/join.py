"""How long a replicas change pushed to Git takes to reach the federation, on a real node.

A dedicated local cluster with one real node (`tools/devcluster.py up --real-nodes 1`), the agent
watching a bare Git repository, and a StatefulSet federation of 2 SuperNodes. Then, N times: push
`replicas: 3` and time until the SuperLink logs `[Fleet.ActivateNode]` for the new SuperNode;
push `replicas: 2` and time until it logs `[Fleet.DeactivateNode]`. Each is split into
push -> StatefulSet updated (the agent) and the rest (pod start or stop, Flower connecting).
Times come from the host clock: the push's, and the container runtime's timestamps on the
SuperLink's log lines.

    python3 bench/join.py [--pushes 10] [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchcluster import bench_cluster  # noqa: E402
from bench.latency import free_port, git  # noqa: E402
from bench.repogen import federation  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402

NS = "join"
POOL = """\
      - name: p
        replicas: {replicas}
        images: {{}}
        nodeConfig:
          partition-id: "{{index}}"
          num-partitions: "{{replicas}}"
"""
LINE = re.compile(r"^(\S+) .*\[Fleet\.(ActivateNode|DeactivateNode)\] \w+ node_id=(\d+)")

def push(work: Path, replicas: int) -> float:
    text = federation("train", POOL.format(replicas=replicas), version="1.26.0")
    (work / "federations" / "train.yaml").write_text(text)
    git(work, "commit", "-qam", f"replicas: {replicas}")
    git(work, "push", "-q", "origin", "HEAD:main")
    return time.time()


def events(core: Any) -> list[tuple[float, str]]:
    """(time, ActivateNode|DeactivateNode) from the SuperLink's log, by the runtime's timestamps."""
    text = core.read_namespaced_pod_log("train-superlink-0", NS, timestamps=True)
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            stamp = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")[:26] + "+00:00")
            out.append((stamp.timestamp(), m.group(2)))
    return out


def replicas_applied(kube: Kube, want: int) -> bool:
    sts = kube.get("StatefulSet", NS, "train-supernode-p") or {}
    return int(sts.get("spec", {}).get("replicas", -1)) == want


def wait(what: str, check: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def measure(kube: Kube, core: Any, work: Path, replicas: int, kind: str) -> tuple[float, float]:
    """Push `replicas`; seconds until the StatefulSet has it, and until the SuperLink logs `kind`."""
    seen = len([e for e in events(core) if e[1] == kind])
    t0 = push(work, replicas)
    wait("the StatefulSet", lambda: replicas_applied(kube, replicas))
    applied = time.time() - t0
    found: list[float] = []

    def logged() -> bool:
        found[:] = [t for t, k in events(core) if k == kind][seen:]
        return bool(found)

    wait(f"{kind} in the SuperLink's log", logged)
    return applied, found[0] - t0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    up = ("--real-nodes", "1", "--nvidia-nodes", "0", "--amd-nodes", "0", "--timeout", "300", "--build")
    with bench_cluster(None, *up, keep=args.keep, name="bench-join") as kubeconfig, \
            tempfile.TemporaryDirectory(prefix="join-") as tmp:
        kube = Kube.from_kubeconfig(kubeconfig)
        core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        bare, work = Path(tmp) / "config.git", Path(tmp) / "work"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True, capture_output=True)
        git(work, "checkout", "-q", "-b", "main")
        (work / "federations").mkdir()
        (work / "flower-syncer.yaml").write_text(f"name: bench\ndefaultNamespace: {NS}\n")
        (work / "federations" / "train.yaml").write_text(federation("train", POOL.format(replicas=2), version="1.26.0"))
        git(work, "add", "-A")
        git(work, "commit", "-qm", "two SuperNodes")
        git(work, "push", "-q", "origin", "HEAD:main")
        port = free_port()
        log = Path(tmp) / "agent.log"
        with log.open("w") as err:
            agent = subprocess.Popen(
                [sys.executable, "-m", "syncer", "run", "--repo", str(bare), "--kubeconfig", kubeconfig,
                 "--listen", f"127.0.0.1:{port}", "--namespaces", NS, "--no-leader-elect",
                 "--cache-dir", str(Path(tmp) / "cache"), "--interval", "3600"],
                stdout=subprocess.DEVNULL, stderr=err)
        try:
            print("waiting for the SuperLink and 2 SuperNodes to connect ...", file=sys.stderr, flush=True)
            wait("two SuperNodes", lambda: len([e for e in _safe_events(core) if e[1] == "ActivateNode"]) >= 2,
                 timeout=300)
            joins, leaves = [], []
            for i in range(args.pushes):
                joins.append(measure(kube, core, work, 3, "ActivateNode"))
                leaves.append(measure(kube, core, work, 2, "DeactivateNode"))
                print(f"push {i + 1:2}: join {joins[-1][1]:5.2f} s (applied {joins[-1][0]:4.2f} s), "
                      f"leave {leaves[-1][1]:5.2f} s (applied {leaves[-1][0]:4.2f} s)", file=sys.stderr, flush=True)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        load = os.getloadavg()
        print(f"\nreplicas 2 -> 3 -> 2, {args.pushes} pushes each way, load {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f}, {os.cpu_count()} cores")
        print(f"{'':<34}{'p50':>8}{'p95':>8}{'max':>8}")
        for label, data, index in (("push -> StatefulSet scaled up", joins, 0),
                                   ("push -> SuperNode joined", joins, 1),
                                   ("push -> StatefulSet scaled down", leaves, 0),
                                   ("push -> SuperNode left", leaves, 1)):
            values = [d[index] for d in data]
            print(f"{label:<34}{pct(values, 0.5):>7.2f}s{pct(values, 0.95):>7.2f}s{max(values):>7.2f}s")
        print(f"(median of all joins {statistics.median(d[1] for d in joins):.2f} s)")
        shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)
    return 0


def _safe_events(core: Any) -> list[tuple[float, str]]:
    try:
        return events(core)
    except Exception:  # the SuperLink's pod is not there yet
        return []


if __name__ == "__main__":
    sys.exit(main())
