"""The package's floors and its import graph.

Floors: a module of syncer/ imports only from its own floor or the floors below it, so the pure core
(identity -> models -> render -> plan) never reaches into adapters, and adapters never reach into the
agent or the CLI.  Circles: no module of syncer/, tools/ or bench/ reaches itself through its imports.
Private names: no module imports another module's `_private` names.  Tests: no module of tests/
imports a test module (`test_*.py`); what tests share lives in helper modules (tests/builders.py,
tests/integration/agents.py, ...) and conftest.py fixtures.  Every import statement counts,
function-local and TYPE_CHECKING ones included.

Size is a prompt, not a wall: a file over MAX_LINES is reported unless it is listed, with its reason,
in LONG_FILES; when a file grows past the line, split it along a seam or justify it there."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "syncer"
TREES = ("syncer", "tools", "bench")
# tools/ scripts put tools/ on sys.path and import each other by bare name (`import devutil`)
BARE_NAME_TREES = ("tools",)

# Lowest first. Modules of one floor may import each other.
FLOORS: list[set[str]] = [
    {"syncer", "syncer.identity", "syncer.diagnostics", "syncer.logs", "syncer.shared_strings"},
    {"syncer.yamldoc", "syncer.plan", "syncer.ours", "syncer.secrets"},
    {"syncer.models"},
    {"syncer.repo"},
    {"syncer.render"},
    {"syncer.cluster", "syncer.source"},
    {"syncer.engine"},
    {"syncer.observe"},
    {"syncer.actions", "syncer.http"},
    {"syncer.agent"},
    {"syncer.cli", "syncer.cli_repo", "syncer.printers", "syncer.cli_env", "syncer.cli_parser", "syncer.cli_agent",
     "syncer.cli_local"},
    {"syncer.__main__"},
]
MAX_LINES = 600
# The one place a file may stay over MAX_LINES: path -> why splitting it would not help a reader.
LONG_FILES: dict[str, str] = {}
# Circles not yet broken, each with why it is still here: the check fails on any other circle, and on
# an entry here that no longer exists.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> int:
    """The floor of `module`: that of its longest listed prefix."""
    best, best_len = -1, -1
    for i, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = i, len(name)
    return best


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module of ours that `name` names: itself, or a bare tools/ name, or None (not ours)."""
    if name in modules:
        return name
    for tree in BARE_NAME_TREES:
        if f"{tree}.{name}" in modules:
            return f"{tree}.{name}"
    return None


def _package_of(me: str, path: Path) -> str:
    return me if path.name == "__init__.py" else me.rpartition(".")[0]


def import_edges(path: Path, me: str, modules: Mapping[str, Path]) -> list[tuple[str, str | None]]:
    """(module, imported name) for every import of ours in `path`: name is None for `import m`, the
    imported name for `from m import name` when that name is not itself a submodule."""
    edges: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b.c` binds `a` and runs a.b.c: the edge is to the deepest module of ours
                parts = alias.name.split(".")
                for n in range(len(parts), 0, -1):
                    target = _resolve(".".join(parts[:n]), modules)
                    if target:
                        edges.append((target, None))
                        break
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(me, path).split(".")
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            module = _resolve(base, modules)
            for alias in node.names:
                sub = _resolve(f"{base}.{alias.name}", modules) if base else None
                if sub:
                    edges.append((sub, None))
                elif module:
                    edges.append((module, alias.name))
    return edges


def collect(roots: Iterable[Path]) -> dict[str, Path]:
    """Every module under `roots` by its dotted name (relative to the roots' parent)."""
    return {module_name(p, r.parent): p for r in roots for p in sorted(r.rglob("*.py")) if ".venv" not in p.parts}


def graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    return {me: {t for t, _ in import_edges(p, me, modules) if t != me} for me, p in modules.items()}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


MODULES = collect(ROOT / t for t in TREES)
TEST_MODULES = collect([ROOT / "tests"])
SOURCES = sorted(p for m, p in MODULES.items() if m.split(".")[0] == "syncer")


def test_every_module_has_a_floor() -> None:
    assert [module_name(p) for p in SOURCES if floor_of(module_name(p)) < 0] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_up_a_floor(path: Path) -> None:
    me = module_name(path)
    upward = sorted(f"{me} -> {target}" for target, _ in import_edges(path, me, MODULES)
                    if floor_of(target) > floor_of(me))
    assert upward == []


def test_no_import_circles() -> None:
    found = {tuple(c) for c in cycles(graph(MODULES))}
    assert sorted(found - set(KNOWN_CIRCLES)) == [], "an import circle: break it (see docs/architecture.md)"
    assert sorted(set(KNOWN_CIRCLES) - found) == [], "a listed circle is gone: remove it from KNOWN_CIRCLES"


def test_no_module_imports_another_modules_private_names() -> None:
    private = sorted(f"{me} imports {target}.{name}" for me, path in MODULES.items()
                     for target, name in import_edges(path, me, MODULES)
                     if name and name.startswith("_") and not name.startswith("__") and target != me)
    assert private == []


def imports_of_test_modules(modules: Mapping[str, Path]) -> list[str]:
    """`module -> test module` for every import of a test module (`test_*.py`) by another module."""
    return sorted(f"{me} -> {target}" for me, path in modules.items() for target, _ in import_edges(path, me, modules)
                  if target != me and target.rpartition(".")[2].startswith("test_"))


def test_no_module_imports_a_test_module() -> None:
    """Helpers shared by tests live in helper modules and conftest.py, so a test module can be run,
    moved or deleted alone (and pytest never collects a test twice under two names)."""
    assert imports_of_test_modules(TEST_MODULES | MODULES) == [], (
        "move what is shared to tests/builders.py, a helper module of the directory, or a conftest.py fixture")


def test_long_files_are_listed_with_a_reason() -> None:
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES.values()}
    over = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONG_FILES}
    assert over == {}, (f"over {MAX_LINES} lines: split along a seam, or list the file with a one-line "
                        f"reason in LONG_FILES")
    assert {name for name in LONG_FILES if lengths.get(name, 0) <= MAX_LINES} == set(), "stale LONG_FILES entry"


def test_the_walker_sees_an_upward_edge(tmp_path: Path) -> None:
    """The check itself can fail: a model importing the engine is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from syncer.engine.sync import Engine\n")
    (target, _), = import_edges(bad, "syncer.models.bad", MODULES)
    assert floor_of("syncer.models.federation") < floor_of(target)


def test_the_walker_finds_a_circle(tmp_path: Path) -> None:
    """The check itself can fail: a type-only import, a relative one and a function-local bare tools/
    name each close a circle, and a private name is seen."""
    pkg = tmp_path / "pkg"
    tools = tmp_path / "tools"
    pkg.mkdir()
    tools.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("from .c import _helper\n")
    (pkg / "c.py").write_text("def f():\n    from pkg import a\n")
    (tools / "x.py").write_text("def f():\n    import y\n")
    (tools / "y.py").write_text("import x\n")
    (tools / "z.py").write_text("import os\n")
    modules = collect([pkg, tools])
    assert cycles(graph(modules)) == [["pkg.a", "pkg.b", "pkg.c"], ["tools.x", "tools.y"]]
    assert ("pkg.c", "_helper") in import_edges(pkg / "b.py", "pkg.b", modules)


def test_the_walker_finds_an_import_of_a_test_module(tmp_path: Path) -> None:
    """The check itself can fail: `from pkg.test_a import x`, `from pkg import test_a` and a
    function-local `import pkg.test_a` are each seen; a helper module and conftest.py are not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name, text in {"__init__.py": "", "test_a.py": "from pkg.helpers import x\nfrom pkg.conftest import y\n",
                       "helpers.py": "x = 1\n", "conftest.py": "y = 2\n",
                       "test_b.py": "from pkg.test_a import x\n", "test_c.py": "from pkg import test_a\n",
                       "test_d.py": "def f():\n    import pkg.test_a\n"}.items():
        (pkg / name).write_text(text)
    assert imports_of_test_modules(collect([pkg])) == [
        "pkg.test_b -> pkg.test_a", "pkg.test_c -> pkg.test_a", "pkg.test_d -> pkg.test_a"]


def test_the_engine_does_not_import_the_models() -> None:
    """The engine takes a Plan, not the loader's state: importing it must not pull in pydantic and
    every model (about a second at start-up)."""
    import subprocess
    import sys

    code = ("import sys, syncer.engine.sync; "
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'syncer.models'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
