"""The CLI's exit codes, as documented in syncer/cli.py and README: 0 ok, 1 invalid config / drift /
failed, 2 usage error, 3 cluster or runtime error - the same for every command."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from syncer.cli import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, main
from tests.builders import write


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def nowhere(tmp_path: Path) -> str:
    """A kubeconfig whose API server does not exist."""
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": f"https://127.0.0.1:{_closed_port()}",
                                                     "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "u"}}],
    }))
    return str(path)


@pytest.mark.parametrize("command", ["diff", "sync", "status"])
def test_cluster_unreachable_exits_3_for_every_command(command: str, nowhere: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo")
    assert main([command, str(repo), "--kubeconfig", nowhere]) == EXIT_RUNTIME
    assert "error:" in capsys.readouterr().err


def test_suspend_cluster_unreachable_exits_3(nowhere: str) -> None:
    assert main(["suspend", "fed", "--kubeconfig", nowhere]) == EXIT_RUNTIME


@pytest.mark.parametrize("command", ["validate", "render", "diff", "sync", "status"])
def test_missing_repository_is_a_usage_error(command: str, tmp_path: Path, nowhere: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--kubeconfig", nowhere] if command in ("diff", "sync", "status") else []
    assert main([command, str(tmp_path / "missing"), *extra]) == EXIT_USAGE
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["render", "diff", "sync", "status"])
def test_unknown_unit_is_a_usage_error(command: str, tmp_path: Path, nowhere: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo")
    extra = ["--kubeconfig", nowhere] if command != "render" else []
    assert main([command, str(repo), "--unit", "nope", *extra]) == EXIT_USAGE
    assert "'nope' matches no unit" in capsys.readouterr().err


def test_validate_and_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo")
    assert main(["validate", str(repo)]) == EXIT_OK
    assert main(["render", str(repo), "--unit", "fed", "-o", "json"]) == EXIT_OK
    capsys.readouterr()
    (repo / "federations" / "broken.yaml").write_text("apiVersion: flwr.ai/v1alpha1\nkind: Federation\nspec: [\n")
    assert main(["validate", str(repo), "-o", "json"]) == EXIT_FAILED
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["errors"] >= 1
    assert out["diagnostics"][0]["file"] == "federations/broken.yaml"


def test_resync_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    # the agent is found through the agent's own settings; nothing listens there: runtime error
    monkeypatch.setenv("FLOWER_SYNCER_LISTEN", f"0.0.0.0:{_closed_port()}")
    assert main(["resync"]) == EXIT_RUNTIME
    assert "cannot reach the agent at http://127.0.0.1:" in capsys.readouterr().err
    # an unreadable token file is the user's mistake
    monkeypatch.setenv("FLOWER_SYNCER_API_TOKEN_FILE", str(tmp_path / "no-such-token"))
    assert main(["resync"]) == EXIT_USAGE
    assert main(["resync", "--unit", "a", "--unit", "b"]) == EXIT_USAGE


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1m30s", 90.0),
                                               ("1h", 3600.0), ("250ms", 0.25), ("1.5m", 90.0), ("2h0m1s", 7201.0)])
def test_go_style_durations(text: str, seconds: float) -> None:
    from syncer.cli import _duration

    assert _duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5x", "1m30", "s5", "-5m", "1m 30s"])
def test_bad_durations_are_usage_errors(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sync", ".", "--wait", f"--timeout={text}"])
    assert exc.value.code == EXIT_USAGE
    assert "is not a duration" in capsys.readouterr().err


def test_yaml_output_is_the_json_payload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    repo = write(tmp_path / "repo")
    assert main(["validate", str(repo), "-o", "json"]) == EXIT_OK
    as_json = json.loads(capsys.readouterr().out)
    assert main(["validate", str(repo), "-o", "yaml"]) == EXIT_OK
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_version(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from syncer import __version__

    assert main(["version", "--client"]) == EXIT_OK
    assert capsys.readouterr().out == f"flower-syncer: {__version__}\n"
    monkeypatch.setenv("FLOWER_SYNCER_LISTEN", f"127.0.0.1:{_closed_port()}")
    assert main(["version", "--kubeconfig", "/nonexistent", "-o", "json"]) == EXIT_RUNTIME
    out = json.loads(capsys.readouterr().out)
    assert out["client"] == __version__ and set(out["errors"]) == {"cluster", "agent"}


def test_status_table_natural_order_and_no_headers() -> None:
    from syncer.observe.status import StatusReport, UnitStatus
    from syncer.observe.status_tables import format_report

    units = [UnitStatus(unit=f"federation/ns/fed-{i}", found=True) for i in (11, 2, 1)]
    report = StatusReport(units=units)
    lines = format_report(report).splitlines()
    assert lines[0].startswith("UNIT") and [line.split()[0] for line in lines[1:4]] == [
        "federation/ns/fed-1", "federation/ns/fed-2", "federation/ns/fed-11"]
    assert not format_report(report, headers=False).startswith("UNIT")


def test_a_malformed_kubeconfig_is_one_line_and_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("garbage: [")
    assert main(["status", "--kubeconfig", str(bad)]) == EXIT_RUNTIME
    err = capsys.readouterr().err
    assert err.startswith(f"\nerror: cannot load Kubernetes credentials from {bad}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_run_with_the_port_in_use_exits_3(tmp_path: Path, nowhere: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("syncer.agent.runner.configure", lambda *a, **k: None)  # keep the tests' logging as it is
    repo = write(tmp_path / "repo")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["run", "--repo", str(repo), "--kubeconfig", nowhere, "--listen", f"127.0.0.1:{port}",
                     "--no-leader-elect", "--cache-dir", str(tmp_path / "cache")]) == EXIT_RUNTIME


def test_every_command_hands_the_interpreter_over_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython's switch interval (5 ms) is shortened before any command runs: the agent's commit
    path and sync's applies wait on git and HTTP, then on the interpreter held by a busy thread."""
    from syncer import cli

    asked: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", asked.append)
    assert main(["version", "--client"]) == EXIT_OK
    assert asked == [cli.SWITCH_INTERVAL] and cli.SWITCH_INTERVAL <= 0.001


def test_namespace_filter_selects_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl's -n/-A habits: -n narrows to one namespace, -A (the default) overrides it."""
    repo = write(tmp_path / "repo")
    other = repo / "federations" / "other.yaml"
    other.write_text((repo / "federations" / "fed.yaml").read_text().replace("name: fed\n", "name: other\n", 1)
                     .replace("metadata:\n", "metadata:\n  namespace: elsewhere\n", 1))
    assert main(["render", str(repo), "-o", "json", "-n", "elsewhere"]) == EXIT_OK
    items = json.loads(capsys.readouterr().out)["items"]
    assert items and {i["metadata"]["namespace"] for i in items} == {"elsewhere"}
    assert main(["render", str(repo), "-o", "json", "-n", "elsewhere", "-A"]) == EXIT_OK
    assert {i["metadata"]["namespace"] for i in json.loads(capsys.readouterr().out)["items"]} >= {"elsewhere", "flower"}
    assert main(["render", str(repo), "-n", "nowhere"]) == EXIT_USAGE
    assert "namespace nowhere" in capsys.readouterr().err


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == EXIT_OK
    assert "flower-syncer" in capsys.readouterr().out


@pytest.mark.parametrize(("line", "expected"), [("flower-syncer sta", "status"),
                                              ("flower-syncer run --prot", "--protect-reads")])
def test_completion_completes_commands_and_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, line: str,
                                                   expected: str) -> None:
    """What the shell gets back when it asks (argcomplete's protocol on file descriptor 8); `run`'s
    options too, which its parser adds only when it is used."""
    out = tmp_path / "completions"
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    monkeypatch.setenv("_ARGCOMPLETE_IFS", "\n")
    import argcomplete

    # argcomplete writes its debug output to a file object on descriptor 9, pytest's: keep stderr
    monkeypatch.setattr(argcomplete.CompletionFinder, "_init_debug_stream", lambda self: None)
    monkeypatch.setattr("argcomplete.io.debug_stream", __import__("sys").stderr)
    with out.open("w") as fh, pytest.raises(SystemExit):
        argcomplete.autocomplete(__import__("syncer.cli", fromlist=["build_parser"]).build_parser(),
                                 output_stream=fh, exit_method=__import__("sys").exit)
    assert expected in out.read_text().split()


def test_every_option_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo")
    monkeypatch.setenv("FLOWER_SYNCER_OUTPUT", "json")
    monkeypatch.setenv("FLOWER_SYNCER_STRICT", "true")
    assert main(["validate", str(repo)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["valid"] is True
    assert main(["validate", str(repo), "-o", "text"]) == EXIT_OK  # the command line wins
    assert capsys.readouterr().out.startswith("valid:")
    monkeypatch.setenv("FLOWER_SYNCER_UNIT", "nope,fed")
    monkeypatch.delenv("FLOWER_SYNCER_OUTPUT")
    assert main(["render", str(repo)]) == EXIT_USAGE  # both selectors apply: nope matches nothing
    monkeypatch.setenv("FLOWER_SYNCER_OUTPUT", "xml")
    assert main(["validate", str(repo)]) == EXIT_USAGE
    assert "FLOWER_SYNCER_OUTPUT must be one of" in capsys.readouterr().err
