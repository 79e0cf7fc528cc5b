#!/usr/bin/env python3
"""The agent's status report from its watch caches, in process and without a cluster: what
`StatusCache.report` (every unit's pools from its workloads and pods) costs per status round for
N federations x P pools plus R SuperNode releases (bench/repogen.py).

The cache holds what the watches would: each rendered workload as the controllers report it
(every replica ready) and one running pod per replica, both slimmed as the agent keeps them
(syncer.observe.slim_objects). Each round asks for the report of every unit, as the agent's status round
does (syncer.agent.runner._status_round: targets from the inventories' workloads). Between rounds
`--changes` pods of as many units are modified (their status changes, as while the controllers
create pods), so the figures show a quiet round (`--changes 0`) and a busy one.

Prints p50/p95/max of the report's wall time and its CPU per round, with the machine's load.

    python3 bench/status_report.py                                    # 1,000 x 10 + 1,000: 2,000 units
    python3 bench/status_report.py --federations 100 --releases 100 --changes 50
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import p95  # noqa: E402
from bench.repogen import make_repo  # noqa: E402
from syncer.engine.inventory import Entry, Inventory  # noqa: E402
from syncer.engine.live import LiveState  # noqa: E402
from syncer.identity import WORKLOAD_KINDS, ObjectRef, Unit  # noqa: E402
from syncer.observe.slim_objects import slim_pod, slim_workload  # noqa: E402
from syncer.observe.status import targets_from  # noqa: E402
from syncer.observe.status_cache import StatusCache  # noqa: E402
from syncer.render.repo import plan_repo, render_repo  # noqa: E402
from syncer.repo.loader import load_repo  # noqa: E402

Obj = dict[str, Any]


def live_workload(manifest: Obj) -> Obj:
    """A rendered workload as the API server returns it once every replica is ready."""
    replicas = int((manifest.get("spec") or {}).get("replicas", 1))
    status = {"observedGeneration": 1, "replicas": replicas, "readyReplicas": replicas,
              "updatedReplicas": replicas, "availableReplicas": replicas, "currentRevision": "r1",
              "updateRevision": "r1", "desiredNumberScheduled": replicas, "numberReady": replicas,
              "updatedNumberScheduled": replicas}
    return {**manifest, "metadata": {**manifest["metadata"], "generation": 1}, "status": status}


def live_pod(workload: Obj, index: int, restarts: int = 0) -> Obj:
    """Pod `index` of a workload, running and ready."""
    template = (workload.get("spec") or {}).get("template") or {}
    meta = workload["metadata"]
    containers = ((template.get("spec") or {}).get("containers") or [])
    return {"kind": "Pod", "metadata": {"name": f"{meta['name']}-{index}", "namespace": meta.get("namespace", ""),
                                        "labels": dict((template.get("metadata") or {}).get("labels") or {})},
            "spec": {**(template.get("spec") or {}), "nodeName": f"node-{index % 120}"},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": c.get("name", ""), "ready": True, "restartCount": restarts,
                                              "state": {"running": {"startedAt": "2026-11-26T00:00:00Z"}}}
                                             for c in containers]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=1000)
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--releases", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--changes", type=int, default=35,
                    help="pods modified between rounds, each of another unit (default 35: what the controllers "
                         "of bench/latency.py's 2,001 units did in 10 s while creating the pods)")
    args = ap.parse_args()
    gc.set_threshold(50_000, 20, 100)  # as the CLI and the agent run (syncer/cli.py main)
    with tempfile.TemporaryDirectory(prefix="status-report-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, "bench", args.federations, args.pools, args.releases)
        state = load_repo(repo)
        plan = plan_repo(state, render_repo(state))
    cache = StatusCache(None)  # type: ignore[arg-type]  # never started: the bench fills it
    known = LiveState()
    pods: list[tuple[Obj, int]] = []
    for unit, desired in sorted(plan.units.items()):
        manifests = list(desired.manifests)
        known.inventories[unit] = Inventory(unit, {ObjectRef.of(m): Entry("", "") for m in manifests}, revision="r")
        for manifest in manifests:
            if manifest["kind"] not in WORKLOAD_KINDS:
                continue
            workload = live_workload(manifest)
            cache._workloads.put(slim_workload(workload))
            for i in range(int((workload.get("spec") or {}).get("replicas", 1))):
                pod = live_pod(workload, i)
                cache._pods.put(slim_pod(pod))
                pods.append((workload, i))
    units: list[Unit] = sorted(plan.units)
    print(f"{len(units)} units, {cache.sizes()['workloads']} workloads, {len(pods)} pods; "
          f"{args.changes} pods of as many units change between rounds", flush=True)
    walls, cpus = [], []
    for r in range(args.rounds):
        step = max(1, len(pods) // max(1, args.changes))
        for k in range(args.changes):
            workload, i = pods[(r * 7919 + k * step) % len(pods)]
            cache._pods.put(slim_pod(live_pod(workload, i, restarts=r + 1)))
        started, cpu = time.perf_counter(), time.thread_time()
        report = cache.report(targets_from(dict.fromkeys(units), known))
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - started)
        assert len(report.units) == len(units)
    ms = 1000
    print(f"report wall  p50 {statistics.median(walls) * ms:7.1f} ms  p95 {p95(walls) * ms:7.1f} ms  "
          f"max {max(walls) * ms:7.1f} ms")
    print(f"report CPU   p50 {statistics.median(cpus) * ms:7.1f} ms  p95 {p95(cpus) * ms:7.1f} ms  "
          f"max {max(cpus) * ms:7.1f} ms")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
