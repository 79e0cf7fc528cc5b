"""The Prometheus text format (version 0.0.4, what `GET /metrics` serves), piece by piece, byte for
byte as prometheus_client's `generate_latest` writes it: HELP and TYPE lines, label values
escaped, values as Go prints floats. syncer.observe.families writes whole families with them."""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client.utils import floatToGoString

_go: Callable[[float], str] = floatToGoString
# most values a scrape writes are small counts: their text looked up, not made
_SMALL = {float(n): _go(n) for n in range(1, 1025)}


def go_float(value: float) -> str:
    """`value` as Go (and prometheus_client) print a float: 1.0, 0.25, 1.7e+09, +Inf, NaN, -0.0."""
    if value:
        return _SMALL.get(value) or _go(value)
    return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"


def label_value(value: str) -> str:
    """A label value escaped as the text format wants it (backslash, newline, double quote)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def header(name: str, documentation: str, kind: str) -> str:
    """The HELP and TYPE lines of a family (`kind`: counter, gauge, histogram)."""
    text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {text}\n# TYPE {name} {kind}\n"
