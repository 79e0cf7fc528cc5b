"""Metric families described once, each served two ways from that one description.

A family (`GaugeFamily`, `CounterFamily`, `HistogramFamily`) is its name, help, label names and
`rows`: how its series are made from a snapshot of the figures behind it. `FamilyCollector` turns
a list of them into

- prometheus_client metric families (`collect`, `describe`): what `generate_latest`, the
  registry's `get_sample_value` and the generated reference (tools/gen_reference.py) read;
- the text format straight from the rows (`write_text`, syncer.observe.textformat), what
  `Metrics.exposition` serves for the families with thousands of series: no `Sample` tuple and
  labels dict per series, which at thousands of units cost several times the text's size and CPU.

Both are made here from the same rows, by kind, so no family can say one thing through one path
and another through the other; tests/unit/test_metrics.py holds the text to what `generate_latest`
writes for every kind (with `_created` series, escaped label values, no labels at all).

A row gives its label values in the order of `labels` (the order the reference lists them); the
text sorts them by name, as prometheus_client does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar, Generic, TypeVar, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from syncer.observe.textformat import go_float, header, label_value

S = TypeVar("S")

# rows of each kind: (label values, value); (label values, value, created or None: no `_created`
# series); (label values, count per bucket (not cumulative, the last one +Inf), sum, created or None)
GaugeRow = tuple[Sequence[str], float]
CounterRow = tuple[Sequence[str], float, float | None]
HistogramRow = tuple[Sequence[str], Sequence[int], float, float | None]

_FLUSH = 512  # lines joined and encoded at a time: few appends, and never a whole family held twice


class _Text:
    """A scrape's lines, appended to `out` as UTF-8 `_FLUSH` at a time: `add` a row's lines, then
    `due` (inlined where a family writes its rows, `lines` checked first)."""

    def __init__(self, out: bytearray) -> None:
        self.out = out
        self.lines: list[str] = []
        self.add = self.lines.append

    def due(self) -> None:
        if len(self.lines) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.out += "".join(self.lines).encode()
            self.lines.clear()


def _template(name: str, labels: Sequence[str]) -> str:
    """A sample line with `%s` for each label value, sorted by label name, and one for the value."""
    if not labels:
        return name + " %s\n"
    inner = ",".join(f'{label}="%s"' for label in sorted(labels))
    return f"{name}{{{inner}}} %s\n"


def _escaper(labels: Sequence[str]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """A row's label values as `_template` takes them: in the order of their names, escaped. Label
    values seldom need escaping, so a row is looked at whole first."""
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    pick = cast(Callable[[Sequence[str]], tuple[str, ...]], itemgetter(*order) if len(order) > 1 else tuple)

    def escaped(values: Sequence[str]) -> tuple[str, ...]:
        picked = pick(values)
        joined = "".join(picked)
        if "\\" in joined or "\n" in joined or '"' in joined:
            return tuple(map(label_value, picked))
        return picked
    return escaped


class _Family(Generic[S]):
    name: str
    help: str
    labels: tuple[str, ...]
    type: ClassVar[str]  # counter, gauge, histogram

    @property
    def served_name(self) -> str:
        """The name `/metrics` serves it under (a counter's with `_total`)."""
        return self.name + "_total" if self.type == "counter" else self.name

    def _write_created(self, text: _Text, created: list[tuple[tuple[str, ...], float]]) -> None:
        """The `_created` series, after the family as a gauge family of their own (as
        `generate_latest` writes them); none, no header."""
        if not created:
            return
        text.add(header(self.name + "_created", self.help, "gauge"))
        template = _template(self.name + "_created", self.labels)
        for escaped, value in created:
            text.add(template % (*escaped, go_float(value)))
            text.due()


@dataclass(frozen=True)
class GaugeFamily(_Family[S]):
    type: ClassVar[str] = "gauge"
    name: str
    help: str
    labels: tuple[str, ...]
    rows: Callable[[S], Iterable[GaugeRow]]

    def metric(self, snapshot: S | None) -> Metric:
        family = GaugeMetricFamily(self.name, self.help, labels=self.labels)
        if snapshot is not None:
            for values, value in self.rows(snapshot):
                family.add_metric(values, value)
        return family

    def write(self, snapshot: S, text: _Text) -> None:
        text.add(header(self.name, self.help, "gauge"))
        template, escaped = _template(self.name, self.labels), _escaper(self.labels)
        add, lines = text.add, text.lines
        for values, value in self.rows(snapshot):
            add(template % (*escaped(values), go_float(value)))
            if len(lines) >= _FLUSH:
                text.flush()


@dataclass(frozen=True)
class CounterFamily(_Family[S]):
    """`name` without `_total` (served with it)."""

    type: ClassVar[str] = "counter"
    name: str
    help: str
    labels: tuple[str, ...]
    rows: Callable[[S], Iterable[CounterRow]]

    def metric(self, snapshot: S | None) -> Metric:
        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        if snapshot is not None:
            for values, value, created in self.rows(snapshot):
                family.add_metric(values, value, created=created)
        return family

    def write(self, snapshot: S, text: _Text) -> None:
        text.add(header(self.name + "_total", self.help, "counter"))
        template, escaped = _template(self.name + "_total", self.labels), _escaper(self.labels)
        created: list[tuple[tuple[str, ...], float]] = []
        add, lines = text.add, text.lines
        for values, value, made in self.rows(snapshot):
            labels = escaped(values)
            add(template % (*labels, go_float(value)))
            if len(lines) >= _FLUSH:
                text.flush()
            if made is not None:
                created.append((labels, made))
        self._write_created(text, created)


@dataclass(frozen=True)
class HistogramFamily(_Family[S]):
    type: ClassVar[str] = "histogram"
    name: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...]  # upper bounds, without +Inf
    rows: Callable[[S], Iterable[HistogramRow]]

    @property
    def _les(self) -> tuple[str, ...]:
        return (*(go_float(b) for b in self.buckets), "+Inf")

    def metric(self, snapshot: S | None) -> Metric:
        family = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        if snapshot is None:
            return family
        les = self._les
        for values, counts, total, created in self.rows(snapshot):
            cumulative, buckets = 0, []
            for le, n in zip(les, counts, strict=True):
                cumulative += n
                buckets.append((le, float(cumulative)))
            family.add_metric(values, buckets, total)
            if created is not None:
                family.samples.append(Sample(self.name + "_created", dict(zip(self.labels, values, strict=True)),
                                             created))
        return family

    def write(self, snapshot: S, text: _Text) -> None:
        text.add(header(self.name, self.help, "histogram"))
        # a bucket line per bound: its `le` written in, the other labels' values to fill (sorted alike)
        bucket = _template(self.name + "_bucket", (*self.labels, "le"))
        buckets = [bucket.replace('le="%s"', f'le="{le}"') for le in self._les]
        count, total, escaped = _template(self.name + "_count", self.labels), \
            _template(self.name + "_sum", self.labels), _escaper(self.labels)
        created: list[tuple[tuple[str, ...], float]] = []
        for values, counts, seconds, made in self.rows(snapshot):
            labels = escaped(values)
            cumulative = 0
            for line, n in zip(buckets, counts, strict=True):
                cumulative += n
                text.add(line % (*labels, go_float(cumulative)))
            text.add(count % (*labels, go_float(cumulative)))
            text.add(total % (*labels, go_float(seconds)))
            text.due()
            if made is not None:
                created.append((labels, made))
        self._write_created(text, created)


Family = GaugeFamily[S] | CounterFamily[S] | HistogramFamily[S]


class FamilyCollector(Generic[S]):
    """A prometheus_client collector of `families`, all made from one `read()` per scrape, that
    also writes them as text (`write_text`). Each family is made only once the one before it was
    taken: made all at once, a scrape's families would all be held at its peak."""

    def __init__(self, families: Sequence[Family[S]], read: Callable[[], S]) -> None:
        self.families = tuple(families)
        self._read = read  # the figures of one scrape, all families alike

    def describe(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.metric(None)

    def collect(self) -> Iterator[Metric]:
        snapshot = self._read()
        for family in self.families:
            yield family.metric(snapshot)

    def write_text(self, out: bytearray) -> None:
        """Every family `collect` makes, in the text format, appended to `out`."""
        snapshot = self._read()
        text = _Text(out)
        for family in self.families:
            family.write(snapshot, text)
        text.flush()
