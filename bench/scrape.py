#!/usr/bin/env python3
"""One scrape of the agent's `/metrics`, in process and without a cluster: the `Metrics` of an
agent after its first sync of N federations x P pools plus R SuperNode releases (bench/repogen.py,
plus the one federation bench/latency.py syncs its commits to), then `Metrics.exposition()`
timed over `--scrapes` scrapes.

Each unit's figures are what the agent sets after a first sync (syncer/agent/syncing.py): its
counters at 0 for every action and the kinds it renders (`init_unit`), one successful sync that
created every object, no drift, its Synced and Healthy reasons, commit-to-applied; the status
round's pools all ready (syncer/agent/runner.py `_status_round`). The defaults are the 2,001
units of docs/performance.md (bench/latency.py --idle-federations 1000 --idle-releases 1000).

Prints the size of the text, the CPU of a scrape (min, median, max of `--scrapes`; the process
runs with the agent's GC thresholds) and, traced once, the peak of memory a scrape allocates.
`--check` also compares the text byte for byte with prometheus_client's `generate_latest` of the
same registry (what tests/unit/test_metrics.py holds the exposition to, at this scale).

    python3 bench/scrape.py                                    # 2,001 units
    python3 bench/scrape.py --federations 200 --releases 0 --scrapes 20
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repogen import make_repo  # noqa: E402
from syncer.engine.changeset import Action, Change, UnitResult  # noqa: E402
from syncer.identity import ObjectRef, Unit  # noqa: E402
from syncer.observe.metrics import Metrics  # noqa: E402
from syncer.observe.status import PoolStatus, UnitStatus  # noqa: E402
from syncer.render.repo import plan_repo, render_repo  # noqa: E402
from syncer.repo.loader import load_repo  # noqa: E402


def agent_metrics(federations: int, pools: int, releases: int) -> tuple[Metrics, int]:
    """The metrics of an agent that synced the repository once and ran a status round: (metrics, units)."""
    with tempfile.TemporaryDirectory(prefix="scrape-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, "bench", federations, pools, releases)
        if federations or releases:  # the federation bench/latency.py commits to, with 2 SuperNodes
            (repo / "federations" / "bench.yaml").write_text((repo / "federations" / "fed-0.yaml").read_text()
                                                            .replace("name: fed-0", "name: bench"))
        state = load_repo(repo)
        plan = plan_repo(state, render_repo(state))
    metrics = Metrics()
    statuses = []
    for unit, planned in sorted(plan.units.items(), key=lambda kv: kv[0].id):
        metrics.init_unit(unit.id, {m["kind"] for m in planned.manifests})
        changes = [Change(ObjectRef.of(m), Action.CREATED) for m in planned.manifests]
        metrics.observe_sync(UnitResult(Unit(unit.kind, unit.namespace, unit.name), changes=changes), 0.2)
        metrics.set_suspended(unit.id, False)
        metrics.set_config_errors(unit.id, 0)
        metrics.set_drift(unit.id, {})
        metrics.set_unit_state(unit.id, "Synced", "Healthy")
        metrics.observe_unit_commit_applied(unit.id, 0.3)
        names = ["superlink", *(f"pool-{p}" for p in range(pools))] if unit.kind == "federation" else ["supernode"]
        statuses.append(UnitStatus(unit.id, pools=[PoolStatus(n, "StatefulSet", f"{unit.name}-{n}", 1, 1,
                                                              healthy=True) for n in names]))
    metrics.observe_status(statuses, [])
    metrics.set_revision("0" * 40)
    return metrics, len(plan.units)


def main() -> int:
    gc.set_threshold(50_000, 20, 100)  # as the CLI and the agent run (syncer/cli.py main)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=1000)
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--releases", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=15)
    ap.add_argument("--check", action="store_true", help="compare with prometheus_client's generate_latest")
    args = ap.parse_args()
    metrics, units = agent_metrics(args.federations, args.pools, args.releases)
    text = bytes(metrics.exposition())
    lines = text.count(b"\n")
    print(f"{units} units: {lines:,} lines, {len(text) / 2**20:.1f} MiB of text")
    cpu = []
    for _ in range(args.scrapes):
        started = time.process_time()
        metrics.exposition()
        cpu.append(time.process_time() - started)
    print(f"scrape CPU ms        min {min(cpu) * 1000:7.1f}   median {statistics.median(cpu) * 1000:7.1f}   "
          f"max {max(cpu) * 1000:7.1f}   ({args.scrapes} scrapes)")
    tracemalloc.start()
    try:
        metrics.exposition()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"scrape peak          {peak / 2**20:7.1f} MiB traced ({peak / len(text):.2f}x the text)")
    if args.check:
        from prometheus_client import generate_latest

        same = generate_latest(metrics.registry) == bytes(metrics.exposition())
        print(f"generate_latest      {'identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
