"""`/healthz` tells the truth: the agent is not healthy while a sync has run past its bound or a
call to a tenant's server past its deadline (syncer.agent.liveness)."""

from __future__ import annotations

import pytest

from syncer.agent.liveness import LATE_CALL, STUCK_SYNC, Liveness
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.tenant_calls import InFlight
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from tests.doubles import NoSource
from tests.fakekube import FakeKube

UNIT = Unit("federation", "flower", "fed")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sync_that_runs_past_its_bound_makes_the_agent_unhealthy_until_it_ends() -> None:
    clock = Clock()
    live = Liveness(InFlight(clock), clock=clock)
    with live.syncing(UNIT):
        clock.now += STUCK_SYNC - 1
        assert live.why() == ""
        clock.now += 1
        assert UNIT.id in live.why()
    assert live.why() == ""


def test_a_tenant_call_past_its_deadline_makes_the_agent_unhealthy_until_it_ends() -> None:
    clock = Clock()
    calls = InFlight(clock)
    live = Liveness(calls, clock=clock)
    call = calls.begin("ListNodes", "fed-superlink.flower.svc:9093", timeout=3, limit=100)
    clock.now += 3 + LATE_CALL - 0.5
    assert live.why() == ""
    clock.now += 1
    assert "ListNodes at fed-superlink.flower.svc:9093" in live.why()
    calls.end(call)
    assert live.why() == ""


def test_the_agents_health_reads_the_syncs_its_workers_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's sync that runs past its bound turns `/healthz` (Agent.healthy) 503 while it runs,
    and `/api/v1/status` says why (`stuck`)."""
    clock = Clock()
    agent = build_agent(FakeKube(), NoSource(), Metrics(), AgentOptions(),
                        liveness=Liveness(InFlight(clock), clock=clock))
    agent.leading.set()
    seen: list[tuple[bool, str]] = []

    def stuck(unit: Unit) -> None:
        clock.now += STUCK_SYNC
        seen.append((agent.healthy(), agent.status()["stuck"]))

    monkeypatch.setattr(agent.syncs, "sync", stuck)
    assert agent.healthy()
    agent.syncs.work_on(UNIT)
    assert seen == [(False, f"the sync of {UNIT.id} has run for 600s (more than 600s)")]
    assert agent.healthy() and agent.status()["stuck"] == ""
