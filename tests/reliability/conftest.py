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


def _category(nodeid: str, rootdir: Path) -> str | None:
    path = (rootdir / nodeid.split("::", 1)[0]).resolve()
    try:
        path.relative_to(HERE)
    except ValueError:
        return None
    return path.stem.removeprefix("test_").replace("_", " ")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # logreport, not makereport: under pytest-xdist (tools/test runs these tests in 2 processes) the
    # reports reach this hook in the process that prints the summary; makereport runs in the workers
    category = _category(report.nodeid, _ROOT[0]) if _ROOT else None
    if category is None:
        return
    # one count per case: the call phase, or the setup phase when setup failed or skipped
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _results[category]["cases"] += 1
        if report.passed:
            _results[category]["passed"] += 1


_ROOT: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    _ROOT[:] = [config.rootpath]


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
