"""What `sync` prints on a terminal: a progress line that fits it, and a summary a big unit does
not bury (issue 13, item 4)."""

from __future__ import annotations

import io

import pytest

from syncer import printers
from syncer.engine.changeset import Action, Cause, Change, UnitResult
from syncer.engine.sync import SyncReport
from syncer.identity import ObjectRef, Unit


def big_report() -> SyncReport:
    unit = UnitResult(Unit.parse("federation/flower/big"))
    unit.changes = [Change(ObjectRef("Service", "flower", f"svc-{i:03d}"), Action.CREATED) for i in range(50)]
    broken = ObjectRef("StatefulSet", "flower", "broken")
    unit.changes.insert(45, Change(broken, Action.FAILED, "refused", cause=Cause.FORBIDDEN))
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
