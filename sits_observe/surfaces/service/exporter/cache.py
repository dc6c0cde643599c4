"""What the exporter keeps between passes: each signal's families, their fingerprint and text.

A pass asks :class:`SignalCache` for each signal. When the signal declares the rows it reads
(:mod:`.exporter_reads`) and their fingerprints equal those of the signal's last successful
build, the cache returns that build as it is: no query beyond the fingerprints, no label
rendering, no text encoding. Otherwise the builder runs, and each family it returns is
rendered to Prometheus text once, here, in the pass; a family equal to the one the signal
returned last time (same name, type, help and samples) keeps its text.

The text of a family is exactly what ``prometheus_client.generate_latest`` writes for it
(:class:`TextWriter` is checked against it byte for byte, and leaves anything unusual to
it), so a scrape that joins the cached texts serves the bytes a registry holding the same
families would. The writer exists because writing the text of the rebuilt per-GPU families
is a sizeable part of a pass at 1,000 nodes; ``generate_latest`` takes about 6.5 us a
sample, the writer 3 to 5 from a family's samples. A builder with thousands of series (the
per-GPU and per-node gauges) returns a :class:`GaugeRows`: an ordinary gauge family whose
text the writer takes from its rows (label values and value) instead of its samples, about
1.5 us a series, the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample, Timestamp
from prometheus_client.utils import floatToGoString

from sits_observe.analytics.row_changes import (
    ByContent,
    Fingerprint,
    Read,
    RowSpan,
    fingerprint,
    fingerprints,
)
from sits_observe.store import Store


class Key:
    """A signal's inputs as fingerprinted in one pass: the fingerprints of its spans and,
    for a read declared :class:`~sits_observe.analytics.row_changes.ByContent`, those of the
    rows it reads, taken only when asked (:meth:`content`) and then kept."""

    def __init__(
        self,
        spans: tuple[Fingerprint, ...],
        rows: Callable[[], tuple[Fingerprint, ...]] | None = None,
    ) -> None:
        self.spans = spans
        self._rows = rows
        self._content: tuple[Fingerprint, ...] | None = None
        self._asked = False

    def content(self) -> tuple[Fingerprint, ...] | None:
        """The rows' fingerprints (None: none declared, or their query failed: then no
        content is ever the same)."""
        if not self._asked and self._rows is not None:
            self._asked = True
            try:
                self._content = self._rows()
            except Exception:  # the builder reads the same rows and reports the error
                self._content = None
        return self._content

    def same_rows(self, last: Key) -> bool:
        """Whether the signal reads the same rows as at ``last``: the same span
        fingerprints, or, where they differ, the same fingerprints of the rows read."""
        if self.spans == last.spans:
            return True
        content = self.content()
        return content is not None and content == last.content()


#: A signal's inputs in one pass; None when they cannot be fingerprinted (undeclared, or a
#: fingerprint query failed): such a signal is always rebuilt.
Inputs = Key | None


class _Families:
    """A registry-shaped view of some families, for ``generate_latest``."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def render(families: Sequence[Metric]) -> bytes:
    """The Prometheus text (format 0.0.4) of ``families``, as ``generate_latest`` writes it."""
    return generate_latest(_Families(families))


#: Names ``generate_latest`` writes unchanged (the legacy Prometheus character sets).
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: The ``# TYPE`` of each family type in the text format, as ``generate_latest`` maps them.
_TEXT_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "gaugehistogram": "histogram",
    "histogram": "histogram",
    "summary": "summary",
    "unknown": "untyped",
}
#: OpenMetrics-only samples the text format moves into gauges after the family.
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")


class _Unusual(Exception):
    """A family :class:`TextWriter` leaves to ``generate_latest``."""


#: One series of a :class:`GaugeRows`: its label values (in the family's label order) and
#: its value.
Row = tuple[tuple[str, ...], float]


class GaugeRows(GaugeMetricFamily):
    """A gauge family given as rows, one per series: its label values in ``labels`` order
    and its value. Its ``samples`` are the ones ``add_metric`` would append for the same
    rows in the same order, so every reader of families (the registry, the alert rules)
    sees an ordinary gauge; :class:`TextWriter` writes its text from :attr:`rows`."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], rows: Iterable[Row]
    ) -> None:
        super().__init__(name, documentation, labels=labels)
        self.label_names: tuple[str, ...] = tuple(labels)
        self.rows: list[Row] = list(rows)
        names, label_names = self.name, self.label_names
        self.samples = [
            Sample(names, dict(zip(label_names, key, strict=True)), value, None)
            for key, value in self.rows
        ]

    def add_metric(
        self, labels: Sequence[str], value: float, timestamp: Timestamp | float | None = None
    ) -> None:
        """One more series, in :attr:`rows` and ``samples`` alike (rows carry no time)."""
        if timestamp is not None:
            raise TypeError("a GaugeRows series carries no timestamp; use GaugeMetricFamily")
        super().add_metric(labels, value)
        self.rows.append((tuple(labels), value))


class TextWriter:
    """Writes a family's text byte for byte as ``generate_latest`` does (it is checked
    against it in the tests), remembering each series' name-and-labels part for the next
    write of the family: a GPU's labels are escaped, sorted and joined once, not on every
    pass. Families with anything unusual (timestamps, exemplars, native histograms, names
    outside the legacy character set, info or stateset types) are written by
    ``generate_latest`` itself."""

    def __init__(self) -> None:
        self._series: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], str]] = {}
        self._rows: dict[str, dict[tuple[str, ...], str]] = {}

    def write(self, family: Metric) -> bytes:
        """The text of ``family``."""
        try:
            if isinstance(family, GaugeRows):
                return self._write_rows(family)
            return self._write(family)
        except _Unusual:
            return render([family])

    def _write_rows(self, family: GaugeRows) -> bytes:
        """The text of a :class:`GaugeRows` from its rows: what :meth:`_write` writes from
        its samples, without reading them (a series' text is remembered by its label
        values)."""
        name, names = family.name, family.label_names
        if not _METRIC_NAME.fullmatch(name) or not all(map(_LABEL_NAME.fullmatch, names)):
            raise _Unusual
        if len(set(names)) != len(names):  # a sample's labels are a dict: left to it
            raise _Unusual
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        known = self._rows.get(name, {})
        used: dict[tuple[str, ...], str] = {}
        # The text format sorts a series' labels by name: one order for the whole family.
        order = sorted(range(len(names)), key=names.__getitem__)
        heads = [(i, f'{names[i]}="') for i in order]
        out = [f"# HELP {name} {doc}\n# TYPE {name} gauge\n"]
        for key, value in family.rows:
            series = known.get(key)
            if series is None:
                series = _row_series(name, heads, key)
            used[key] = series
            out.append(f"{series} {floatToGoString(value)}\n")  # type: ignore[no-untyped-call]
        self._rows[name] = used
        return "".join(out).encode("utf-8")

    def _write(self, family: Metric) -> bytes:
        name, kind = family.name, _TEXT_TYPES.get(family.type)
        if kind is None or not _METRIC_NAME.fullmatch(name):
            raise _Unusual
        text_name = name + "_total" if family.type == "counter" else name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out = [f"# HELP {text_name} {doc}\n# TYPE {text_name} {kind}\n"]
        known = self._series.get(name, {})
        used: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        trailing: dict[str, list[str]] = {}
        for sample in family.samples:
            if sample.timestamp is not None or sample.exemplar or sample.native_histogram:
                raise _Unusual
            key = (sample.name, tuple(sample.labels.items()))
            series = known.get(key) or _series(sample.name, sample.labels)
            used[key] = series
            line = f"{series} {floatToGoString(sample.value)}\n"  # type: ignore[no-untyped-call]
            suffix = sample.name[len(name) :] if sample.name.startswith(name) else ""
            if suffix in _OM_SUFFIXES:
                trailing.setdefault(suffix, []).append(line)
            else:
                out.append(line)
        for suffix, lines in sorted(trailing.items()):
            out.append(f"# HELP {name}{suffix} {doc}\n# TYPE {name}{suffix} gauge\n")
            out.extend(lines)
        self._series[name] = used
        return "".join(out).encode("utf-8")


def _series(name: str, labels: dict[str, str]) -> str:
    """``name{label="value",...}``, labels sorted and values escaped as the text format
    wants."""
    if not _METRIC_NAME.fullmatch(name):
        raise _Unusual
    if not labels:
        return name
    parts = []
    for key, value in sorted(labels.items()):
        if not _LABEL_NAME.fullmatch(key):
            raise _Unusual
        escaped = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        parts.append(f'{key}="{escaped}"')
    return f"{name}{{{','.join(parts)}}}"


def _row_series(name: str, heads: list[tuple[int, str]], key: tuple[str, ...]) -> str:
    """:func:`_series` of one :class:`GaugeRows` row: ``heads`` holds each label's index in
    ``key`` and its ``name="`` text, in name order."""
    if not heads:
        return name
    parts = []
    for i, head in heads:
        value = key[i]
        if "\\" in value or "\n" in value or '"' in value:
            value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        parts.append(f'{head}{value}"')
    return f"{name}{{{','.join(parts)}}}"


def _same(a: Metric, b: Metric) -> bool:
    if isinstance(a, GaugeRows) and isinstance(b, GaugeRows):  # the rows make the samples
        return (a.name, a.documentation, a.label_names, a.rows) == (
            b.name,
            b.documentation,
            b.label_names,
            b.rows,
        )
    return (a.name, a.type, a.documentation, a.unit, a.samples) == (
        b.name,
        b.type,
        b.documentation,
        b.unit,
        b.samples,
    )


@dataclass(frozen=True)
class Built:
    """One signal's families, their texts (one per family) and the inputs they came from."""

    inputs: Inputs
    families: tuple[Metric, ...]
    texts: tuple[bytes, ...]


def _spans_of(reads: Sequence[Read]) -> Iterator[RowSpan]:
    for read in reads:
        yield from (read.spans if isinstance(read, ByContent) else (read,))


class PassFingerprints:
    """Fingerprints of one pass, each span read once however many signals read it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._seen: dict[RowSpan, Fingerprint] = {}

    def prefetch(self, spans: Sequence[Read]) -> None:
        """Read the fingerprints of ``spans`` together (one scan per table); when that
        fails, :meth:`of` reads them one by one and tells which signals cannot be."""
        try:
            self._seen.update(fingerprints(self._store, list(_spans_of(spans))))
        except Exception:  # a missing table: of() isolates it per signal
            return

    def of(self, reads: Sequence[Read]) -> Inputs:
        """The :class:`Key` of ``reads``; None when a span cannot be read (a missing table)."""
        out: list[Fingerprint] = []
        content: list[Callable[[], tuple[Fingerprint, ...]]] = []
        for read in reads:
            spans = read.spans if isinstance(read, ByContent) else (read,)
            if isinstance(read, ByContent):
                content.append(read.rows)
            for span in spans:
                if span not in self._seen:
                    try:
                        self._seen[span] = fingerprint(self._store, span)
                    except Exception:  # the builder reads the same table and reports it
                        return None
                out.append(self._seen[span])
        if not content:
            return Key(tuple(out))
        return Key(tuple(out), lambda: tuple(fp for rows in content for fp in rows()))


class SignalCache:
    """The latest successful build of every signal; ``reused`` / ``rebuilt`` count signals
    since the cache was made (a pass's share is the difference)."""

    def __init__(self) -> None:
        self._built: dict[str, Built] = {}
        self._writer = TextWriter()
        self.reused = 0
        self.rebuilt = 0

    def last(self, name: str) -> Built | None:
        """The latest build of ``name``, whatever its inputs (None before the first)."""
        return self._built.get(name)

    def get(self, name: str, inputs: Inputs) -> Built | None:
        """The last build of ``name`` when it read the same rows as ``inputs`` name (the same
        fingerprints, or the same rows where spans changed); None: rebuild."""
        last = self._built.get(name)
        if inputs is None or last is None or last.inputs is None:
            return None
        if not inputs.same_rows(last.inputs):
            return None
        if inputs.spans != last.inputs.spans:  # the same rows: the next pass compares these
            last = Built(inputs, last.families, last.texts)
            self._built[name] = last
        self.reused += 1
        return last

    def build(self, name: str, inputs: Inputs, make: Callable[[], list[Metric]]) -> Built:
        """Run ``make`` and keep its result with its text. When ``make`` raises, the last
        build is kept for its text only, never returned by :meth:`get` again."""
        last = self._built.get(name)
        if last is not None:
            self._built[name] = Built(None, last.families, last.texts)
        if inputs is not None:
            inputs.content()  # taken before the build reads: a later change is seen next pass
        families = tuple(make())
        self.rebuilt += 1
        pairs = () if last is None else zip(last.families, last.texts, strict=True)
        previous = {family.name: (family, text) for family, text in pairs}
        texts = []
        for family in families:
            kept = previous.get(family.name)
            texts.append(kept[1] if kept and _same(kept[0], family) else self._writer.write(family))
        built = Built(inputs, families, tuple(texts))
        self._built[name] = built
        return built
