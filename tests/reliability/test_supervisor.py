"""Nothing stops the agent (issue 25, item 7; reliability suite): an exception at any stage of the
pipeline (load, render, plan, apply, key registration and inventory, notify, Events, status) is a
reported error and the NEXT commit is still applied; the error handlers themselves cannot raise
(`log.exception(..., event=...)` was a TypeError that killed the event thread on every replica);
a loop that keeps crashing turns `/healthz` 503 at once.

The agent runs for real (its threads, its queue, a Git repository on disk fetched by `GitSource`)
against the in-memory API server of `tests.fakekube`; each stage raises once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from syncer.agent import installer as installer_module
from syncer.agent import revision as revision_module
from syncer.agent.agent import Agent
from syncer.agent.runner import _Api
from syncer.agent.state import AgentOptions
from syncer.agent.supervisor import Supervisor, safe_log
from syncer.agent.wiring import build_agent
from syncer.cluster.client import Kube
from syncer.engine import sync as sync_module
from syncer.http import AgentServer
from syncer.observe.metrics import Metrics
from syncer.observe.notify import Notification
from syncer.source.git import GitSource, SourceSpec
from tests.builders import FED, NS, git, pool
from tests.conftest import wait_until
from tests.fakekube import FakeApiServer, FakeKube

STS = "fed-supernode-a"


class QuietKube(FakeKube):
    """The fake API server has no watch: here a watch is a stream that stays quiet for a moment
    (the agent re-reads what it applies from its own results and the fake's lists)."""

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        threading.Event().wait(0.5)
        return iter(())


@dataclass
class Harness:
    agent: Agent
    kube: Kube
    repo: Path
    namespace: str = NS
    commits: int = 0

    def commit(self, replicas: int) -> None:
        """A commit that sets the pool's replicas (what the cluster shows once it is applied)."""
        (self.repo / "federations" / "fed.yaml").write_text(
            FED.format(name="fed", pools=pool("a", replicas=replicas), annotations=""))
        git(self.repo, "add", "-A")
        self.commits += 1
        git(self.repo, "commit", "-q", "-m", f"replicas {replicas}")
        self.agent.request_fetch("test")

    def replicas(self) -> int | None:
        sts = self.kube.get("StatefulSet", self.namespace, STS)
        return None if sts is None else int(sts["spec"]["replicas"])

    def applied(self, replicas: int, timeout: float = 30) -> None:
        wait_until(f"replicas {replicas} applied", lambda: self.replicas() == replicas, timeout=timeout)


class Recorder:
    """The agent's Event recorder and notifier in one: records what was reported."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.notes: list[Notification] = []

    def record(self, event: Any) -> None:
        self.events.append(event)

    def notify(self, n: Notification) -> None:
        self.notes.append(n)


def start_harness(kube: Kube, tmp_path: Path, namespace: str = NS) -> Harness:
    """The agent's real threads on a Git repository at `tmp_path/repo`, leading; the first commit made."""
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "flower-syncer.yaml").write_text(f"name: team-{namespace}\ndefaultNamespace: {namespace}\n")
    source = GitSource(SourceSpec(url=str(repo), cache_dir=tmp_path / "cache"))
    sink = Recorder()
    agent = build_agent(kube, source, Metrics(), AgentOptions(namespaces=[namespace], workers=2, poll_interval=3600),
                        recorder=sink, notifier=sink)  # type: ignore[arg-type]
    h = Harness(agent, kube, repo, namespace)
    h.commit(1)
    agent.start()
    agent.set_leading(True)
    return h


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    server = FakeApiServer()
    server.add_namespace(NS)
    h = start_harness(QuietKube(server), tmp_path)
    agent = h.agent
    try:
        h.applied(1)
        yield h
    finally:
        agent.shutdown(timeout=10)


def once(exc: Exception, original: Callable[..., Any]) -> tuple[Callable[..., Any], threading.Event]:
    """`original`, except that its first call raises `exc`; the event is set once it has."""
    fired = threading.Event()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not fired.is_set():
            fired.set()
            raise exc
        return original(*args, **kwargs)

    return wrapper, fired


def _arm(stage: str, h: Harness, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    boom = RuntimeError(f"injected failure in {stage}")
    agent = h.agent
    targets: dict[str, tuple[Any, str]] = {
        "load": (revision_module, "load_repo"),
        "render": (revision_module, "render_repo"),
        "plan": (installer_module, "plan_repo"),
        "apply": (agent.engine, "sync_unit"),
        "key registration and inventory": (sync_module.Engine, "_finish"),
        "notify": (agent.reporter.notifier, "notify"),
        "kubernetes event": (agent.reporter.recorder, "record"),
        "unit status": (Agent, "_on_synced"),
        "checked revision": (agent.checked, "_write"),
    }
    owner, name = targets[stage]
    wrapper, fired = once(boom, getattr(owner, name))
    monkeypatch.setattr(owner, name, wrapper)  # on a class (Engine._finish) `self` is passed through
    return fired


STAGES = ["load", "render", "plan", "apply", "key registration and inventory", "notify", "kubernetes event",
          "unit status", "checked revision"]


@pytest.mark.parametrize("stage", STAGES)
def test_an_exception_at_any_stage_leaves_the_next_commit_applied(stage: str, harness: Harness,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _next_commit_applied_after(stage, harness, monkeypatch)


@pytest.mark.cluster
@pytest.mark.parametrize("stage", ["plan", "apply", "key registration and inventory"])
def test_on_the_local_cluster_an_exception_leaves_the_next_commit_applied(
        stage: str, kube: Kube, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on the local control plane: real watches, real server-side apply."""
    h = start_harness(kube, tmp_path, namespace)
    try:
        h.applied(1)
        _next_commit_applied_after(stage, h, monkeypatch)
    finally:
        h.agent.shutdown(timeout=10)


def _next_commit_applied_after(stage: str, harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    fired = _arm(stage, harness, monkeypatch)
    with capture_logs() as logs:
        harness.commit(2)
        wait_until(f"the injected failure in {stage}", fired.is_set, timeout=30)
        harness.commit(3)  # the next commit
        harness.applied(3)
        wait_until("the error reported", lambda: harness.agent.supervisor.errors, timeout=10)
    assert harness.agent.healthy(), harness.agent.supervisor.healthy()
    errors = [e for e in logs if e["log_level"] == "error"]
    assert any(f"injected failure in {stage}" in str(e.get("error")) for e in errors), errors
    # the diagnostic text names where it happened
    assert any("(at " in str(e.get("error")) for e in errors)


def test_a_revision_that_cannot_be_installed_is_reported_in_status_and_to_a_waiting_resync(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    fired = _arm("plan", harness, monkeypatch)
    harness.commit(2)
    wait_until("the injected failure", fired.is_set, timeout=30)
    status = wait_until("the fetch error in status", lambda: (s := harness.agent.status())["source"]["error"] and s)
    assert "could not be installed" in status["source"]["error"]
    assert "injected failure in plan" in status["source"]["error"]
    assert status["supervisor"]["errors"] >= 1 and status["supervisor"]["healthy"]
    # a resync that waits gets its answer (not a timeout): the revision is installed this time
    result = harness.agent.request_resync(None, wait=True, timeout=30)
    assert result["done"] and not result["error"], result
    assert harness.replicas() == 2


def test_an_unknown_unit_is_an_unknown_unit_without_waiting_too(harness: Harness) -> None:
    result = harness.agent.request_resync("federation/does-not-exist", wait=False, timeout=30)
    assert result["unknownUnit"]
    assert harness.agent.request_resync("federation/fed", wait=False, timeout=30) == {"accepted": True}


def test_a_failed_event_is_shown_on_the_unit_and_cleared_by_its_next_sync(harness: Harness,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An event about a unit that the dispatcher fails on: an error on the unit (status, an
    InternalError Event) and a sync that puts right whatever the event meant."""
    from syncer.agent.messages import InventoryDeleted
    from syncer.identity import Unit

    unit = Unit("federation", NS, "fed")
    sink = harness.agent.reporter.recorder
    original = Agent.handle

    def handle(self: Agent, event: Any) -> None:
        if isinstance(event, InventoryDeleted):
            raise KeyError("injected")
        original(self, event)

    monkeypatch.setattr(Agent, "handle", handle)
    harness.agent.events.put(InventoryDeleted(unit))
    wait_until("the InternalError Event", lambda: any(e.reason == "InternalError"
                                                      for e in sink.events), timeout=10)  # type: ignore[union-attr]
    wait_until("the error cleared by the unit's next sync", lambda: not any(
        "failed handling" in err for u in harness.agent.status()["units"] for err in u["errors"]), timeout=30)
    harness.commit(4)
    harness.applied(4)


def test_a_logging_call_with_a_reserved_key_never_raises() -> None:
    """structlog's first parameter is `event`: `log.error("x", event=...)` is a TypeError. The
    supervisor's own logging renames the key."""
    with pytest.raises(TypeError):
        structlog.get_logger("t").error("x", event="clash")
    with capture_logs() as logs:
        safe_log("error", "handling failed", event="RevisionFetched")
    assert logs == [{"event": "handling failed", "event_": "RevisionFetched", "log_level": "error"}]


def test_a_loop_that_keeps_crashing_is_restarted_and_healthz_says_so_at_once() -> None:
    stop = threading.Event()
    sup = Supervisor(stop, backoff=0.05, backoff_max=0.05, crash_loop=3, window=60)
    runs: list[int] = []
    may_finish = threading.Event()

    def loop() -> None:
        runs.append(1)
        if len(runs) <= 3:
            raise ValueError(f"crash {len(runs)}")
        may_finish.wait(10)

    server = AgentServer(_ApiOf(sup), Metrics())
    server.start()
    try:
        assert _get(server, "/healthz") == 200
        with capture_logs():
            sup.spawn("crashy", loop)
            wait_until("the first crash", lambda: runs, timeout=5)
            # down or crash-looping from the first crash on: 503 while it lasts
            wait_until("three restarts", lambda: len(runs) >= 4, timeout=10)
            assert _get(server, "/healthz") == 503  # three crashes within the window: a crash loop
            ok, why = sup.healthy()
            assert not ok and "crashed 3 times" in why and "crash 3" in why
    finally:
        may_finish.set()
        stop.set()
        server.stop()


class _ApiOf:
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def healthy(self) -> bool:
        return self.sup.healthy()[0]

    def ready(self) -> tuple[bool, str]:
        return True, "ok"

    def status(self) -> dict[str, Any]:
        return {}

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        return {}

    def webhook(self, event: Any) -> None:
        pass


def _get(server: AgentServer, path: str) -> int:
    import http.client

    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_api_layer_maps_an_unknown_unit_to_404(harness: Harness) -> None:
    from syncer.identity import UnknownUnit

    api = _Api(harness.agent)
    with pytest.raises(UnknownUnit):
        api.resync("federation/nope", wait=False, timeout=10)
    with pytest.raises(UnknownUnit):
        api.resync("federation/nope", wait=True, timeout=10)


# -- notifications: a receiver that never answers delays no other ------------------------------------


def test_a_silent_receiver_delays_no_other_and_drops_its_oldest_counted() -> None:
    """Issue 25: a receiver that accepts connections and never answers held up every other (a
    healthy receiver got 1 of 5 notifications in 60 s). Each receiver has its own queue and worker
    now; the silent one's queue is bounded and drops its oldest, counted in a metric."""
    import socket

    from prometheus_client import CollectorRegistry

    from syncer.identity import Unit
    from syncer.observe.notify import Notifier, Receiver
    from tests.doubles import Sink

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections complete in the kernel; nobody ever reads or answers
    sink = Sink()
    notifier = Notifier([Receiver("silent", "generic", f"http://127.0.0.1:{silent.getsockname()[1]}/hook"),
                         Receiver("ok", "generic", sink.url, units=("federation/fed",))],
                        queue_size=10)  # and the default 10 s timeout per POST
    registry = CollectorRegistry()
    registry.register(notifier)
    notifier.start()
    try:
        unit, other = Unit("federation", NS, "fed"), Unit("federation", NS, "other")
        for i in range(5):
            notifier.notify(Notification(unit, "error", "SyncFailed", f"failure {i}"))
        wait_until("all 5 at the healthy receiver", lambda: len(sink.requests) == 5, timeout=5)
        assert [b["message"] for b in sink.bodies()] == [f"failure {i}" for i in range(5)]
        for i in range(20):  # for the silent receiver only: it falls behind
            notifier.notify(Notification(other, "error", "SyncFailed", f"other failure {i}"))

        def count(receiver: str, outcome: str) -> float | None:
            return registry.get_sample_value("flower_syncer_notifications_total",
                                             {"receiver": receiver, "outcome": outcome})

        # one is in flight (waiting for an answer), ten wait in its queue: the oldest others were dropped
        assert count("silent", "dropped") == notifier.dropped >= 25 - 11
        assert registry.get_sample_value("flower_syncer_notification_queue", {"receiver": "silent"}) == 10
        assert (count("ok", "delivered"), count("ok", "dropped")) == (5, 0)
    finally:
        notifier.stop(timeout=1)
        silent.close()
        sink.server.shutdown()


# -- HTTP: client errors are 4xx without tracebacks, logged at a bounded rate ------------------------

TOKEN = "api-token-never-logged"
SECRET = "webhook-secret-never-logged"


@pytest.fixture
def http_server() -> Iterator[AgentServer]:
    from tests.doubles import FakeAPI

    server = AgentServer(FakeAPI(), Metrics(), api_token=TOKEN, webhook_secret=SECRET)
    server.start()
    yield server
    server.stop()


def _raw(server: AgentServer, request: bytes) -> bytes:
    import socket

    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _signed(body: bytes) -> bytes:
    import hashlib
    import hmac

    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return (b"POST /hooks/git HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Type: application/json\r\n"
            b"X-Hub-Signature-256: " + signature.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body)


HOSTILE = {
    # "²".isdigit() is True and int("²") a ValueError: was a 500 and a logged traceback
    "a superscript Content-Length": ("POST /hooks/git HTTP/1.1\r\nHost: x\r\nContent-Length: \u00b2\r\n"
                                     "Connection: close\r\n\r\n").encode("latin-1"),
    "an Arabic-Indic Content-Length": ("POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                       + TOKEN + "\r\nContent-Length: \u0661\r\nConnection: close\r\n\r\n"
                                       ).encode("utf-8"),
    # a signed webhook nested 100,000 deep: json.loads raised RecursionError, a 500 with a traceback
    "a signed webhook with 100k-deep JSON": _signed(b"[" * 100_000 + b"]" * 100_000),
    "a signed webhook with 100k-deep objects": _signed(b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    "a resync with 100k-deep JSON": (b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                     + TOKEN.encode() + b"\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n"
                                     + b"[" * 1000 + b"]" * 1000),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_client_error_is_4xx_without_a_traceback(case: str, http_server: AgentServer) -> None:
    with capture_logs() as logs:
        reply = _raw(http_server, HOSTILE[case])
    status = int(reply.split(b" ", 2)[1])
    assert 400 <= status < 500, reply[:300]
    assert b"Traceback" not in reply and b"internal error" not in reply
    assert [e for e in logs if e["log_level"] in ("error", "critical") or "exc_info" in e] == []


def test_a_flood_of_bad_requests_writes_a_bounded_log() -> None:
    """2,000 unauthenticated and malformed requests wrote 1.25 MB of log in 1.7 s: now every line
    a client can cause is rate-limited per kind, and the next line says how many were suppressed."""
    kinds = [*HOSTILE.values(),
             b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess\r\nContent-Length: 0\r\n"
             b"Connection: close\r\n\r\n",
             b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\nConnection: close\r\n\r\n",
             b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n",  # a TLS hello
             b"GET /\x00\x1b[31m HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"]
    from tests.doubles import FakeAPI

    http_server = AgentServer(FakeAPI(), Metrics(), api_token=TOKEN, webhook_secret=SECRET, reject_log_interval=2.0)
    http_server.start()
    try:
        with capture_logs() as logs:
            for i in range(2000):
                _raw(http_server, kinds[i % len(kinds)])
            # once the flood is over, the server's loop says how many lines it left out
            # each refused token is a line or counted in one, the last ones in a summary line
            refused = "http: resync refused: missing or wrong bearer token"
            expected = len(range(5, 2000, len(kinds)))
            wait_until(f"{expected} refusals counted", lambda: sum(
                (0 if e.get("summary") else 1) + e["suppressed"] for e in logs if e["event"] == refused) == expected,
                       timeout=10)
            assert any(e.get("summary") for e in logs if e["event"] == refused)
    finally:
        http_server.stop()
    # as the agent writes them at its default level, info (JSON lines, tracebacks formatted); at
    # debug level one access line per request is the point of asking for debug
    render = structlog.processors.JSONRenderer()
    text = "".join(render(None, "", structlog.processors.format_exc_info(None, "", dict(e))) + "\n" for e in logs
                   if e["log_level"] != "debug")
    assert len(text) < 20_000, f"{len(text)} bytes of log for 2,000 bad requests"
    assert "Traceback" not in text


@pytest.mark.parametrize("wait", [False, True])
def test_resync_of_an_unknown_unit_is_404_and_exit_2(wait: bool, harness: Harness, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`POST /api/v1/resync` accepted any unit name and `resync --unit does-not-exist` exited 0."""
    from syncer import cli

    token = tmp_path / "token"
    token.write_text(TOKEN)
    server = AgentServer(_Api(harness.agent), Metrics(), api_token=TOKEN)
    server.start()
    try:
        url = "http://{}:{}".format(*server.address)
        args = ["resync", "--agent", url, "--token-file", str(token), "--timeout", "30"]
        code = cli.main([*args, "--unit", "federation/does-not-exist", *(["--wait"] if wait else [])])
        assert code == 2
        assert "404" in capsys.readouterr().err
        assert cli.main([*args, "--unit", "federation/fed", *(["--wait"] if wait else [])]) == 0
    finally:
        server.stop()


def test_a_failed_status_round_is_reported_and_the_next_round_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The status loop (pool readiness and GPU figures for the metrics, the drift check's timer):
    a round that raises is a reported error; the loop goes on and the next round runs."""
    from types import SimpleNamespace

    from syncer.agent import runner
    from syncer.engine.live import LiveState
    from syncer.observe.status import StatusReport
    from syncer.plan import Plan

    stop = threading.Event()
    rounds: list[int] = []
    drift_checks: list[int] = []

    class FlakyCache:
        synced = threading.Event()

        def report(self, _targets: Any) -> StatusReport:
            rounds.append(1)
            if len(rounds) == 1:
                raise RuntimeError("injected failure in status")
            return StatusReport()

    FlakyCache.synced.set()
    loaded = threading.Event()
    loaded.set()
    sup = Supervisor(stop)
    agent = SimpleNamespace(loaded=loaded, desired={}, cache=SimpleNamespace(state=LiveState()), supervisor=sup,
                            request_drift_check=lambda: drift_checks.append(1), flower=None,
                            book=SimpleNamespace(observe_health=lambda units, checks: None),
                            idle=lambda: False,
                            installed=SimpleNamespace(plan=Plan(units={}, prune_allowed=False)))
    monkeypatch.setattr(runner, "STATUS_INTERVAL", 0.01)
    with capture_logs() as logs:
        thread = sup.spawn("status", lambda: runner._status_loop(agent, FlakyCache(), Metrics(), stop))  # type: ignore[arg-type]
        try:
            wait_until("a round after the failed one", lambda: drift_checks, timeout=10)
        finally:
            stop.set()
            thread.join(5)
    assert sup.errors["status collection"] == 1 and sup.healthy()[0]
    assert any("injected failure in status" in str(e.get("error")) for e in logs)
