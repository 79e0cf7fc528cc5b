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


def printable(text: str) -> str:
    """`text` safe to print on one line and to encode as UTF-8: control characters (a newline in a
    file name must not forge a second diagnostic line) and undecodable bytes of file names (kept
    by Python as lone surrogates) become escapes such as `\\n` and `\\xff`."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape of an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


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
    code: str = field(default="", compare=False)  # a fixed kind where one decides on it (DECRYPTION, ...)

    def __post_init__(self) -> None:
        for name in ("file", "path", "message", "hint", "unit"):
            value = getattr(self, name)
            if not value.isprintable():
                object.__setattr__(self, name, printable(value))

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


DECRYPTION = "decryption"  # Diagnostic.code of a file that cannot be decrypted
CROSS_CLUSTER = "cross-cluster-unit"  # ... of a unit id defined in two clusters' folders: every cluster's error
UNKNOWN_FIELD = "unknown-field"  # ... of a field the schema does not know (often a typo)


def primary(diagnostics: Iterable[Diagnostic]) -> Diagnostic | None:
    """The error to show first, the one that names the cause: a file that cannot be decrypted,
    then a misspelt field (`unknown field 'replica'`, did you mean 'replicas'?) before the rule
    errors it sets off (`replicas must be set`), then by file and line."""
    errors = [d for d in diagnostics if d.severity == "error"]
    return min(errors, key=primary_first) if errors else None


def primary_first(d: Diagnostic) -> tuple[bool, bool, Diagnostic]:
    """A sort key that puts the primary diagnostics (see `primary`) first."""
    return d.code != DECRYPTION, d.code != UNKNOWN_FIELD, d

