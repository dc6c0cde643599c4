"""The exporter's fast paths equal the slow ones: the SMF families from ``latest_smf`` equal
those of the ``smf`` report over the same window, and ``labels_of`` equals ``label`` of every
value.

The reference below is the ``smf`` report (``sits-observe smf --by gpu`` / ``--by
container``) over the pass's window: it aligns the whole window, then its GPU and container
summaries' ``latest_smf`` are grouped for labels as the builder groups them. Both run on the
same DuckDB file at the same time; windows whose end falls inside the fleet's samples check
that samples stamped after the pass's time count in neither.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from statistics import fmean

import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.smf import SmfGrouping
from sits_observe.errors import NoDataError
from sits_observe.reports.smf import SmfQuery
from sits_observe.reports.smf import build as smf_report
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.settings import ExporterSettings
from sits_observe.surfaces.service.exporter.signals.cluster import smf
from sits_observe.surfaces.service.exporter.signals.requests import (
    PassInputs,
    finite,
    label,
    labels_of,
)
from tests.unit.analytics.test_smf_latest import T0, fleet

Values = dict[str, dict[tuple[str, ...], float]]


@pytest.fixture(params=[0, 5])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    inputs = fleet(request.param, nodes=8)
    with Store.open(tmp_path / "smf.duckdb") as s:
        s.append("gpu_samples", inputs.gpu_samples)
        s.append("container_samples", inputs.container_samples)
        s.append("gpu_processes", inputs.gpu_processes)
        yield s


def report_rows(p: PassInputs, by: SmfGrouping) -> list[dict[str, object]]:
    """The main table's rows of the ``smf`` report over the pass's window (none when the
    report finds no cgroup sample in it)."""
    query = SmfQuery.model_validate({**p.settings.smf.model_dump(), "by": by})
    try:
        report = smf_report(p.store, p.span, query)
    except NoDataError:
        return []
    rows: list[dict[str, object]] = report.main.rows.to_pylist()
    return rows


def whole_window(p: PassInputs) -> Values:
    """Per family, the values of the ``smf`` report's summaries (by label set)."""
    names = p.gpu_names()
    gpus: dict[tuple[str, ...], float] = {}
    per_node: dict[str, list[float]] = defaultdict(list)
    for g in report_rows(p, SmfGrouping.gpu):
        if (value := finite(g["latest_smf"])) is not None:
            gpus[names.labels(label(g["node"]), label(g["gpu_uuid"]))] = value
            per_node[label(g["node"])].append(value)
    per_namespace: dict[str, list[float]] = defaultdict(list)
    for c in report_rows(p, SmfGrouping.container):
        if (value := finite(c["latest_smf"])) is not None:
            per_namespace[label(c["namespace"])].append(value)
    return {
        "sits_smf_ratio": gpus,
        "sits_smf_node_ratio": {(n,): fmean(v) for n, v in per_node.items()},
        "sits_smf_namespace_ratio": {(n,): fmean(v) for n, v in per_namespace.items()},
    }


@pytest.mark.parametrize("seconds", [100, 160, 400])  # window: fleet start, end, past it
def test_smf_families_equal_the_whole_window_path(store: Store, seconds: int) -> None:
    settings = ExporterSettings(window_s=120)
    p = PassInputs(store, settings, T0 + timedelta(seconds=seconds))
    families = {f.name: f for f in smf(p)}
    expected = whole_window(p)
    assert families.keys() == expected.keys()
    if seconds < 400:
        assert expected["sits_smf_ratio"]  # the window holds aligned samples
    for name, values in expected.items():
        got = {tuple(s.labels.values()): s.value for s in families[name].samples}
        assert got.keys() == values.keys(), name
        for key, value in values.items():
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (name, key)


@pytest.mark.parametrize(
    "values",
    [["a", None, "", "GPU-1", "unknown", " "], [0, 3, None, 12], [None, None], []],
)
def test_labels_of_is_label_of_each_value(values: list[object]) -> None:
    column = pa.chunked_array([pa.array(values)])
    assert labels_of(column) == [label(v) for v in values]
    assert labels_of(column, "none") == ["none" if v in (None, "") else str(v) for v in values]
