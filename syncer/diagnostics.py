"""Diagnostics: problems found in a config repository, each pointing at a file, line and field.

Every layer that reads user input (YAML parsing, schema validation, cross-file checks) reports
problems as `Diagnostic` values instead of raising, so one run can report all of them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]
PathElem = str | int
FieldPath = tuple[PathElem, ...]


def format_path(path: Sequence[PathElem]) -> str:
    """Render a field path the way a person writes it: `spec.supernodes.pools[0].name`."""
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        elif out == "":
            out = elem
        elif _plain_key(elem):
            out += f".{elem}"
        else:
            out += f"[{elem!r}]"
    return out


def _plain_key(key: str) -> bool:
    return key != "" and all(c.isalnum() or c in "_-" for c in key)


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a misspelt word, if one is close enough to be a plausible typo."""
    lowered = {c.lower(): c for c in candidates}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in one file. `line` and `column` are 1-based; 0 means unknown."""

    file: str
    line: int
    column: int
    path: str
    message: str
    hint: str = ""
    severity: Severity = "error"
    unit: str = field(default="", compare=False)

    def render(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        text = f"{where}: {self.severity}: "
        if self.path:
            text += f"{self.path}: "
        text += self.message
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
            "severity": self.severity,
            "unit": self.unit,
        }

