"""Fenced writes (issue 9, item 4): once the Lease may be lost, nothing more is written - checked
before every write, so a paused ex-leader that resumes mid-sync stops at its next request.
Also: a failed sync of any kind is counted (issue 9, "Also")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from syncer.agent.agent import Agent
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.client import ClusterUnreachable, Kube
from syncer.cluster.fence import Fenced, WriteFence
from syncer.cluster.lease import LeaderElector
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, pool, write
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Lease:
    """A Lease we hold (renewed just now, for a minute) until `lose()`; then the fence says no."""

    def __init__(self) -> None:
        self.fence = WriteFence(60.0)
        self.fence.renewed(time.monotonic())

    def lose(self) -> None:
        self.fence.lost()


class CountingKube(FakeKube):
    """Counts the writes that reached the server; calls `after_write(n)` after each one."""

    def __init__(self, server: FakeApiServer) -> None:
        super().__init__(server)
        self.sent: list[str] = []
        self.after_write: Any = None

    def _send(self, method: str, path: str, params: list[tuple[str, Any]], headers: dict[str, str],
              body: Any, timeout: Any) -> Any:
        resp = super()._send(method, path, params, headers, body, timeout)
        if method in WRITES and not any(k == "dryRun" for k, _ in params):
            self.sent.append(f"{method} {path}")
            if self.after_write is not None:
                self.after_write(len(self.sent))
        return resp


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    s.add_namespace(NS)
    return s


def test_the_fence_passes_reads_and_dry_runs_and_refuses_writes(server: FakeApiServer) -> None:
    lease = Lease()
    fence = lease.fence
    raw = FakeKube(server)
    kube = raw.fenced(fence)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}}
    kube.apply(cm)
    lease.lose()
    assert kube.get("ConfigMap", NS, "x") is not None  # reads pass
    kube.apply(cm, dry_run=True)  # dry-runs write nothing: they pass
    with pytest.raises(Fenced, match=r"PATCH .* not sent"):
        kube.apply(cm)
    with pytest.raises(Fenced):
        kube.delete("ConfigMap", NS, "x")
    assert fence.refused == 2
    raw.delete("ConfigMap", NS, "x")  # the unfenced client (the elector's) still writes
    assert raw.counts is kube.counts  # one client, one set of counters


def test_a_fence_without_a_holder_refuses_everything(server: FakeApiServer) -> None:
    kube = FakeKube(server).fenced(WriteFence())
    with pytest.raises(Fenced):
        kube.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body={})


def test_losing_the_lease_mid_sync_stops_every_write(server: FakeApiServer, tmp_path: Path) -> None:
    """Pause-the-leader in-process: the Lease is lost after the third write of a sync; not one
    write follows, from this unit or any other."""
    raw = CountingKube(server)
    lease = Lease()
    raw.after_write = lambda n: lease.lose() if n == 3 else None
    kube = raw.fenced(lease.fence)
    repo = write(tmp_path / "repo", pools=pool("a") + pool("b") + pool("c"))
    state = load_repo(repo)
    plan = plan_repo(state, render_repo(state))
    engine = Engine(kube, workers=1)
    with pytest.raises(Fenced):
        engine.sync(plan, SyncOptions())
    engine.close()  # every request in flight has ended: none of them wrote
    assert len(raw.sent) == 3, raw.sent


def test_a_lost_lease_drops_the_rest_of_the_batch(server: FakeApiServer, tmp_path: Path) -> None:
    """The objects of a stage are sent by a pool: once one is fenced, the queued rest are dropped
    (not run, each only to be refused)."""
    raw = CountingKube(server)
    lease = Lease()
    raw.after_write = lambda n: lease.lose() if n == 2 else None
    kube = raw.fenced(lease.fence)
    repo = write(tmp_path / "repo", pools="".join(pool(p) for p in "abcdefghijkl"))
    state = load_repo(repo)
    engine = Engine(kube, workers=1)
    with pytest.raises(Fenced):
        engine.sync(plan_repo(state, render_repo(state)), SyncOptions())
    engine.close()
    assert len(raw.sent) == 2
    assert lease.fence.refused <= 2, lease.fence.refused  # at most the one running when the first was refused


def test_an_ex_leader_resuming_after_its_renew_deadline_writes_nothing() -> None:
    """The fence's deadline is computed from the last renewal on the monotonic clock: a process paused
    past the renew deadline comes back fenced, before its election thread has noticed anything."""
    now = [1000.0]
    elector = LeaderElector(cast(Any, None), "ns", "lease", "me", lease_duration=15, renew_period=2,
                            retry_period=2, on_started_leading=lambda: None, on_stopped_leading=lambda: None,
                            clock=lambda: now[0])
    elector._leading, elector._renewed_at = True, now[0]  # as right after a successful renewal
    elector.fence.renewed(now[0])
    fence = elector.fence
    fence.check("PATCH", "/x")
    now[0] += elector.renew_deadline + 0.001  # SIGSTOP for longer than the renew deadline
    with pytest.raises(Fenced):
        fence.check("PATCH", "/x")
    assert elector.renew_deadline < 15  # well before a follower may take the Lease over


class Unreachable(FakeKube):
    def _send(self, *args: Any, **kwargs: Any) -> Any:
        raise ClusterUnreachable("cannot reach the API server at https://127.0.0.1:1")


def test_a_sync_that_cannot_reach_the_cluster_is_counted_as_failed(tmp_path: Path) -> None:
    metrics = Metrics()
    agent = build_agent(Unreachable(), NoSource(), metrics, AgentOptions())
    state = load_repo(write(tmp_path / "repo"))
    agent.installer.install(state, render_repo(state), "r1")
    agent.loaded.set()
    agent.cache.synced.set()
    agent.leading.set()
    unit = Unit("federation", NS, "fed")
    agent.work.add(unit)
    assert agent.drain() == 1
    assert (metrics.registry.get_sample_value("flower_syncer_sync_total", {"unit": unit.id, "result": "failed"})
            or 0) >= 1
    event = agent.events.get_nowait()
    assert event.result.errors and "sync failed" in event.result.errors[0]


# -- the fence alone, on a fake clock -------------------------------------------------------------


def test_writes_pass_until_the_renew_deadline_then_stop() -> None:
    now = [100.0]
    fence = WriteFence(10.0, clock=lambda: now[0])
    fence.renewed(100.0)
    now[0] = 109.99
    fence.check("PATCH", "/x")
    assert fence.deadline() == 110.0
    now[0] = 110.0  # lease duration - safety margin after the renewal was sent
    with pytest.raises(Fenced, match="could not be renewed before its deadline"):
        fence.check("PATCH", "/x")
    fence.renewed(99.0)  # a late answer to an older renewal never moves the deadline back
    assert fence.deadline() == 110.0
    fence.renewed(110.5)
    fence.check("DELETE", "/x")


def test_a_lost_lease_refuses_at_once_and_tells_the_listeners_once() -> None:
    now = [0.0]
    fence = WriteFence(10.0, clock=lambda: now[0])
    calls: list[str] = []
    fence.on_lost(lambda: calls.append("lost"))
    fence.renewed(0.0)
    fence.lost("the lease is held by b")
    with pytest.raises(Fenced, match="held by b"):
        fence.check("POST", "/x")
    fence.lost("again")
    assert calls == ["lost"]
    fence.check("GET", "/x")  # reads pass
    assert fence.refused == 1


def test_an_open_fence_always_writes_and_a_new_one_never() -> None:
    WriteFence.open().check("PUT", "/x")
    with pytest.raises(Fenced):
        WriteFence(10.0).check("PUT", "/x")


def test_the_elector_derives_the_fence_deadline_from_lease_duration_and_safety_margin() -> None:
    elector = LeaderElector(cast(Any, None), "ns", "lease", "me", lease_duration=20, renew_period=2,
                            retry_period=2, safety_margin=4, on_started_leading=lambda: None,
                            on_stopped_leading=lambda: None)
    assert elector.fence.valid_for == elector.renew_deadline == 16
    with pytest.raises(ValueError, match="safety margin"):
        LeaderElector(cast(Any, None), "ns", "lease", "me", lease_duration=20, renew_period=2, retry_period=2,
                      safety_margin=2, on_started_leading=lambda: None, on_stopped_leading=lambda: None)


# -- the agent around the fence (issue 9 item 4, "Also"; issue 11 items 6 and 8) ----------------


def fake_agent(kube: Kube | None = None, source: Any = None, poll: float = 60.0) -> Agent:
    return build_agent(kube if kube is not None else FakeKube(), source or NoSource(), Metrics(),
                       AgentOptions(poll_interval=poll))


def test_losing_the_lease_drops_the_queued_work(tmp_path: Path) -> None:
    agent = fake_agent()
    state = load_repo(write(tmp_path / "repo"))
    agent.installer.install(state, render_repo(state), "r1")
    agent.loaded.set()
    other = Unit("federation", NS, "other")
    agent.set_leading(True)  # queues the catch-up work
    agent.work.add_after(other, 0.5)  # a retry waiting for its backoff
    assert agent.work.depth() == 2
    agent.set_leading(False)
    assert agent.work.depth() == 0
    agent.work.shutdown()
    assert agent.work.get(timeout=1.0) is None  # nothing left to hand to a worker


def test_a_fenced_sync_is_counted_as_fenced_not_as_failed(server: FakeApiServer, tmp_path: Path) -> None:
    lease = Lease()
    agent = fake_agent(FakeKube(server).fenced(lease.fence))
    state = load_repo(write(tmp_path / "repo"))
    agent.installer.install(state, render_repo(state), "r1")
    agent.loaded.set()
    agent.cache.synced.set()
    agent.leading.set()  # the callback has not run yet: only the fence knows
    lease.lose()
    unit = Unit("federation", NS, "fed")
    agent.work.add(unit)
    assert agent.drain() == 1
    assert agent.metrics.fenced._value.get() == 1
    assert not agent.metrics.registry.get_sample_value("flower_syncer_sync_total",
                                                      {"unit": unit.id, "result": "failed"})
    assert agent.events.empty()  # no result reported as the unit's




def test_bad_lease_timings_are_settings_errors() -> None:
    from syncer.agent.config import load_config

    cfg = load_config({"repo": "/r", "lease_duration": "30", "lease_renew_period": "5", "lease_retry_period": "2",
                       "lease_safety_margin": "6"}, environ={})
    assert (cfg.lease_duration, cfg.lease_safety_margin) == (30.0, 6.0)
    with pytest.raises(ValueError, match=r"lease_safety_margin .* must be more than lease_retry_period"):
        load_config({"repo": "/r", "lease_safety_margin": "1"}, environ={})
    with pytest.raises(ValueError, match="lease_renew_period"):
        load_config({"repo": "/r", "lease_renew_period": "12"}, environ={})


def test_readyz_fails_while_the_api_server_is_unreachable(tmp_path: Path) -> None:
    server = FakeApiServer()
    kube = FakeKube(server)
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions())
    agent.loaded.set()
    agent.cache.synced.set()
    assert agent.ready() == (True, "ok")
    down = Unreachable(server)
    down._conn = kube._conn  # the same connection state, as the agent's fenced copy shares it
    with pytest.raises(ClusterUnreachable):
        down.get("ConfigMap", NS, "x")
    ready, why = agent.ready()
    assert not ready and "the API server is unreachable" in why
    kube.get("ConfigMap", NS, "x")  # a request gets through again: ready again
    assert agent.ready() == (True, "ok")


def test_a_changed_kubeconfig_is_read_again(tmp_path: Path) -> None:
    """Token rotation or a new API server port: on a failed request the client reads the file
    again if it changed, and retries once with what it says."""
    import json
    import os
    import socket

    def kubeconfig(port: int, token: str) -> str:
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                   "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})

    def closed_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    from syncer.cluster.client import Kube

    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(closed_port(), "old"))
    kube = Kube.from_kubeconfig(str(path))
    assert not kube.reload_if_changed()  # unchanged: nothing to do
    new_port = closed_port()
    path.write_text(kubeconfig(new_port, "rotated-token"))
    os.utime(path, ns=(1, 1))  # a different stamp even within one clock tick
    with pytest.raises(ClusterUnreachable, match=f"127.0.0.1:{new_port}"):
        kube.get("ConfigMap", NS, "x")  # retried against the new address
    assert kube.api.configuration.api_key["BearerToken"] == "Bearer rotated-token"
    assert f"127.0.0.1:{new_port}" in kube.unreachable
