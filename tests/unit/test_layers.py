"""The package's floors: a module imports only from its own floor or the floors below it, so the
pure core (identity -> models -> render -> plan) never reaches into adapters, and adapters never
reach into the agent or the CLI. Walks every import statement of syncer/ (function-local and
TYPE_CHECKING ones included) and fails on an upward edge."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "syncer"

# Lowest first. Modules of one floor may import each other.
FLOORS: list[set[str]] = [
    {"syncer", "syncer.identity", "syncer.diagnostics", "syncer.logs", "syncer.compact"},
    {"syncer.yamldoc", "syncer.plan", "syncer.secrets"},
    {"syncer.models"},
    {"syncer.repo"},
    {"syncer.render"},
    {"syncer.cluster", "syncer.source"},
    {"syncer.engine"},
    {"syncer.observe"},
    {"syncer.actions", "syncer.http"},
    {"syncer.agent"},
    {"syncer.cli", "syncer.cli_repo", "syncer.printers", "syncer.cli_env"},
    {"syncer.__main__"},
]
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> int:
    """The floor of `module`: that of its longest listed prefix."""
    best, best_len = -1, -1
    for i, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = i, len(name)
    return best


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("syncer"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("syncer"):
            module = node.module or ""
            # `from syncer.x import y` may name a submodule y; count the deeper module when it exists
            for alias in node.names:
                deeper = f"{module}.{alias.name}"
                sub = PACKAGE.parent / deeper.replace(".", "/")
                found.add(deeper if sub.with_suffix(".py").exists() or sub.is_dir() else module)
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_floor() -> None:
    assert [module_name(p) for p in SOURCES if floor_of(module_name(p)) < 0] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_import_runs_up_a_floor(path: Path) -> None:
    me = module_name(path)
    upward = sorted(f"{me} -> {target}" for target in imports(path) if floor_of(target) > floor_of(me))
    assert upward == []


def test_no_source_file_is_longer_than_the_limit() -> None:
    lengths = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in SOURCES}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_the_walker_sees_an_upward_edge(tmp_path: Path) -> None:
    """The check itself can fail: a model importing the engine is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from syncer.engine.sync import Engine\n")
    assert floor_of("syncer.models.federation") < floor_of(next(iter(imports(bad))))


def test_the_engine_does_not_import_the_models() -> None:
    """The engine takes a Plan, not the loader's state: importing it must not pull in pydantic and
    every model (about a second at start-up)."""
    import subprocess
    import sys

    code = ("import sys, syncer.engine.sync; "
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'syncer.models'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
