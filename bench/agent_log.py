"""Where each commit's time went, from the agent's JSON log (`flower-syncer run --log-format json
--log-level info`) and the benchmark's own push and watch times.

For one commit (its sha, the wall time its `git push` started and the wall time the benchmark's
watch saw the object) the phases are:

  notice   push started -> the agent's fetch started (git push itself, the change event, the queue)
  fetch    the agent's fetch of the checkout (its log: "source revision checked out", ms)
  load     fetch done -> the revision installed (queue wait, load+render, plan; "revision loaded")
  sync     installed -> the unit's sync done (work queue, the sync; "unit synced")
  seen     sync done -> the benchmark's watch saw the object: negative when the watch saw the
           object before the sync ended (the sync records the unit's inventory after applying)

and `gc`, the garbage collection pauses the agent logged in that window ("garbage collection
paused the agent", only those of 0.1 s or more)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

PHASES = ("notice", "fetch", "load", "sync", "seen")


@dataclass(frozen=True)
class Commit:
    sha: str
    pushed: float  # wall time the push started
    seen: float  # wall time the watch saw the object


@dataclass(frozen=True)
class Timeline:
    commit: Commit
    phases: dict[str, float]  # seconds; a phase the log does not show is absent
    gc: float  # seconds of logged GC pauses between push and seen
    gc_longest: float = 0.0  # the longest of them

    @property
    def total(self) -> float:
        return self.commit.seen - self.commit.pushed


def read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "timestamp" in record:
            try:
                record["_t"] = datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
            records.append(record)
    return records


def timelines(records: list[dict[str, Any]], commits: list[Commit], unit_suffix: str = "/bench") -> list[Timeline]:
    fetched = {r["revision"]: r for r in records if r.get("event") == "source revision checked out"}
    loaded = {r["revision"]: r for r in records if r.get("event") == "revision loaded"}
    synced: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("event") == "unit synced" and str(r.get("unit", "")).endswith(unit_suffix):
            synced.setdefault(str(r.get("revision")), r)  # the first sync of that revision
    pauses = [r for r in records if r.get("event") == "garbage collection paused the agent"]
    out = []
    for c in commits:
        marks: list[tuple[str, float]] = []
        f = fetched.get(c.sha)
        if f is not None:
            marks += [("notice", f["_t"] - float(f.get("ms", 0)) / 1000), ("fetch", f["_t"])]
        ld = loaded.get(c.sha[:12])
        if ld is not None:
            marks.append(("load", ld["_t"]))
        s = synced.get(c.sha[:12])
        if s is not None:
            marks.append(("sync", s["_t"]))
        phases: dict[str, float] = {}
        last = c.pushed
        for name, t in marks:
            phases[name], last = t - last, t
        phases["seen"] = c.seen - last
        inside = [float(p.get("ms", 0)) / 1000 for p in pauses if c.pushed <= p["_t"] <= c.seen]
        out.append(Timeline(c, phases, sum(inside), max(inside, default=0.0)))
    return out


def table(lines: list[Timeline]) -> str:
    """One row per commit, in milliseconds."""
    head = f"  {'commit':<12} {'total':>7} " + " ".join(f"{p:>7}" for p in PHASES) + f" {'gc':>6}"
    rows = [head]
    for t in lines:
        cells = " ".join(f"{t.phases[p] * 1000:7.0f}" if p in t.phases else f"{'-':>7}" for p in PHASES)
        rows.append(f"  {t.commit.sha[:12]:<12} {t.total * 1000:7.0f} {cells} {t.gc * 1000:6.0f}")
    return "\n".join(rows)
