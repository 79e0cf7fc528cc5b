"""The `--node-config` language as Flower parses it, and how we write it.

Flower (1.20-1.26) splits the argument with the regex `(\\S+?)=('[^']*'|"[^"]*"|\\S+)`, writes each pair
as a `key = value` TOML line and parses the result with a TOML parser. So:

- keys must be TOML bare keys (letters, digits, `_`, `-`); a dot would nest, so we refuse it;
- values are TOML: `true`/`false`, integers, floats, or strings in `"..."` (escapes apply) or `'...'`
  (literal); a quoted string cannot contain its own quote character, and newlines are impossible.

Federations write node config as strings with placeholders (`{pool}`, `{replicas}`, `{index}`,
`{node}`); the chart writes typed YAML values. Both end up as a list of `(key, Token)` pairs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")
PLACEHOLDER = re.compile(r"\{(index|replicas|pool|node)\}")
ANY_BRACE_WORD = re.compile(r"\{([A-Za-z_]+)\}")
_TOML_INT = re.compile(r"^[+-]?(0|[1-9][0-9]*)\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

# Shell variables the wrapper script defines for the dynamic placeholders.
INDEX_VAR = "FLOWER_INDEX"
NODE_VAR = "FLOWER_NODE_NAME"
POD_NAME_VAR = "POD_NAME"


class NodeConfigError(ValueError):
    """A key or value that Flower could not read back; the message says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Literal:
    """A piece of the value written as is."""

    text: str


@dataclass(frozen=True)
class Var:
    """A piece filled in from the pod at start-up (`$FLOWER_INDEX`, `$FLOWER_NODE_NAME`)."""

    name: str


Part = Literal | Var


@dataclass(frozen=True)
class Token:
    """One TOML value, as parts: a static token has only `Literal` parts."""

    parts: tuple[Part, ...]

    @property
    def dynamic(self) -> bool:
        return any(isinstance(p, Var) for p in self.parts)

    def static_text(self) -> str:
        assert not self.dynamic
        return "".join(p.text for p in self.parts if isinstance(p, Literal))


def check_key(key: str) -> None:
    if not KEY.match(key):
        if "." in key:
            raise NodeConfigError(
                f"node-config key {key!r} contains a dot, which Flower's TOML parser turns into a nested table",
                "use '-' or '_' instead of '.'",
            )
        raise NodeConfigError(
            f"node-config key {key!r} is not a TOML bare key",
            "use only letters, digits, '_' and '-' in node-config keys",
        )


def quote_string(text: str, *, dynamic: bool = False) -> tuple[str, str]:
    """The quote character to wrap `text` in so Flower reads back exactly `text`.

    Basic strings (`"..."`) interpret backslashes; literal strings (`'...'`) do not. Dynamic parts
    expand to pod or node names, which never contain quotes or backslashes.
    """
    if _CONTROL.search(text):
        raise NodeConfigError(
            f"node-config value {text!r} contains a newline or control character",
            "Flower reads node config from a single line; remove the line break",
        )
    if '"' not in text and "\\" not in text:
        return '"', '"'
    if "'" not in text:
        return "'", "'"
    raise NodeConfigError(
        f"node-config value {text!r} contains both kinds of quote (and a quote or backslash)",
        "Flower cannot read such a string back; drop one of the quote characters",
    )


def encode_typed(value: object) -> Token:
    """A typed YAML value (chart values) as a TOML token; strings stay strings ("1" stays "1")."""
    if isinstance(value, bool):
        return Token((Literal("true" if value else "false"),))
    if isinstance(value, int):
        _check_int64(str(value), f'"{value}"')
        return Token((Literal(str(value)),))  # exact, never 1e+06
    if isinstance(value, float):
        if math.isnan(value):
            return Token((Literal("nan"),))
        if math.isinf(value):
            return Token((Literal("inf" if value > 0 else "-inf"),))
        return Token((Literal(repr(value)),))
    if isinstance(value, str):
        open_q, close_q = quote_string(value)
        return Token((Literal(open_q + value + close_q),))
    raise NodeConfigError(
        f"node-config value {value!r} is a {type(value).__name__}",
        "use a string, number or true/false; lists and mappings are not supported by --node-config",
    )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _check_int64(text: str, quoted: str) -> None:
    """Flower reads node-config integers as int64: a larger one fails the ClientApp at run time."""
    if not INT64_MIN <= int(text) <= INT64_MAX:
        raise NodeConfigError(f"node-config integer {text} does not fit in 64 bits (Flower fails with "
                              "'Value out of range' when the ClientApp runs)",
                              f"quote it to pass it as a string: {quoted}")


def unknown_placeholders(raw: str) -> list[str]:
    """`{word}`s in a node-config value that are not placeholders: the operator passes them on as
    literal text, and so does flower-syncer (with a warning: usually a typo)."""
    return [m.group(0) for m in ANY_BRACE_WORD.finditer(raw) if m.group(1) not in ("index", "replicas", "pool", "node")]


@lru_cache(maxsize=4096)
def encode_template(raw: str, *, pool: str, replicas: int | None, stateful: bool) -> Token:
    """A Federation node-config string (with placeholders) as a TOML token.

    Like the operator: exactly `{index}`/`{replicas}`, integers and `true`/`false` stay unquoted;
    anything else is a string. Unlike the operator, `007` is a string (TOML has no leading zeros)
    and quoting is always safe.
    """
    if not stateful and ("{index}" in raw or "{replicas}" in raw):
        raise NodeConfigError(
            f"node-config value {raw!r} uses {{index}} or {{replicas}}, which only exist in StatefulSet mode",
            "use {node} or {pool} in DaemonSet mode",
        )
    parts: list[Part] = []
    pos = 0
    for match in PLACEHOLDER.finditer(raw):
        if match.start() > pos:
            parts.append(Literal(raw[pos : match.start()]))
        name = match.group(1)
        if name == "pool":
            parts.append(Literal(pool))
        elif name == "replicas":
            parts.append(Literal(str(replicas)))
        elif name == "index":
            parts.append(Var(INDEX_VAR))
        else:
            parts.append(Var(NODE_VAR))
        pos = match.end()
    if pos < len(raw):
        parts.append(Literal(raw[pos:]))
    merged = _merge_literals(parts)
    if raw in ("{index}", "{replicas}"):
        return Token(merged)
    if not any(isinstance(p, Var) for p in merged):
        text = "".join(p.text for p in merged if isinstance(p, Literal))
        if _TOML_INT.match(text):
            _check_int64(text, '\'"' + text + '"\'')
            return Token((Literal(text),))
        if text in ("true", "false"):
            return Token((Literal(text),))
        open_q, close_q = quote_string(text)
        return Token((Literal(open_q + text + close_q),))
    literal_text = "".join(p.text for p in merged if isinstance(p, Literal))
    open_q, close_q = quote_string(literal_text, dynamic=True)
    return Token(_merge_literals([Literal(open_q), *merged, Literal(close_q)]))


def _merge_literals(parts: list[Part]) -> tuple[Part, ...]:
    out: list[Part] = []
    for part in parts:
        if isinstance(part, Literal) and out and isinstance(out[-1], Literal):
            out[-1] = Literal(out[-1].text + part.text)
        elif not (isinstance(part, Literal) and part.text == ""):
            out.append(part)
    return tuple(out)


def join_pairs(pairs: list[tuple[str, Token]]) -> Token:
    """`k=v k=v` with keys sorted, as one token (dynamic if any value is)."""
    parts: list[Part] = []
    for i, (key, token) in enumerate(sorted(pairs, key=lambda kv: kv[0])):
        parts.append(Literal(("" if i == 0 else " ") + key + "="))
        parts.extend(token.parts)
    return Token(_merge_literals(parts))


def shell_word(token: Token) -> str:
    """The token as one POSIX shell word: literal text single-quoted, variables double-quoted."""
    out = []
    for part in token.parts:
        if isinstance(part, Var):
            out.append(f'"${{{part.name}}}"')
        else:
            out.append("'" + part.text.replace("'", "'\"'\"'") + "'")
    return "".join(out) or "''"
