"""The exporter's text writer writes what ``prometheus_client.generate_latest`` writes, and a
:class:`GaugeRows` (a gauge given as rows, written from them) is the gauge ``add_metric``
makes of the same rows: the same samples and the same text."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
    UnknownMetricFamily,
)

from sits_observe.surfaces.service.exporter.cache import GaugeRows, SignalCache, TextWriter, render

LABEL_VALUES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12
) | st.sampled_from(['a"b', "a\\b", "a\nb", "\\n", '""', "GPU-0", "NVIDIA H100 80GB HBM3"])
VALUES = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e22, 123456789.0, 1e-7, 5e-324]
)


def written(family: Metric) -> bytes:
    """The writer's text, checked to be the same on a second write (from its series cache)."""
    writer = TextWriter()
    first = writer.write(family)
    assert writer.write(family) == first
    return first


@given(st.lists(st.tuples(LABEL_VALUES, LABEL_VALUES, VALUES), max_size=8), st.text(max_size=20))
def test_gauges_and_counters_match_generate_latest(
    rows: list[tuple[str, str, float]], doc: str
) -> None:
    gauge = GaugeMetricFamily("sits_test_ratio", doc, labels=("UUID", "Hostname"))
    counter = CounterMetricFamily("sits_test", doc, labels=("b", "a"))
    for uuid, host, value in rows:
        gauge.add_metric((uuid, host), value)
        counter.add_metric((uuid, host), abs(value) if not math.isnan(value) else 0.0)
    assert written(gauge) == render([gauge])
    assert written(counter) == render([counter])


def test_histograms_summaries_and_unlabelled_families_match() -> None:
    histogram = GaugeHistogramMetricFamily("sits_test_seconds", "h", labels=("model",))
    histogram.add_metric(("m",), [("0.1", 3.0), ("+Inf", 5.0)], 2.5)
    classic = HistogramMetricFamily("sits_test_classic_seconds", "h", labels=("model",))
    classic.add_metric(("m",), [("0.1", 3.0), ("+Inf", 5.0)], 2.5)
    summary = SummaryMetricFamily("sits_test_summary_seconds", "s", count_value=3, sum_value=1.5)
    untyped = UnknownMetricFamily("sits_test_untyped", "u", value=7.0)
    plain = GaugeMetricFamily("sits_test_plain", "line one\nline \\two", value=math.nan)
    counter = CounterMetricFamily("sits_test_started", "c", value=1.0, created=1700000000.0)
    for family in (histogram, classic, summary, untyped, plain, counter):
        assert written(family) == render([family]), family.name


def test_unusual_families_are_left_to_generate_latest() -> None:
    info = InfoMetricFamily("sits_test_build", "i", value={"version": "1"})
    stamped = GaugeMetricFamily("sits_test_stamped", "t", labels=("a",))
    stamped.add_metric(("x",), 1.0, timestamp=1700000000.5)
    utf8 = GaugeMetricFamily("sits.test.dotted", "d", value=1.0)
    label = GaugeMetricFamily("sits_test_label", "l", labels=("not.legacy",))
    label.add_metric(("x",), 1.0)
    for family in (info, stamped, utf8, label):
        assert written(family) == render([family]), family.name


def test_a_changed_value_is_written_again_with_its_cached_labels() -> None:
    writer = TextWriter()
    first = GaugeMetricFamily("sits_test_ratio", "r", labels=("UUID",))
    first.add_metric(("GPU-0",), 0.25)
    second = GaugeMetricFamily("sits_test_ratio", "r", labels=("UUID",))
    second.add_metric(("GPU-0",), 0.5)
    second.add_metric(("GPU-1",), 0.75)
    assert writer.write(first) == render([first])
    assert writer.write(second) == render([second])


def _gauge(
    name: str, names: tuple[str, ...], rows: Sequence[tuple[tuple[str, ...], float]], doc: str = "d"
) -> Metric:
    gauge = GaugeMetricFamily(name, doc, labels=names)
    for key, value in rows:
        gauge.add_metric(key, value)
    return gauge


@given(st.lists(st.tuples(LABEL_VALUES, LABEL_VALUES, VALUES), max_size=8), st.text(max_size=20))
def test_gauge_rows_are_the_gauge_add_metric_makes(
    rows: list[tuple[str, str, float]], doc: str
) -> None:
    keyed = [((uuid, host), value) for uuid, host, value in rows]
    fast = GaugeRows("sits_test_ratio", doc, ("UUID", "Hostname"), keyed)
    slow = GaugeMetricFamily("sits_test_ratio", doc, labels=("UUID", "Hostname"))
    for key, value in keyed:
        slow.add_metric(key, value)
    assert (fast.name, fast.type, fast.documentation) == (slow.name, slow.type, slow.documentation)
    assert repr(fast.samples) == repr(slow.samples)  # repr: NaN values compare unequal
    assert written(fast) == render([slow]) == render([fast])
    # The writer's two paths on one writer, in turn: neither cache feeds the other wrongly.
    writer = TextWriter()
    for family in (fast, slow, fast):
        assert writer.write(family) == render([slow])


def test_gauge_rows_rewritten_with_changed_values_rows_and_unusual_names() -> None:
    writer = TextWriter()
    names = ("Hostname", "gpu", "UUID", "modelName")
    first = [((f"node-{g // 8}", str(g % 8), f"GPU-{g}", 'H100 "SXM"'), g * 1e9) for g in range(20)]
    second = [(key, value / 3) for key, value in first[5:]] + [(("n", "0", "GPU-x", "A10"), 1.0)]
    for rows in (first, second, first, []):
        doc = "a \\ b\nc"  # escaped in the text
        family = GaugeRows("sits_test_bytes", doc, names, rows)
        assert writer.write(family) == render([_gauge("sits_test_bytes", names, rows, doc)])
    for name, labels, key in (
        ("sits.dotted", ("a",), ("x",)),
        ("sits_test_label", ("not.legacy",), ("x",)),
        ("sits_test_twice", ("a", "a"), ("x", "y")),  # one label in a sample's dict
        ("sits_test_none", (), ()),
    ):
        odd = GaugeRows(name, "d", labels, [(key, 1.0)])
        assert writer.write(odd) == render([_gauge(name, labels, [(key, 1.0)])])
    more = GaugeRows("sits_test_ratio", "d", ("UUID",), [(("GPU-0",), 0.5)])
    more.add_metric(("GPU-1",), 0.75)
    assert more.rows == [(("GPU-0",), 0.5), (("GPU-1",), 0.75)]
    assert writer.write(more) == render([_gauge("sits_test_ratio", ("UUID",), more.rows)])


def test_a_rebuilt_gauge_rows_equal_to_the_last_keeps_its_text() -> None:
    cache = SignalCache()
    rows = [(("GPU-0",), 0.5), (("GPU-1",), 0.25)]
    first = cache.build("s", None, lambda: [GaugeRows("sits_test_ratio", "r", ("UUID",), rows)])
    same = cache.build("s", None, lambda: [GaugeRows("sits_test_ratio", "r", ("UUID",), rows)])
    assert same.texts[0] is first.texts[0]  # kept, not written again
    moved = [(("GPU-0",), 0.5), (("GPU-1",), 0.5)]
    changed = cache.build("s", None, lambda: [GaugeRows("sits_test_ratio", "r", ("UUID",), moved)])
    assert changed.texts[0] != first.texts[0]
    assert changed.texts[0] == render([_gauge("sits_test_ratio", ("UUID",), moved, "r")])
