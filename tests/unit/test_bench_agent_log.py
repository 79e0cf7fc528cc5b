"""bench/agent_log.py: a commit's time split into phases from the agent's JSON log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.agent_log import Commit, read_records, table, timelines

SHA = "a" * 40
BASE = 1_800_000_000.0


def stamp(t: float) -> str:
    return datetime.fromtimestamp(BASE + t, UTC).isoformat().replace("+00:00", "Z")


def test_phases_follow_the_agent_log(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    lines = [
        {"event": "source revision checked out", "revision": SHA, "ms": 40.0, "timestamp": stamp(0.090)},
        {"event": "garbage collection paused the agent", "ms": 120.0, "timestamp": stamp(0.150)},
        {"event": "revision loaded", "revision": SHA[:12], "ms": 30.0, "timestamp": stamp(0.200)},
        {"event": "unit synced", "unit": "federation/ns/other", "revision": SHA[:12], "timestamp": stamp(0.210)},
        {"event": "unit synced", "unit": "federation/ns/bench", "revision": SHA[:12], "timestamp": stamp(0.260)},
        {"event": "garbage collection paused the agent", "ms": 500.0, "timestamp": stamp(5.0)},  # after
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    [t] = timelines(read_records(log), [Commit(SHA, BASE, BASE + 0.300)])
    expected = {"notice": 0.050, "fetch": 0.040, "load": 0.110, "sync": 0.060, "seen": 0.040}
    assert t.phases.keys() == expected.keys()
    assert all(abs(t.phases[k] - v) < 1e-3 for k, v in expected.items())
    assert abs(t.total - 0.3) < 1e-6 and abs(t.gc - 0.120) < 1e-9
    assert "aaaaaaaaaaaa     300      50      40     110      60      40    120" in table([t])


def test_a_commit_the_log_does_not_show_is_all_seen(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("")
    [t] = timelines(read_records(log), [Commit(SHA, BASE, BASE + 0.5)])
    assert t.phases == {"seen": 0.5}
    assert " -" in table([t])
