"""The Prometheus text format (version 0.0.4, what `GET /metrics` serves), written straight from
figures for the families with thousands of series, byte for byte as prometheus_client's
`generate_latest` writes the same family (labels sorted by name, values as Go prints floats).

A metric family of prometheus_client holds a `Sample` (a named tuple, its labels dict, its value)
for every series: at 2,001 units a scrape made 147,000 of them, 12 MiB of small objects at the
peak for the largest family alone, and the allocator kept much of what they had taken. Written
here, a series is one short-lived line."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

_go_float: Callable[[float], str] = floatToGoString  # how Go (and prometheus_client) print a float


def label_value(value: str) -> str:
    """A label value escaped as the text format wants it (backslash, newline, double quote)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def header(name: str, documentation: str, kind: str) -> str:
    """The HELP and TYPE lines of a family (`kind`: counter, gauge, histogram)."""
    text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {text}\n# TYPE {name} {kind}\n"


def sample(name: str, labels: str, value: float) -> str:
    """One series: `labels` already joined (`a="x",b="y"`, sorted by name, values escaped)."""
    return f"{name}{{{labels}}} {_go_float(value)}\n"


class TextCollector(Protocol):
    """A collector that also writes its families in the text format itself."""

    def collect(self) -> Iterator[Metric]: ...

    def write_text(self, out: bytearray) -> None: ...
