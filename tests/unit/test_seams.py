"""The agent stays a set of narrow parts (issue 43, item 4): no Protocol in syncer/ asks for more than
MAX_PROTOCOL_MEMBERS members (a wider one is a hub passed around whole, as the agent once was to
its unit tables and failure handlers), and the `Agent` class, the dispatcher over its parts
(agent.parts, wired in agent.wiring), stays under MAX_AGENT_LINES lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_PROTOCOL_MEMBERS = 8
MAX_AGENT_LINES = 300


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in cls.bases]


def _own_members(cls: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
    return members


def protocol_members(sources: dict[str, str]) -> dict[str, int]:
    """Each Protocol class of `sources` (module name -> text): how many members it asks for, its
    bases' included (a Protocol extending another asks for both)."""
    classes: dict[str, ast.ClassDef] = {}
    for text in sources.values():
        classes.update(_classes(ast.parse(text)))

    def members(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        cls = classes[name]
        found = _own_members(cls)
        for base in _base_names(cls):
            if base in classes and base not in seen:
                found |= members(base, seen | {name})
        return found

    def is_protocol(name: str, seen: frozenset[str] = frozenset()) -> bool:
        bases = _base_names(classes[name])
        return "Protocol" in bases or any(b in classes and b not in seen and is_protocol(b, seen | {name})
                                          for b in bases)

    return {name: len(members(name)) for name in classes if is_protocol(name)}


def class_lines(text: str, name: str) -> int:
    cls = _classes(ast.parse(text))[name]
    assert cls.end_lineno is not None
    return cls.end_lineno - cls.lineno + 1


def test_no_protocol_in_syncer_has_more_than_eight_members() -> None:
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "syncer").rglob("*.py"))}
    wide = {name: n for name, n in protocol_members(sources).items() if n > MAX_PROTOCOL_MEMBERS}
    assert wide == {}, f"a Protocol of more than {MAX_PROTOCOL_MEMBERS} members: pass the narrow parts it reads instead"


def test_the_agent_class_stays_small() -> None:
    lines = class_lines((ROOT / "syncer" / "agent" / "agent.py").read_text(), "Agent")
    assert lines < MAX_AGENT_LINES, (f"Agent is {lines} lines: move what grew into one of its parts "
                                     "(agent.parts) instead")


def test_the_checks_can_fail() -> None:
    """A wide Protocol, one made wide by its base, and a long class are each seen."""
    fields = "\n".join(f"    f{i}: int" for i in range(6))
    text = (f"from typing import Protocol\nclass Base(Protocol):\n{fields}\n"
            "class Wide(Base, Protocol):\n    def a(self) -> None: ...\n    def b(self) -> None: ...\n"
            "    @property\n    def c(self) -> int: ...\n"
            "class Narrow(Protocol):\n    def a(self) -> None: ...\n")
    assert protocol_members({"m": text}) == {"Base": 6, "Wide": 9, "Narrow": 1}
    body = "\n".join(f"    def m{i}(self) -> None:\n        pass" for i in range(150))
    assert class_lines(f"class Agent:\n{body}\n", "Agent") == 301
