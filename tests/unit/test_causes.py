"""Causes, not words: why a change or a unit failed is a `Cause` set where the error is caught, and
no code in syncer/ decides anything by reading message text (issue 28).

The source checks walk the AST of every module in syncer/, so a `"conflict" in c.message.lower()`
or a failed `Change` without its cause cannot creep back; each check is shown to flag a bad
snippet, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.engine.changeset import Action, Cause, Change, UnitResult
from syncer.identity import ObjectRef, Unit

ROOT = Path(__file__).resolve().parents[2]
SYNCER = ROOT / "syncer"

# Attributes that hold text for people: a message, an event's note, an error's detail, a list of
# errors (`unit in plan.errors`, a mapping keyed by unit, is no text match: only a word is).
TEXT = frozenset({"message", "note", "detail", "errors", "summary"})
LISTS = frozenset({"errors"})
# The only places that read text to decide: the API server's own answer, at the boundary, where it
# has no machine-readable reason for the case. Each turns it into a type (ImmutableFieldError, a
# missing namespace) that everything after decides on.
BOUNDARY = frozenset({("syncer/engine/apply.py", "is_immutable"), ("syncer/engine/apply.py", "namespace_missing")})
# Appending to a result's `errors` without a cause is what `UnitResult.fail` is for. Exempt:
# changeset.py (fail itself), nodekeys.py (its own report, and the SuperNode keys whose failure
# engine.sync records as Cause.NODE_KEYS where it calls it), observe/status.py (UnitStatus, not a result).
ERRORS_WITHOUT_CAUSE = frozenset({"syncer/engine/changeset.py", "syncer/engine/nodekeys.py",
                                  "syncer/observe/status.py"})


def _text_attr(node: ast.expr) -> str | None:
    """The name of the text attribute `node` reads (through .lower(), str(), ...), if it reads one."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "lower", "upper", "casefold", "strip"):
            node = node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
            node = node.args[0]
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    return node.attr if isinstance(node, ast.Attribute) and node.attr in TEXT else None


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(innermost enclosing function name, node) for every node; "" at module level."""
    def walk(node: ast.AST, where: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            yield name, child
            yield from walk(child, name)
    yield from walk(tree, "")


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _error_names(tree: ast.Module) -> set[str]:
    """Names a comprehension binds to each item of a list of errors (`for e in res.errors`)."""
    return {g.target.id for node in ast.walk(tree) if isinstance(node, ast.comprehension | ast.For)
            for g in [node] if isinstance(g.target, ast.Name) and _text_attr(g.iter) in LISTS}


def message_matches(source: str) -> list[tuple[str, int, str]]:
    """(function, line, what) for each place `source` decides on the text of a message: `in`/`==`
    against a message, note, detail or errors, or startswith/endswith/find/search on one."""
    found = []
    tree = ast.parse(source)
    items = _error_names(tree)
    for where, node in _functions(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            literal = any(_is_text(o) for o in operands)
            for op, right in zip(node.ops, node.comparators, strict=True):
                attr = _text_attr(right)
                if isinstance(right, ast.Name) and right.id in items and literal:
                    attr = "errors"  # `"word" in e for e in res.errors`
                elif attr in LISTS and not _is_text(node.left):
                    attr = None  # membership of a key, not a word
                if attr and isinstance(op, ast.In | ast.NotIn):
                    found.append((where, node.lineno, f"`in` on .{attr}"))
                elif isinstance(op, ast.Eq | ast.NotEq) and literal and (attr or _text_attr(node.left)):
                    found.append((where, node.lineno, f"== on .{attr or _text_attr(node.left)}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith", "find", "index", "count") and _text_attr(node.func.value):
                found.append((where, node.lineno, f".{node.func.attr}() on .{_text_attr(node.func.value)}"))
            elif node.func.attr in ("search", "match", "fullmatch", "findall") and any(
                    _text_attr(a) for a in node.args):
                found.append((where, node.lineno, f"regex {node.func.attr}() on a message"))
    return found


def failed_changes_without_cause(source: str) -> list[int]:
    """Lines of `Change(ref, Action.FAILED, ...)` calls that pass no `cause=`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Change":
            action = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "action"), None)
            failed = isinstance(action, ast.Attribute) and action.attr == "FAILED"
            if failed and not any(k.arg == "cause" for k in node.keywords):
                lines.append(node.lineno)
    return lines


def errors_without_cause(source: str) -> list[int]:
    """Lines that add to a result's errors other than through `UnitResult.fail`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        appends = (isinstance(func, ast.Attribute) and func.attr in ("append", "extend", "insert")
                   and isinstance(func.value, ast.Attribute) and func.value.attr == "errors")
        made = (isinstance(func, ast.Name) and func.id == "UnitResult"
                and any(k.arg == "errors" for k in node.keywords))
        if appends or made:
            lines.append(node.lineno)
    return lines


def modules() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted(SYNCER.rglob("*.py"))]


def test_no_code_decides_on_the_text_of_a_message() -> None:
    found = [f"{path}:{line} in {where or 'module'}(): {what}" for path, source in modules()
             for where, line, what in message_matches(source) if (path, where) not in BOUNDARY]
    assert not found, "decide on a Cause (engine.changeset), not on message text:\n" + "\n".join(found)


def test_the_boundary_exceptions_still_exist() -> None:
    """Each exempted function still reads the server's text (else the exemption is stale: drop it)."""
    sources = dict(modules())
    for path, function in BOUNDARY:
        assert any(where == function for where, _, _ in message_matches(sources[path])), (path, function)


@pytest.mark.parametrize("snippet", [
    "def f(c):\n    return 'conflict' in c.message.lower()\n",
    "def f(res):\n    return any('refusing' in e for e in res.errors) or 'x' in res.errors\n",
    "def f(e):\n    return e.note.startswith('revision')\n",
    "def f(c):\n    return c.message == 'would create'\n",
    "def f(c, pattern):\n    return pattern.search(c.detail)\n",
    "def f(c):\n    return 'x' in str(c.message)\n",
])
def test_the_message_check_flags_what_it_forbids(snippet: str) -> None:
    assert message_matches(snippet), snippet


def test_the_message_check_lets_text_be_built_and_shown() -> None:
    fine = ("def f(c, res):\n    text = f'{c.ref}: {c.message}'\n    print(res.errors[0] if res.errors else '')\n"
            "    return c.cause is Cause.CONFLICT and c.reason == other.reason\n")
    assert message_matches(fine) == []


def test_every_failed_change_in_syncer_names_its_cause() -> None:
    missing = [f"{path}:{line}" for path, source in modules() for line in failed_changes_without_cause(source)]
    assert not missing, "pass cause= to each failed Change:\n" + "\n".join(missing)
    bad = "Change(ref, Action.FAILED, 'x')\nChange(ref, action=Action.FAILED)\nChange(ref, Action.FAILED, cause=c)\n"
    assert failed_changes_without_cause(bad) == [1, 2]


def test_every_unit_error_in_syncer_names_its_cause() -> None:
    direct = [f"{path}:{line}" for path, source in modules() if path not in ERRORS_WITHOUT_CAUSE
              for line in errors_without_cause(source)]
    assert not direct, "record a unit's error with UnitResult.fail(cause, message):\n" + "\n".join(direct)
    assert errors_without_cause("res.errors.append('x')\nUnitResult(u, errors=['x'])\nres.fail(c, 'x')\n") == [1, 2]


def test_every_cause_is_set_somewhere() -> None:
    """The enum is the real set: each member is used where an error is caught (outside changeset.py)."""
    used = {n.attr for path, source in modules() if path != "syncer/engine/changeset.py"
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Cause"}
    # the API's answers are classified by status (Cause.of_status), not named one by one
    by_status = {Cause.of_status(s) for s in (403, 422, 409, 500)}
    assert {c for c in Cause if c.name not in used} - by_status == set()


UNIT = Unit("federation", "ns", "fed")
REF = ObjectRef("Service", "ns", "fed")


def test_a_failed_change_carries_a_cause_and_only_a_failed_one() -> None:
    with pytest.raises(ValueError, match="cause"):
        Change(REF, Action.FAILED, "refused")
    with pytest.raises(ValueError, match="cause"):
        Change(REF, Action.CREATED, cause=Cause.CONFLICT)
    change = Change(REF, Action.FAILED, "owned by kubectl", cause=Cause.CONFLICT)
    assert change.failed() and change.is_conflict() and change.to_dict()["cause"] == "Conflict"
    assert not Change(REF, Action.FAILED, "conflict", cause=Cause.INVALID).is_conflict()


def test_a_units_first_error_names_its_cause() -> None:
    res = UnitResult(UNIT)
    assert res.ok and not res.failed() and res.cause is None and res.causes() == []
    res.fail(Cause.MISSING_SECRET_KEY, "Secret ns/ca has no key ca.crt")
    res.fail(Cause.FORBIDDEN, "cannot record the inventory")
    res.changes.append(Change(REF, Action.FAILED, "x", cause=Cause.CONFLICT))
    assert res.failed() and res.cause is Cause.MISSING_SECRET_KEY and len(res.errors) == 2
    assert res.causes() == [Cause.MISSING_SECRET_KEY, Cause.CONFLICT] and res.is_conflict()
    assert res.to_dict()["unit"] == "federation/ns/fed" and res.to_dict()["cause"] == "MissingSecretKey"


def test_api_answers_map_to_causes_by_status() -> None:
    assert [Cause.of_status(s) for s in (403, 422, 409, 404, 500)] == [
        Cause.FORBIDDEN, Cause.INVALID, Cause.API_ERROR, Cause.API_ERROR, Cause.API_ERROR]
