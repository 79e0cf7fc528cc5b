"""The agent's supervisor (issue 25, item 7): steps whose exceptions become reported errors, loops
restarted with backoff, health that says so at once, logging that cannot raise; and no logging
call in the project that passes structlog's reserved `event` keyword."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from structlog.testing import capture_logs

from syncer.agent.supervisor import Supervisor, describe, safe_log
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg", "log"}


def test_no_logging_call_passes_the_reserved_event_keyword() -> None:
    """`log.exception("...", event=...)` is `TypeError: got multiple values for argument 'event'`
    under structlog: it killed the agent's event thread (issue 25, finding 5)."""
    found = []
    for folder in ("syncer", "tools", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in LOG_METHODS and any(k.arg == "event" for k in node.keywords)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_guard_reports_and_goes_on() -> None:
    sup = Supervisor(threading.Event())
    seen: list[str] = []

    def boom() -> int:
        raise KeyError("missing")

    with capture_logs() as logs:
        assert sup.guard("step", boom, on_error=lambda _exc, text: seen.append(text), about={"unit": "u"}) is None
        assert sup.guard("step", lambda: 7) == 7
    assert sup.errors["step"] == 1
    assert seen[0].startswith("KeyError: 'missing' (at ") and "in boom)" in seen[0]
    (line,) = logs
    assert line["log_level"] == "error" and line["unit"] == "u" and "Traceback" in line["traceback"]


def test_a_failing_error_handler_is_reported_too() -> None:
    sup = Supervisor(threading.Event())

    def handler(_exc: BaseException, _text: str) -> None:
        raise TypeError("got multiple values for argument 'event'")

    with capture_logs() as logs:
        sup.guard("step", lambda: 1 / 0, on_error=handler)
    assert [e["event"] for e in logs] == ["step failed; the agent goes on",
                                          "step (reporting the error) failed; the agent goes on"]


def test_quiet_exceptions_reach_the_handler_without_an_error_line() -> None:
    sup = Supervisor(threading.Event())
    seen: list[BaseException] = []
    with capture_logs() as logs:
        sup.guard("sync", lambda: (_ for _ in ()).throw(TimeoutError("slow")), quiet=(TimeoutError,),
                  on_error=lambda exc, _text: seen.append(exc))
    assert logs == [] and isinstance(seen[0], TimeoutError) and not sup.errors


def test_describe_is_one_bounded_line() -> None:
    try:
        raise ValueError("a\nb" + "x" * 1000)
    except ValueError as exc:
        text = describe(exc)
    assert "\n" not in text and len(text) < 600 and text.startswith("ValueError: a b")


def test_safe_log_survives_a_broken_logger(monkeypatch: object, capsys: object) -> None:
    import syncer.agent.supervisor as mod

    class Broken:
        def error(self, *_a: object, **_k: object) -> None:
            raise OSError("disk full")

    original = mod.log
    mod.log = Broken()  # type: ignore[assignment]
    try:
        safe_log("error", "something", unit="u")  # does not raise
    finally:
        mod.log = original
    assert "logging failed: OSError: disk full" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_a_crashed_loop_is_down_until_restarted_then_healthy() -> None:
    stop = threading.Event()
    clock = [0.0]
    sup = Supervisor(stop, backoff=0.2, crash_loop=3, window=60, clock=lambda: clock[0])
    release = threading.Event()
    runs: list[int] = []

    def loop() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        release.wait(10)

    with capture_logs():
        sup.spawn("worker", loop)
        wait_until("the restart", lambda: len(runs) == 2, timeout=5)
    assert sup.healthy() == (True, "ok")  # one crash, restarted: healthy again
    assert sup.summary()["restarts"] == {"worker": 1}
    release.set()
    wait_until("the loop finished", lambda: sup.healthy()[0] and not any(
        t.is_alive() for t in threading.enumerate() if t.name == "worker"), timeout=5)
    stop.set()


def test_a_loop_that_returns_is_finished_not_dead() -> None:
    sup = Supervisor(threading.Event())
    t = sup.spawn("once", lambda: None)
    t.join(5)
    assert sup.healthy() == (True, "ok")


def test_while_down_health_is_false_at_once() -> None:
    stop = threading.Event()
    sup = Supervisor(stop, backoff=30)  # the restart would come in 30 s
    with capture_logs():
        sup.spawn("dies", lambda: (_ for _ in ()).throw(RuntimeError("gone")))
        _ok, why = wait_until("unhealthy", lambda: (not (h := sup.healthy())[0]) and h, timeout=5)
    assert "thread dies crashed and is restarting: RuntimeError: gone" in why
    stop.set()  # the backoff wait ends at once


def test_a_repeated_failure_logs_its_traceback_once_per_window() -> None:
    clock = [0.0]
    sup = Supervisor(threading.Event(), window=60, clock=lambda: clock[0])

    def fail() -> None:
        raise RuntimeError("same every time")

    with capture_logs() as logs:
        for _ in range(3):
            sup.guard("event handling", fail)
        clock[0] = 61.0
        sup.guard("event handling", fail)
    assert ["traceback" in e for e in logs] == [True, False, False, True]
    assert all("same every time" in e["error"] for e in logs) and sup.errors["event handling"] == 4


def test_error_texts_pass_through_the_scrub_everywhere_they_go() -> None:
    """An exception's message may quote a rendered value that came from an encrypted file: what the
    handler gets (status, Events), the last error (the status API) and the logged text and
    traceback all pass through `scrub`."""
    sup = Supervisor(threading.Event())
    sup.scrub = lambda text: text.replace("hunter2-secret", "**redacted**")
    seen: list[str] = []

    def boom() -> None:
        raise ValueError("cannot apply password=hunter2-secret")

    with capture_logs() as logs:
        sup.guard("sync", boom, on_error=lambda _exc, text: seen.append(text))
    shown = [seen[0], sup.last_error, logs[0]["error"], logs[0]["traceback"]]
    assert all("**redacted**" in s and "hunter2-secret" not in s for s in shown), shown


def test_the_agent_scrubs_the_values_of_every_revision_it_installed(tmp_path: Path) -> None:
    """The agent hands the supervisor the plaintext of the encrypted files it installed, this
    revision's and earlier ones' (a unit that fails keeps its last good state, rendered from them)."""
    from syncer.agent.state import AgentOptions
    from syncer.agent.wiring import build_agent
    from syncer.models.settings import RepoSettings
    from syncer.observe.metrics import Metrics
    from syncer.render.repo import Rendered
    from syncer.repo.state import RepoState
    from tests.doubles import NoSource
    from tests.fakekube import FakeKube

    agent = build_agent(FakeKube(), NoSource(), Metrics(), AgentOptions())
    for secrets in (frozenset({"first-secret-value"}), frozenset({"second-secret-value"}), frozenset()):
        agent.installer.install(RepoState(tmp_path, RepoSettings(), secrets=secrets), Rendered(), "0" * 40)
    text = agent.supervisor.scrub("saw first-secret-value and second-secret-value, not ok")
    assert text == "saw **redacted** and **redacted**, not ok"
