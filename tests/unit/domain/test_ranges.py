"""The range rules: every numeric column has one, nothing bad survives, counts add up."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.domain.ranges import (
    EARLIEST_TS,
    MAX_FUTURE_SKEW_S,
    RULES,
    bound_of,
    check_rows,
    screen_tables,
    value_problem,
)
from sits_observe.domain.schema.dcgm_fields import FIELDS
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


def test_a_batch_that_breaks_no_rule_is_passed_through_untouched() -> None:
    n = 50
    table = conform(
        "gpu_samples",
        pa.table(
            {
                "ts": pa.array([T0, LATEST, EARLIEST_TS, None][:3] * n, pa.timestamp("us")),
                "gpu_index": pa.array([0, 1023, None] * n, pa.int16()),
                "gpu_util_ratio": [0.0, 1.0, None] * n,
            }
        ),
    )
    checked = check_rows("gpu_samples", table, latest=LATEST)
    assert checked.table is table
    assert checked.dropped == {}


def _reference(
    name: str, rows: list[dict[str, object]]
) -> tuple[list[dict[str, object]], dict[str, int]]:
    """check_rows as a row-by-row loop over value_problem: the rows kept, the counts."""
    dropped: dict[str, int] = {}
    kept = []
    for original in rows:
        row = dict(original)
        why = None
        for bound in (b for b in RULES[name] if b.required):
            value = row[bound.column]
            if value is None:
                why = "missing"
            elif isinstance(value, datetime):
                why = "future" if value > LATEST else "too_old" if value < EARLIEST_TS else None
            else:
                why = value_problem(bound, float(value))  # type: ignore[arg-type]
            if why is not None:
                key = f"{name}.{bound.column}:{why}"
                dropped[key] = dropped.get(key, 0) + 1
                break
        if why is not None:
            continue
        for bound in (b for b in RULES[name] if not b.required and b.column in row):
            value = row[bound.column]
            if value is None:
                continue
            problem = value_problem(bound, float(value))  # type: ignore[arg-type]
            if problem is not None:
                key = f"{name}.{bound.column}:{problem}"
                dropped[key] = dropped.get(key, 0) + 1
                row[bound.column] = None
        kept.append(row)
    return kept, dropped


# Mostly values that fit, so that whole columns often break no rule (the fast path) and
# sometimes one value does not (the full check).
ratios = st.floats(0.0, 1.0) | st.none() | st.sampled_from([math.nan, math.inf, -0.5, 1.5])
indexes = st.integers(0, 1023) | st.none() | st.sampled_from([-1, 1024, 32767, -32768])
stamps = st.sampled_from([T0, LATEST]) | st.sampled_from(
    [None, LATEST + timedelta(microseconds=1), datetime(1999, 12, 31), EARLIEST_TS]
)
# Past 2**53 too: an int64 column is compared with its bounds as integers (a float bound
# would make Arrow cast the column to double, which it refuses to round).
counts = st.integers(0, 2**53) | st.none() | st.sampled_from([-1, -(2**53), -(2**62), 2**63 - 1])


@given(data=st.data(), n=st.integers(0, 12))
def test_check_rows_agrees_with_a_row_by_row_loop(data: st.DataObject, n: int) -> None:
    def column(strategy: st.SearchStrategy[object]) -> list[object]:
        return data.draw(st.lists(strategy, min_size=n, max_size=n))

    gpu = {
        "ts": column(stamps),
        "gpu_index": column(indexes),
        "gpu_util_ratio": column(ratios),
        "gpu_temp_c": column(ratios | st.floats(-1e300, 1e300)),
    }
    drops = {"ts": column(stamps), "count": column(counts)}
    types = {"ts": pa.timestamp("us"), "gpu_index": pa.int16(), "count": pa.int64()}
    for name, cols in (("gpu_samples", gpu), ("collector_drops", drops)):
        arrays = {c: pa.array(v, types.get(c, pa.float64())) for c, v in cols.items()}
        table = conform(name, pa.table(arrays))
        checked = check_rows(name, table, latest=LATEST)
        rows = [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]
        kept, dropped = _reference(name, rows)
        assert checked.table.select(list(cols)).to_pylist() == kept
        assert dict(checked.dropped) == dropped


def test_screen_tables_drops_future_and_too_old_rows_of_every_table_and_records_why() -> None:
    """The one screening every ingest path runs (the service and each ``ingest`` command):
    ``ts`` past ``now + max_future_skew_s`` is ``ts:future``, before 2000 ``ts:too_old``, and
    :meth:`Screened.batch` adds one ``collector_drops`` row per reason, collector ``ingest``."""
    now = T0
    stamps = [now + timedelta(seconds=299), now + timedelta(seconds=301), datetime(2100, 1, 1)]
    requests = conform(
        "requests",
        pa.table(
            {
                "ts": [*stamps, datetime(1999, 12, 31)],
                "model": ["m"] * 4,
                "latency_s": [0.1] * 4,
            }
        ),
    )
    drops = conform(
        "collector_drops",
        pa.table({"ts": [now], "collector": ["request_log"], "reason": ["x"], "count": [1]}),
    )
    screened = screen_tables({"requests": requests, "collector_drops": drops}, now=now)
    assert screened.tables["requests"].column("ts").to_pylist() == [stamps[0]]
    assert screened.dropped == {"requests.ts:future": 2, "requests.ts:too_old": 1}
    batch = screened.batch(at=now, node="n1")
    rows = batch["collector_drops"].to_pylist()
    assert [(r["collector"], r["reason"], r["count"], r["node"]) for r in rows] == [
        ("request_log", "x", 1, None),
        ("ingest", "requests.ts:future", 2, "n1"),
        ("ingest", "requests.ts:too_old", 1, "n1"),
    ]
    wider = screen_tables({"requests": requests}, now=now, max_future_skew_s=3600)
    assert wider.dropped == {"requests.ts:future": 1, "requests.ts:too_old": 1}  # 2100
    assert screen_tables({"requests": requests.slice(0, 1)}, now=now).batch(at=now, node=None) == {
        "requests": requests.slice(0, 1)
    }


def test_the_service_default_skew_is_the_ingest_commands() -> None:
    from sits_observe.surfaces.service.settings import ServiceSettings

    assert ServiceSettings.model_fields["max_future_skew_s"].default == MAX_FUTURE_SKEW_S
