"""`publish` from two threads at once (a worker after its sync and the status round): the change
of a unit's state is told once, not once per thread (a known risk from the last review: two
"Synced" Events for one recovery)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.events import Event
from syncer.identity import Unit
from syncer.observe.conditions import UnitCondition, UnitConditions
from syncer.observe.metrics import Metrics
from tests.doubles import NoSource
from tests.fakekube import FakeKube

UNIT = Unit("federation", "ns", "fed")
SYNCED = UnitConditions(UnitCondition("Synced", True, "Synced", "the revision was applied"),
                        UnitCondition("Healthy", True, "Healthy", "1 workload(s) ready"), "a" * 40)


class BothRead(dict[Unit, tuple[str, ...]]):
    """A table whose `get` lets both threads read before either writes, when nothing stops the
    second one (the barrier gives up after a while when something does)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.barrier = threading.Barrier(2, timeout=0.5)

    def get(self, key: Unit, default: Any = None) -> Any:
        value = super().get(key, default)  # read first: then neither has written when both have read
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return value


def test_a_recovery_published_by_two_threads_at_once_is_told_once(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = build_agent(FakeKube(), NoSource(), Metrics(), AgentOptions())
    agent.book.published = BothRead({UNIT: ("ConfigError", "Healthy", "federations/f.yaml:3: ...", "")})  # type: ignore[misc]
    told: list[Event] = []
    monkeypatch.setattr(agent.book, "report", lambda _unit, event: told.append(event))
    monkeypatch.setattr(agent.book, "unit_state", lambda _unit: SYNCED)
    threads = [threading.Thread(target=agent.book.publish, args=(UNIT,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [e.reason for e in told] == ["Synced"]
    assert agent.book.published[UNIT][0] == "Synced"
