"""Safe YAML loading that remembers where every key and item came from.

Before any parser sees a file, `prescan` bounds what could crash or stall it: libyaml's composer
recurses once per nesting level in C, so `[` x 50,000 overflows the C stack and kills the whole
process (no Python exception to catch). The pre-scan is one linear pass that over-estimates
nesting (flow brackets and block indentation), and counts documents and aliases; a file over a
limit becomes a diagnostic and is never parsed. The exact limits are enforced again while
building values (`MAX_DEPTH`, `MAX_NODES`).

PyYAML's composer builds a node graph in which an alias is a shared node, so composing is cheap
even for a "billion laughs" document. We then construct plain Python values ourselves, counting
every node we visit: expansion past `max_nodes` (or a recursive alias) stops with a diagnostic
instead of exhausting memory. While constructing we record the line/column of every mapping key
and sequence item, so schema errors can point at the exact line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from syncer.diagnostics import Diagnostic, FieldPath, format_path
from syncer.shared_strings import share_strings

try:  # libyaml is much faster; fall back to the pure-Python loader where it is missing
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

MAX_FILE_BYTES = 1 << 20  # a config file; the API server stores no object over 1.5 MiB either
MAX_NODES = 100_000  # values a document may expand to (aliases included)
MAX_DEPTH = 64  # nesting of a document's values
MAX_DOCUMENTS = 500  # documents per file
MAX_ALIASES = 1_000  # alias uses (`*name`) per file
MAX_SCAN_DEPTH = 200  # the pre-scan's (over-)estimate of nesting; libyaml itself fails in the thousands

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"


@dataclass
class YamlDoc:
    """One YAML document: its value plus the (line, column) of every path in it (1-based)."""

    file: str
    data: Any
    start_line: int
    positions: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)

    def position(self, path: FieldPath) -> tuple[int, int]:
        """Position of `path`, or of its nearest ancestor that exists (for missing fields)."""
        probe = tuple(path)
        while probe:
            if probe in self.positions:
                return self.positions[probe]
            probe = probe[:-1]
        return self.positions.get((), (self.start_line, 1))


class _TooBig(Exception):
    pass


class _Builder:
    def __init__(self, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.count = 0
        self.scalars = yaml.constructor.SafeConstructor()
        self.positions: dict[FieldPath, tuple[int, int]] = {}
        self.problems: list[tuple[FieldPath, tuple[int, int], str, str]] = []

    def build(self, node: yaml.Node, path: FieldPath, depth: int) -> Any:
        self.count += 1
        if self.count > self.max_nodes:
            raise _TooBig
        if depth > MAX_DEPTH:
            raise _TooBig
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, child in enumerate(node.value):
                self.positions[(*path, i)] = _mark(child)
                items.append(self.build(child, (*path, i), depth + 1))
            return items
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        raise TypeError(f"unexpected YAML node {node!r}")  # pragma: no cover

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag == _TIMESTAMP:
            # Kubernetes fields are strings; keep dates as written instead of datetime objects.
            return share_strings(node.value)
        # the values a repository repeats ("10m", an image, a namespace) are kept once: a big
        # repository's models would otherwise hold a copy of each per document
        return share_strings(self.scalars.construct_object(node, deep=True))

    def _mapping(self, node: yaml.MappingNode, path: FieldPath, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        explicit: set[str] = set()
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merged.extend(self._merge_sources(value_node))
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            if key in explicit:
                self.problems.append(
                    ((*path, key), _mark(key_node), f"duplicate key {key!r}",
                     "remove one of the two entries; YAML keeps only the last one, which hides mistakes")
                )
            explicit.add(key)
            self.positions[(*path, key)] = _mark(key_node)
            result[key] = self.build(value_node, (*path, key), depth + 1)
        for key_node, value_node in merged:  # `<<: *anchor` fills only keys not written explicitly
            key = self._key(key_node, path)
            if key is None or key in result:
                continue
            self.positions.setdefault((*path, key), _mark(key_node))
            result[key] = self.build(value_node, (*path, key), depth + 1)
        return result

    def _merge_sources(self, node: yaml.Node) -> list[tuple[yaml.Node, yaml.Node]]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        pairs: list[tuple[yaml.Node, yaml.Node]] = []
        for src in sources:
            if isinstance(src, yaml.MappingNode):
                pairs.extend(src.value)
        return pairs

    def _key(self, key_node: yaml.Node, path: FieldPath) -> str | None:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag == _STR:
            return share_strings(str(key_node.value))
        if isinstance(key_node, yaml.ScalarNode):
            # A key like `1` or `true` is almost always a mistake in Kubernetes-style config.
            self.problems.append(
                ((*path, str(key_node.value)), _mark(key_node),
                 f"key {key_node.value!r} is not a string",
                 f'quote it: "{key_node.value}"')
            )
            return str(key_node.value)
        self.problems.append(
            (path, _mark(key_node), "a mapping key must be a plain string", "use a simple string as the key")
        )
        return None


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def decode_text(raw: bytes, file: str) -> tuple[str | None, list[Diagnostic]]:
    """Bytes to text, refusing binary and oversized files with a diagnostic."""
    if len(raw) > MAX_FILE_BYTES:
        return None, [Diagnostic(file, 0, 0, "", f"file is larger than the {MAX_FILE_BYTES}-byte limit",
                                 "config files are small; is this the right file?")]
    if b"\x00" in raw:
        return None, [Diagnostic(file, 0, 0, "", "file is binary, not YAML text",
                                 "remove it from the config directory or fix its contents")]
    try:
        return raw.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [Diagnostic(file, line, 0, "", f"file is not valid UTF-8 (byte {exc.start})",
                                 "save the file as UTF-8")]


_SCALAR_START = frozenset(" \t[{,:-?")  # after these (or at a line start) a quote opens a quoted scalar
_ALIAS_START = frozenset(" \t[{,:-")


def prescan(text: str, file: str) -> list[Diagnostic]:
    """Check, in one pass without recursion, that `text` stays within what the YAML parser can
    take: nesting (over-estimated: flow brackets plus block indentation levels plus compact `- `
    items), documents and aliases. Returns diagnostics; empty means the file may be parsed."""
    documents = 1
    aliases = 0
    indents: list[int] = []  # open block indentation levels
    flow = 0  # open `[` / `{`
    block_scalar_indent = -1  # inside a `|` / `>` scalar: its parent's indentation
    for lineno, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if block_scalar_indent >= 0:
            if not stripped.strip() or indent > block_scalar_indent:
                continue
            block_scalar_indent = -1
        if line.startswith(("---", "...")) and (len(line) == 3 or line[3] in " \t\r"):
            if line.startswith("---"):
                documents += 1
                if documents > MAX_DOCUMENTS:
                    return [_limit(file, lineno, f"more than {MAX_DOCUMENTS} YAML documents in one file",
                                   "split the file; a config file holds a few documents")]
            indents.clear()
            flow = 0
            stripped = line[3:].lstrip()
            indent = 3
        if not stripped or stripped.startswith("#"):
            continue
        if flow == 0:
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
        depth, aliases, flow, opens_block = _scan_line(stripped, flow, aliases)
        nesting = len(indents) + depth + flow
        if nesting > MAX_SCAN_DEPTH:
            return [_limit(file, lineno, f"nested deeper than {MAX_SCAN_DEPTH} levels",
                           f"config documents nest a few levels; values may nest at most {MAX_DEPTH}")]
        if aliases > MAX_ALIASES:
            return [_limit(file, lineno, f"more than {MAX_ALIASES} YAML aliases (*name) in one file",
                           "write the values out instead of repeating aliases")]
        if opens_block:
            block_scalar_indent = indent
    return []


def _scan_line(text: str, flow: int, aliases: int) -> tuple[int, int, int, bool]:
    """(compact `- ` items opened, aliases so far, open flow brackets after the line, whether the
    line ends by opening a block scalar) for one line without its indentation."""
    compact = 0
    i, n = 0, len(text)
    while text.startswith(("- ", "? "), i) or text[i:] in ("-", "?"):  # `- - - x`: each dash nests
        compact += 1
        i += 2
        while i < n and text[i] == " ":
            i += 1
    prev = " "  # the previous character
    last = ":"  # the previous non-blank character (the line start counts as a value start)
    peak = flow
    while i < n:
        ch = text[i]
        if ch == "#" and prev in " \t":
            break
        if ch in "'\"" and prev in _SCALAR_START and (flow or last in ":-?,[{"):
            i = _skip_quoted(text, i)
            prev = last = ch
            continue
        if ch in "[{" and (flow or last in ":-?,[{"):  # a flow collection starts only where a value does
            flow += 1
            peak = max(peak, flow)
        elif ch in "]}" and flow:
            flow -= 1
        elif ch == "*" and prev in _ALIAS_START:
            aliases += 1
        prev = ch
        if ch not in " \t":
            last = ch
        i += 1
    tail = text[:i].rstrip()
    opens_block = flow == 0 and bool(re.search(r"(^|[\s:-])[|>][+-]?\d?$", tail))
    return compact + (peak - flow if peak > flow else 0), aliases, flow, opens_block


def _skip_quoted(text: str, start: int) -> int:
    """The index just past the quoted scalar starting at `start` (or the line's end: it continues)."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text.startswith("''", i):
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _limit(file: str, line: int, message: str, hint: str) -> Diagnostic:
    return Diagnostic(file, line, 1, "", f"file not parsed: {message}", hint)


def _syntax_hint(text: str, line: int) -> str:
    """What most likely went wrong on `line` (1-based): a tab in the indentation, or a line that
    lines up with no key above it."""
    lines = text.split("\n")
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    indent = here[: len(here) - len(here.lstrip(" \t"))]
    if "\t" in indent:
        return "this line is indented with a tab: YAML allows only spaces for indentation"
    above = [ln for ln in lines[: max(line - 1, 0)] if ln.strip() and not ln.lstrip().startswith("#")]
    levels = {len(ln) - len(ln.lstrip(" ")) + (2 if ln.lstrip().startswith("- ") else 0) for ln in above}
    if here.strip() and len(indent) not in levels and levels:
        nearest = sorted(levels, key=lambda n: (abs(n - len(indent)), -n))[0]
        return (f"this line is indented {len(indent)} spaces, which lines up with no key above it; the keys of "
                f"the nearest level start at {nearest}: line it up with the keys it belongs with")
    return "check indentation, quoting and colons around this line"


def load_documents(text: str, file: str, max_nodes: int = MAX_NODES) -> tuple[list[YamlDoc], list[Diagnostic]]:
    """Parse every document of a YAML stream (after `prescan`). Empty documents are skipped."""
    docs: list[YamlDoc] = []
    diags: list[Diagnostic] = prescan(text, file)
    if diags:
        return [], diags
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        return [], [Diagnostic(file, line, col, "", f"YAML syntax error: {problem}", _syntax_hint(text, line))]
    except yaml.YAMLError as exc:  # pragma: no cover - reader errors carry no mark
        return [], [Diagnostic(file, 0, 0, "", f"YAML error: {exc}", "fix the YAML syntax")]
    for node in nodes:
        if node is None:
            continue
        start = node.start_mark.line + 1
        builder = _Builder(max_nodes)
        try:
            data = builder.build(node, (), 0)
        except _TooBig:
            diags.append(Diagnostic(
                file, start, 1, "",
                f"document expands to more than {max_nodes} values or nests deeper than {MAX_DEPTH} levels",
                "this usually means YAML anchors/aliases that multiply (or refer to themselves); write the values out",
            ))
            continue
        except yaml.YAMLError as exc:
            diags.append(Diagnostic(file, start, 1, "", f"YAML error: {exc}", "fix the YAML value"))
            continue
        for path, (line, col), message, hint in builder.problems:
            diags.append(Diagnostic(file, line, col, format_path(path), message, hint))
        doc = YamlDoc(file=file, data=data, start_line=start, positions=builder.positions)
        doc.positions[()] = (start, 1)
        docs.append(doc)
    return docs, diags
