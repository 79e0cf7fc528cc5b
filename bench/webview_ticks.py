#!/usr/bin/env python3
"""What an open web page's event stream costs the agent per second, in-process, at any number of
units: no cluster, the agent's own tables (a generated repository, bench/repogen.py, installed in
an `Agent` as the dispatcher installs a revision; the units not synced, so each row is computed
from the plan and conditions, as for a unit waiting for its sync).

It times what the stream does while a page is open (syncer.http.webview):

- a full reading: every unit's row (`syncer.agent.view.unit_rows`) and its HTML; the rows alone
  are what the stream read twice a second before the agent counted its changes (it rendered only
  the rows that changed), and it reads them now once per status round (every unit touched);
- a look without change (`Snapshots.rows` and `Follower.step` when the count did not move);
- a look after one unit changed (one row read, one row sent).

and prints the CPU per second of one open page, before (every row read twice a second) and now (one
full reading per 10 s status round, the other looks without change). Figures of one thread's CPU
time (`time.thread_time`), so other load on the machine changes them little.

    python3 bench/webview_ticks.py                  # 2,001 units
    python3 bench/webview_ticks.py --federations 4 --releases 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repogen import make_repo  # noqa: E402
from syncer.agent.agent import Agent  # noqa: E402
from syncer.agent.state import AgentOptions  # noqa: E402
from syncer.agent.view import unit_rows  # noqa: E402
from syncer.agent.wiring import build_agent  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402
from syncer.http.pages import row_html  # noqa: E402
from syncer.http.webview import Follower, Snapshots  # noqa: E402
from syncer.observe.metrics import Metrics  # noqa: E402
from syncer.observe.view import Changes, UnitActivity, UnitRow, UnitView  # noqa: E402
from syncer.source.git import Checkout  # noqa: E402

STATUS_ROUND = 10.0  # seconds: every unit is touched once per round
LOOKS_PER_SECOND = 2  # syncer.http.webview.STREAM_INTERVAL = 0.5


class _Source:
    def describe(self) -> str:
        return "bench"

    def fetch(self) -> Checkout:
        raise RuntimeError("no fetch in this benchmark")


class _View:
    """The runner's view of the agent, reads only (syncer.agent.runner._View)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @property
    def changes(self) -> Changes:
        return self.agent.changes

    def rows(self, units: object = None) -> list[UnitRow]:
        return unit_rows(self.agent, units)  # type: ignore[arg-type]

    def unit(self, unit: str) -> UnitView | None:
        return None

    def activity(self, unit: str) -> UnitActivity | None:
        return None

    def suspend(self, unit: str, suspended: bool) -> bool:
        return False

    def release_hold(self, unit: str) -> bool:
        return False


def cpu(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of this thread's CPU per call of `fn` (the median of `repeat` calls)."""
    times = []
    for _ in range(repeat):
        t = time.thread_time()
        fn()
        times.append(time.thread_time() - t)
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=1000)
    ap.add_argument("--pools", type=int, default=2)
    ap.add_argument("--releases", type=int, default=1001)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        make_repo(root, "bench", args.federations, args.pools, args.releases)
        agent = build_agent(cast(Kube, None), _Source(), Metrics(), AgentOptions(repository="bench"))
        t = time.monotonic()
        loaded = agent.installer.loader.load(root)
        agent.installer.install(loaded.state, loaded.rendered, "r1")
        units = list(agent.installed.plan.units)
        print(f"units installed          {len(units):6d}   in {time.monotonic() - t:.1f} s", flush=True)

    def full_reading() -> None:
        for r in unit_rows(agent):
            row_html(r)

    view = _View(agent)
    snapshots = Snapshots(view)  # type: ignore[arg-type]
    follower = Follower(snapshots, "overview", {})
    follower.step()  # the page's first state
    reading = cpu(full_reading, args.repeat)
    rows_only = cpu(lambda: unit_rows(agent), args.repeat)  # the old stream re-rendered only changed rows
    quiet = cpu(follower.step, args.repeat * 20)

    def one_change() -> None:
        agent.book.publish(units[len(units) // 2])
        follower.step()

    changed = cpu(one_change, args.repeat * 5)

    def round_touching_all() -> None:
        for unit in units:
            agent.changes.touch(unit.id)
        follower.step()

    status_round = cpu(round_touching_all, args.repeat)
    before = LOOKS_PER_SECOND * rows_only
    now = status_round / STATUS_ROUND + LOOKS_PER_SECOND * quiet
    print(f"a full reading           {reading * 1000:8.2f} ms CPU (every row and its HTML; "
          f"{rows_only * 1000:.2f} ms the rows alone)")
    print(f"a look, no change        {quiet * 1e6:8.1f} us CPU")
    print(f"a look, one unit changed {changed * 1000:8.3f} ms CPU (its row read, compared, sent)")
    print(f"a look after a round     {status_round * 1000:8.2f} ms CPU (every unit touched: read again)")
    print(f"one open page, before    {100 * before:6.2f} % of a core (every row read twice a second)")
    print(f"one open page, now       {100 * now:6.2f} % of a core (a round's reading per 10 s, "
          "looks without change between; one changed unit adds its look)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
