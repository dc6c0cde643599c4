"""The range rules: every numeric column has one, nothing bad survives, counts add up."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.domain.dcgm_fields import FIELDS
from sits_observe.domain.ranges import EARLIEST_TS, RULES, bound_of, check_rows, value_problem
from sits_observe.domain.tables import TABLES, conform

LATEST = datetime(2026, 11, 1, 12, 5)
T0 = datetime(2026, 11, 1, 12, 0)
AGENT_TABLES = (
    "gpu_samples",
    "container_samples",
    "gpu_processes",
    "requests",
    "server_windows",
    "collector_drops",
)


@pytest.mark.parametrize("name", AGENT_TABLES)
def test_every_numeric_column_of_an_agent_table_has_a_rule(name: str) -> None:
    numeric = [
        f.name
        for f in TABLES[name].schema
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    ruled = {b.column for b in RULES[name]}
    assert [c for c in numeric if c not in ruled] == []
    assert bound_of(name, "ts") is not None and bound_of(name, "ts").required  # type: ignore[union-attr]


def test_gpu_bounds_are_the_dcgm_collectors_in_column_units() -> None:
    for spec in FIELDS:
        bound = bound_of("gpu_samples", spec.column)
        assert bound is not None
        assert (bound.low, bound.high) == (spec.low * spec.scale, spec.high * spec.scale)
    ratio = bound_of("gpu_samples", "gpu_util_ratio")
    assert ratio is not None and (ratio.low, ratio.high) == (0.0, 1.0)


def test_scalar_check_names_the_problem() -> None:
    ratio = bound_of("gpu_samples", "gpu_util_ratio")
    temp = bound_of("gpu_samples", "gpu_temp_c")
    assert ratio is not None and temp is not None
    assert value_problem(ratio, math.nan) == "non_finite"
    assert value_problem(ratio, -0.1) == "negative"
    assert value_problem(ratio, 55.0) == "above_max"
    assert value_problem(temp, -100.0) == "below_min"
    assert value_problem(ratio, 1.0) is None


def test_timestamps_outside_the_window_drop_the_row() -> None:
    stamps = [
        T0,
        None,
        LATEST + timedelta(microseconds=1),
        LATEST,
        EARLIEST_TS,
        datetime(1970, 1, 1),
    ]
    table = conform("gpu_samples", pa.table({"ts": pa.array(stamps, pa.timestamp("us"))}))
    checked = check_rows("gpu_samples", table, latest=LATEST)
    assert checked.table.column("ts").to_pylist() == [T0, LATEST, EARLIEST_TS]
    assert checked.dropped == {
        "gpu_samples.ts:missing": 1,
        "gpu_samples.ts:future": 1,
        "gpu_samples.ts:too_old": 1,
    }


def test_a_row_is_counted_under_its_first_broken_required_rule_only() -> None:
    table = conform(
        "requests",
        pa.table(
            {
                "ts": pa.array([None, T0], pa.timestamp("us")),
                "model": [None, None],
                "latency_s": [math.nan, -1.0],
                "ttft_s": [-1.0, -1.0],
            }
        ),
    )
    checked = check_rows("requests", table, latest=LATEST)
    assert checked.table.num_rows == 0
    assert checked.dropped == {"requests.ts:missing": 1, "requests.model:missing": 1}


values = st.floats(allow_nan=True, allow_infinity=True) | st.none()


@given(
    util=st.lists(values, min_size=1, max_size=30),
    data=st.data(),
)
def test_nothing_out_of_range_survives_and_the_counts_add_up(
    util: list[float | None], data: st.DataObject
) -> None:
    n = len(util)
    latency = data.draw(st.lists(values, min_size=n, max_size=n))
    ttft = data.draw(st.lists(values, min_size=n, max_size=n))
    gpu = conform(
        "gpu_samples",
        pa.table({"ts": pa.array([T0] * n, pa.timestamp("us")), "gpu_util_ratio": util}),
    )
    checked = check_rows("gpu_samples", gpu, latest=LATEST)
    kept = [v for v in checked.table.column("gpu_util_ratio").to_pylist() if v is not None]
    assert checked.table.num_rows == n  # an optional value never drops its row
    assert all(0.0 <= v <= 1.0 for v in kept)
    assert sum(checked.dropped.values()) == sum(
        1 for v in util if v is not None and not 0.0 <= v <= 1.0
    )
    requests = conform(
        "requests",
        pa.table(
            {
                "ts": pa.array([T0] * n, pa.timestamp("us")),
                "model": ["m"] * n,
                "latency_s": latency,
                "ttft_s": ttft,
            }
        ),
    )
    checked = check_rows("requests", requests, latest=LATEST)
    good = [v is not None and math.isfinite(v) and v >= 0 for v in latency]
    assert checked.table.num_rows == sum(good)
    rows_dropped = sum(c for k, c in checked.dropped.items() if k.startswith("requests.latency"))
    assert rows_dropped == n - sum(good)
    ttft_kept = [v for v in checked.table.column("ttft_s").to_pylist() if v is not None]
    assert all(math.isfinite(v) and v >= 0 for v in ttft_kept)
