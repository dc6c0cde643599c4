"""Noise isolation (SPEC "Baselines and noise": 60 s sliding window, samples further than 2.5
sigma from the window mean are excluded and counted) and run comparisons."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from sits_observe.analytics.baselines import (
    EXCLUDED,
    KEPT,
    UNCHECKED,
    baselines,
    compare_runs,
    flag_noise,
    load_metric,
)
from sits_observe.analytics.settings import BaselineSettings
from sits_observe.errors import UnknownNameError
from sits_observe.store import Store

S = BaselineSettings()
T0 = datetime(2026, 1, 1)


def series(values: list[float | None], *, step_s: float = 1.0, key: str = "m") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=i * step_s) for i in range(len(values))],
            "model": [key] * len(values),
            "latency_s": values,
        },
        schema={"ts": pl.Datetime("us"), "model": pl.String, "latency_s": pl.Float64},
    )


def test_defaults_are_the_specs() -> None:
    assert (S.sliding_window_s, S.sigma_k) == (60.0, 2.5)


def test_known_spikes_are_excluded_and_counted() -> None:
    # 1 Hz for 120 s, alternating 10 / 12, with spikes at t = 30 s (100) and t = 90 s (-50).
    values: list[float | None] = [10.0 if i % 2 == 0 else 12.0 for i in range(120)]
    values[30], values[90] = 100.0, -50.0
    (b,) = baselines(series(values), "latency_s", ["model"], S)
    assert b.samples_excluded == 2
    assert b.samples_unchecked == 5  # t = 0..4 have fewer than 5 earlier samples
    assert b.samples_kept == 118
    assert b.samples_null == 0
    kept = np.array([v for i, v in enumerate(values) if i not in (30, 90)], dtype=float)
    assert b.mean == pytest.approx(kept.mean())
    assert b.p50 == pytest.approx(float(np.quantile(kept, 0.5)))
    assert b.p95 == pytest.approx(float(np.quantile(kept, 0.95)))
    assert b.exclusion_reason == "outside 2.5 sigma of the 60 s window mean"
    assert (b.first_ts, b.last_ts) == (T0, T0 + timedelta(seconds=119))
    assert b.group == (("model", "m"),)


def test_a_spike_cannot_hide_in_its_own_window() -> None:
    # Earlier window: 10, 12 x3 -> mean 11, sample sigma 1.095, 2.5 sigma = 2.74: 20 is noise.
    # Had the spike been part of its own window (mean 12.29, sigma 3.45, 2.5 sigma = 8.6) its
    # deviation of 7.7 would have passed.
    flagged = flag_noise(series([10, 12, 10, 12, 10, 12, 20]), "latency_s", ["model"], S)
    last = flagged.row(-1, named=True)
    assert last["window_samples"] == 6
    assert last["window_mean"] == pytest.approx(11.0)
    assert last["window_std"] == pytest.approx(float(np.std([10, 12] * 3, ddof=1)))
    assert last["status"] == EXCLUDED


def test_exactly_k_sigma_is_kept() -> None:
    # A flat window (sigma 0) with a floor of 1.0: 2.5 sigma = 2.5 exactly.
    settings = BaselineSettings(sigma_floor=1.0)
    at_edge = flag_noise(series([1.0] * 5 + [3.5]), "latency_s", ["model"], settings)
    assert at_edge.get_column("status").to_list()[-1] == KEPT
    beyond = flag_noise(series([1.0] * 5 + [3.5000001]), "latency_s", ["model"], settings)
    assert beyond.get_column("status").to_list()[-1] == EXCLUDED
    # Without a floor the spec's literal rule makes any change on a flat window noise.
    literal = flag_noise(series([1.0] * 5 + [1.001]), "latency_s", ["model"], S)
    assert literal.get_column("status").to_list()[-1] == EXCLUDED


def test_the_window_is_60_seconds_of_time_not_a_row_count() -> None:
    # Samples every 20 s: a window holds the 3 samples of [t - 60 s, t).
    flagged = flag_noise(series([1.0] * 8, step_s=20), "latency_s", ["model"], S)
    assert flagged.get_column("window_samples").to_list() == [0, 1, 2, 3, 3, 3, 3, 3]
    # After a gap longer than the window, the window is empty again: unchecked, kept.
    gap = pl.concat(
        [
            series([1.0] * 6),
            series([50.0]).with_columns(pl.col("ts") + timedelta(seconds=200)),
        ]
    )
    flagged = flag_noise(gap, "latency_s", ["model"], S)
    assert flagged.row(-1, named=True)["window_samples"] == 0
    assert flagged.get_column("status").to_list()[-1] == UNCHECKED


def test_series_are_judged_separately_and_nulls_counted() -> None:
    a = series([10, 12, 10, 12, 10, 12, 10, 12], key="a")
    b = series([1000, 1001, 1000, 1001, 1000, 1001, 1000, None], key="b")
    result = {r.group: r for r in baselines(pl.concat([b, a]), "latency_s", ["model"], S)}
    assert result[(("model", "a"),)].samples_excluded == 0
    assert result[(("model", "b"),)].samples_null == 1
    assert result[(("model", "b"),)].samples_kept == 7
    assert result[(("model", "b"),)].mean == pytest.approx(np.mean([1000, 1001] * 3 + [1000]))


def test_only_nulls_still_reported() -> None:
    (b,) = baselines(series([None, None]), "latency_s", ["model"], S)
    assert (b.samples_kept, b.samples_null, b.mean) == (0, 2, None)


def test_compare_runs_side_by_side() -> None:
    first = series([10, 12] * 10)
    second = series([20, 24] * 10)
    result = compare_runs([("all-on", first), ("no-cache", second)], "latency_s", ["model"], S)
    assert [b.run for b in result] == ["all-on", "no-cache"]
    assert result[0].mean_change_ratio is None
    assert result[1].mean_change_ratio == pytest.approx(1.0)  # twice as slow


def test_empty_frame_gives_nothing() -> None:
    assert baselines(series([]), "latency_s", ["model"], S) == ()


def test_load_metric_checks_names_and_drops_failed_requests() -> None:
    with Store.open(":memory:") as store:
        store.append(
            "requests",
            pa.Table.from_pylist(
                [
                    {"ts": T0, "model": "m", "latency_s": 1.0, "ok": True},
                    {"ts": T0, "model": "m", "latency_s": 0.01, "ok": False},
                    {"ts": T0 + timedelta(seconds=10), "model": "m", "latency_s": 2.0},
                ]
            ),
        )
        frame = load_metric(store, "requests", "latency_s", ["model"])
        assert sorted(frame.get_column("latency_s").to_list()) == [1.0, 2.0]
        assert load_metric(store, "requests", "latency_s", [], since=T0 + timedelta(seconds=5))[
            "latency_s"
        ].to_list() == [2.0]
        with pytest.raises(UnknownNameError, match="no numeric column 'model'"):
            load_metric(store, "requests", "model", [])
        with pytest.raises(UnknownNameError, match="no key column 'gpu'"):
            load_metric(store, "requests", "latency_s", ["gpu"])
