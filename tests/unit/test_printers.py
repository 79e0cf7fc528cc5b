"""What `sync` prints on a terminal: a progress line that fits it, and a summary a big unit does
not bury (issue 13, item 4)."""

from __future__ import annotations

import io

import pytest

from syncer import printers
from syncer.engine.changeset import Action, Change, UnitResult
from syncer.engine.sync import SyncReport
from syncer.identity import ObjectRef


def big_report() -> SyncReport:
    unit = UnitResult("federation/flower/big")
    unit.changes = [Change(ObjectRef("Service", "flower", f"svc-{i:03d}"), Action.CREATED) for i in range(50)]
    unit.changes.insert(45, Change(ObjectRef("StatefulSet", "flower", "broken"), Action.FAILED, "refused"))
    unit.changes += [Change(ObjectRef("Secret", "flower", "same"), Action.UNCHANGED)]
    return SyncReport(units=[unit])


def test_a_long_object_list_is_summarised_but_never_hides_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    printers.print_report(big_report())
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "federation/flower/big: FAILED (1 unchanged)"
    assert out[1].split()[:2] == ["failed", "StatefulSet/flower/broken"]  # failures first
    assert sum(1 for line in out if line.startswith("  created")) == 19
    assert "  ... and 31 more (-v lists them all)" in out
    printers.print_report(big_report(), verbose=True)
    assert sum(1 for line in capsys.readouterr().out.splitlines() if line.startswith("  created")) == 50


def test_progress_fits_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a, **k: __import__("os").terminal_size((40, 24)))
    printers.progress(True)("[12/2000] federation/some-namespace/a-rather-long-federation-name")
    line = err.getvalue().removeprefix("\r\033[K")
    assert len(line) == 39 and line.endswith("...")
    assert printers.fit("short", 39) == "short"


# -- every string from Git or the cluster is escaped in text output (issue 25, item 7) ---------------

FORGED = "10.0.0.1:9093\nfederation/flower/fed: ok\x1b[32m\u202e"


def test_escape_shows_every_control_character() -> None:
    assert printers.escape("plain text, ünïcode") == "plain text, ünïcode"
    assert printers.escape("a\nb\r\tc\x00\x1b[31m\x7f\x85\u2028\u202e") == \
        "a\\nb\\r\\tc\\x00\\x1b[31m\\x7f\\x85\\u2028\\u202e"


def test_escape_fields_keeps_types_and_enums() -> None:
    change = Change(ObjectRef("Service", "flower", "svc"), Action.FAILED, FORGED)
    escaped = printers.escape_fields(change)
    assert escaped.action is Action.FAILED and escaped.ref == change.ref
    assert "\n" not in escaped.message and escaped.message.startswith("10.0.0.1:9093\\nfederation")


def _no_forged_lines(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text
    assert not any(line.startswith("federation/flower/fed: ok") for line in text.splitlines())


def test_sync_output_cannot_be_forged(capsys: pytest.CaptureFixture[str]) -> None:
    unit = UnitResult("federation/flower/fed")
    unit.changes = [Change(ObjectRef("StatefulSet", "flower", "x"), Action.FAILED, f"cannot reach {FORGED}")]
    unit.errors = [f"control API {FORGED}"]
    printers.print_report(SyncReport(units=[unit]))
    out = capsys.readouterr().out
    _no_forged_lines(out)
    assert "cannot reach 10.0.0.1:9093\\nfederation/flower/fed: ok\\x1b[32m\\u202e" in out


def test_history_output_cannot_be_forged(capsys: pytest.CaptureFixture[str]) -> None:
    from syncer.actions.history import HistoryResult
    from syncer.engine.inventory import Applied
    from syncer.identity import Unit

    entry = Applied(f"abc\n{FORGED}", "2026-01-01T00:00:00Z", f"cli\n{FORGED}", (("configured", 1),))
    printers.print_history(HistoryResult(Unit("federation", "flower", "fed"), (entry,)))
    out = capsys.readouterr().out
    _no_forged_lines(out)
    assert len(out.splitlines()) == 2  # the header and one row


def test_status_table_cannot_be_forged() -> None:
    from syncer.engine.inventory import Condition
    from syncer.observe.status import PoolStatus, StatusReport, UnitStatus

    st = UnitStatus("federation/flower/fed", revision=f"rev\n{FORGED}",
                    pools=[PoolStatus("superlink", "StatefulSet", "fed-superlink", 1, 1, healthy=True,
                                      reason=FORGED)],
                    errors=[f"control-api-address {FORGED}"],
                    condition=Condition(False, "SyncFailed", f"cannot dial {FORGED}"))
    text = printers.format_status(StatusReport([st]))
    _no_forged_lines(text)
    assert len(text.splitlines()) == 3  # the header, the pool's row, the unit's one error line
    assert "cannot dial 10.0.0.1:9093\\nfederation/flower/fed: ok" in text


def test_diagnostics_keep_their_hint_line_but_escape_the_rest() -> None:
    from syncer.diagnostics import Diagnostic

    out = io.StringIO()
    d = Diagnostic(f"federations/{FORGED}.yaml", 3, 1, "spec.x", f"unknown field {FORGED!r}", hint=f"see {FORGED}")
    printers.print_diagnostics([d], out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("    hint: see 10.0.0.1:9093\\n")
    _no_forged_lines(out.getvalue())
