"""Metric families described once (syncer.observe.families): the text written straight from the
rows is byte for byte what prometheus_client's `generate_latest` writes of the metric families
made from the same rows, for every kind and every corner of the format."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from prometheus_client import generate_latest

from syncer.observe.families import (
    CounterFamily,
    CounterRow,
    FamilyCollector,
    GaugeFamily,
    GaugeRow,
    HistogramFamily,
    HistogramRow,
)

ODD = ['we"ird', "back\\slash", "new\nline", "per%scent", "ünï", ""]  # escaped, or taken as they are
VALUES = [0, 0.0, -0.0, 1, 1.0, 1024, 1025.0, 0.1, -3.5, 1.7e9 + 0.25, 12345678.0, 1e-9, math.inf, -math.inf,
          math.nan, True]


def _gauges(n: int) -> Iterator[GaugeRow]:
    for i in range(n):
        yield (f"federation/ns/f{i}", ODD[i % len(ODD)], "Unschedulable"), VALUES[i % len(VALUES)]


def _counters(n: int) -> Iterator[CounterRow]:
    for i in range(n):
        yield (f"u{i}", ODD[i % len(ODD)]), float(i), (1.7e9 + i if i % 3 else None)


def _histograms(n: int) -> Iterator[HistogramRow]:
    for i in range(n):
        counts: Sequence[int] = [i % 2, 0, 3, i]  # per bucket; the last one +Inf
        yield (ODD[i % len(ODD)], f"u{i}"), counts, 0.25 * i, (1.7e9 if i % 2 else None)


def collector(n: int) -> FamilyCollector[int]:
    """Every kind: a gauge without labels, labels declared out of their names' order, a counter
    with and without `_created` series, a histogram whose `le` sorts between its labels."""
    return FamilyCollector((
        GaugeFamily("t_plain", "No labels at all.", (), lambda n: [((), float(n))]),
        GaugeFamily("t_gauge", 'Help with a back\\slash,\na newline and "quotes".', ("unit", "pool", "reason"),
                    _gauges),
        CounterFamily("t_count", "A counter.", ("unit", "kind"), _counters),
        CounterFamily("t_never_created", "A counter without `_created` series.", ("unit",),
                      lambda n: (((f"u{i}",), 1.0, None) for i in range(n))),
        HistogramFamily("t_seconds", "A histogram.", ("area", "unit"), (0.01, 0.5, 1e7), _histograms),
        GaugeFamily("t_empty", "No series at all.", ("unit",), lambda n: ()),
    ), lambda: n)


def text(c: FamilyCollector[int]) -> bytes:
    out = bytearray(b"before\n")
    c.write_text(out)
    return bytes(out[len(b"before\n"):])


def test_every_kind_is_written_as_generate_latest_writes_it() -> None:
    for n in (0, 1, 7, 2000):  # 2000: more lines than are joined at a time
        c = collector(n)
        assert text(c) == generate_latest(c), n
    written = text(collector(7)).decode()
    assert 'reason="Unschedulable",unit="federation/ns/f0"' in written  # labels sorted by name
    assert 't_seconds_bucket{area="we\\"ird",le="1e+07",unit="u0"}' in written  # le between, as Go prints it
    assert "t_plain 7.0\n" in written and "# TYPE t_never_created_created" not in written
    assert "# TYPE t_count_created gauge" in written and "t_gauge{" in written


def test_no_series_no_created_family() -> None:
    """A counter or histogram with no series has its HELP and TYPE lines, but no `_created` family."""
    written = text(collector(0)).decode()
    assert "# TYPE t_count_total counter" in written and "# TYPE t_seconds histogram" in written
    assert "# TYPE t_count_created" not in written and "# TYPE t_seconds_created" not in written


def test_describe_gives_each_family_once_without_series() -> None:
    described = list(collector(3).describe())
    assert [(f.name, f.type, f.samples) for f in described] == [
        ("t_plain", "gauge", []), ("t_gauge", "gauge", []), ("t_count", "counter", []),
        ("t_never_created", "counter", []), ("t_seconds", "histogram", []), ("t_empty", "gauge", [])]
    assert [f.served_name for f in collector(0).families][2:4] == ["t_count_total", "t_never_created_total"]
