"""The reliability suite: hostile input, ownership clashes, leader fencing, inventory loss,
slow clients and push bursts, run in CI like every other test.

Each module is one category (`test_<category>.py`); every collected case counts. At the end of a
run that included this folder, a table says, per category, how many cases ran and passed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_results: dict[str, dict[str, int]] = defaultdict(lambda: {"cases": 0, "passed": 0})


def _category(nodeid: str, path: Path) -> str | None:
    try:
        path.resolve().relative_to(HERE)
    except ValueError:
        return None
    return path.stem.removeprefix("test_").replace("_", " ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    category = _category(item.nodeid, Path(str(item.fspath)))
    if category is None:
        return
    # one count per case: the call phase, or the setup phase when setup failed or skipped
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _results[category]["cases"] += 1
        if report.passed:
            _results[category]["passed"] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _results:
        return
    width = max(len("category"), *(len(c) for c in _results))
    tr = terminalreporter
    tr.section("reliability suite")
    tr.write_line(f"{'category':<{width}}  {'cases':>5}  {'passed':>6}")
    total_cases = total_passed = 0
    for category in sorted(_results):
        row = _results[category]
        total_cases += row["cases"]
        total_passed += row["passed"]
        tr.write_line(f"{category:<{width}}  {row['cases']:>5}  {row['passed']:>6}")
    tr.write_line(f"{'total':<{width}}  {total_cases:>5}  {total_passed:>6}")
