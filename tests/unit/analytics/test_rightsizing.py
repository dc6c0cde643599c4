"""The VPA recommender's maths on GPU memory peaks, against hand-computed histograms.

Bucket starts with VPA's memory options (first bucket 10 MB, 5 % growth), by hand:
start(1) = 1e7, start(2) = 1e7 x (1.05^2 - 1) / 0.05 = 2.05e7,
start(3) = 1e7 x (1.05^3 - 1) / 0.05 = 3.1525e7. A percentile answers its bucket's END.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sits_observe.analytics.rightsizing.inputs import workload_memory
from sits_observe.analytics.rightsizing.memory import (
    BucketScheme,
    RightsizingSettings,
    interval_peaks,
    recommend_series,
    recommendations,
    weighted_percentiles,
)
from sits_observe.store import Store

DEFAULTS = RightsizingSettings()
B2_START, B3_START = 2.05e7, 3.1525e7
HALF_LIFE_S = DEFAULTS.half_life_s


def peaks(values: list[float], at_s: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"w": ["a"] * len(values), "peak_bytes": values, "at_s": at_s})


def answers(frame: pl.DataFrame, *quantiles: float) -> list[float]:
    out = weighted_percentiles(frame, ["w"], quantiles, DEFAULTS)
    return [float(out.get_column(f"q{i}")[0]) for i in range(len(quantiles))]


def test_bucket_scheme_is_vpas_memory_histogram() -> None:
    scheme = BucketScheme.of(DEFAULTS)
    # ceil(log_1.05(1e12 x 0.05 / 1e7 + 1)) + 1 = ceil(174.6) + 1
    assert scheme.count == 176
    starts = scheme.start(np.array([0, 1, 2, 3], dtype=np.int64))
    np.testing.assert_allclose(starts, [0.0, 1e7, B2_START, B3_START])
    found = scheme.find(np.array([5e6, 1.5e7, 2.5e7, 3.0e7, 1e13]))
    assert found.tolist() == [0, 1, 2, 2, 175]


def test_percentile_walks_to_the_first_bucket_reaching_the_share() -> None:
    """Equal weights 1, 1, 1 in buckets 1, 2, 2: P30 needs 0.9 (bucket 1 holds 1), P50 needs
    1.5 (bucket 2); each answers the end of its bucket."""
    frame = peaks([1.5e7, 2.5e7, 3.0e7], [100.0, 100.0, 100.0])
    assert answers(frame, 0.3, 0.5, 1.0) == pytest.approx([B2_START, B3_START, B3_START])


def test_decay_halves_the_weight_of_a_peak_one_half_life_older() -> None:
    """Old peak 1.5e7 weighs 0.5, new 2.5e7 weighs 1, total 1.5. P40 needs 0.6: bucket 1
    (0.5) falls short, so the answer is bucket 2's end; without decay it would be bucket 1's."""
    decayed = peaks([1.5e7, 2.5e7], [0.0, HALF_LIFE_S])
    assert answers(decayed, 0.3, 0.4) == pytest.approx([B2_START, B3_START])
    flat = peaks([1.5e7, 2.5e7], [HALF_LIFE_S, HALF_LIFE_S])
    assert answers(flat, 0.4) == pytest.approx([B2_START])


def test_peaks_are_per_interval_on_epoch_multiples() -> None:
    """850 s and 950 s are 100 s apart but in the intervals [0, 900) and [900, 1800)."""
    frame = pl.DataFrame(
        {
            "w": ["a"] * 4,
            "series": ["p"] * 4,
            "ts_s": [50.0, 850.0, 950.0, 1000.0],
            "fb_used_bytes": [1.5e7, 1.9e7, 1.0e7, 1.1e7],
        }
    )
    out = interval_peaks(frame, ["w"], 900.0).sort("at_s")
    assert out.get_column("peak_bytes").to_list() == [1.9e7, 1.1e7]
    assert out.get_column("at_s").to_list() == [900.0, 1800.0]
    assert out.get_column("points").to_list() == [2, 2]


def test_target_bounds_and_confidence_by_hand() -> None:
    """200 samples a minute apart at 3.0e7 bytes: every percentile answers bucket 2's end.
    History 199 min = 11,940 s; confidence = min(11940 / 86400, 200 / 1440) days."""
    ts = np.arange(200) * 60.0
    rec = recommend_series(ts, np.full(200, 3.0e7), DEFAULTS)
    confidence = min(11_940 / 86_400, 200 / 1_440)
    assert rec.confidence_days == pytest.approx(confidence)
    assert rec.target_bytes == math.ceil(B3_START * 1.15)
    assert rec.upper_bytes == math.ceil(B3_START * 1.15 * (1 + 1 / confidence))
    assert rec.lower_bytes == math.ceil(B3_START * 1.15 * (1 + 0.001 / confidence) ** -2)
    assert (rec.points, rec.series, rec.peaks) == (200, 1, 14)  # 199 min / 15 min -> 14
    assert rec.enough_data and not rec.capped
    assert "P95 of 14 peaks" in rec.reason and "confidence 0.14 day(s)" in rec.reason


def test_short_history_widens_the_bounds_not_the_target() -> None:
    short = recommend_series(np.arange(200) * 60.0, np.full(200, 3.0e7), DEFAULTS)
    long = recommend_series(np.arange(2_000) * 60.0, np.full(2_000, 3.0e7), DEFAULTS)
    assert short.target_bytes == long.target_bytes
    assert short.upper_bytes is not None and long.upper_bytes is not None
    assert short.upper_bytes > 3 * long.upper_bytes / 2


@pytest.mark.parametrize(
    ("count", "step_s", "why"),
    [(19, 60.0, "19 samples"), (200, 0.25, "200 samples over 49.75 s")],
)
def test_not_enough_data_gives_no_proposal(count: int, step_s: float, why: str) -> None:
    rec = recommend_series(np.arange(count) * step_s, np.full(count, 3.0e7), DEFAULTS)
    assert rec.target_bytes is None and rec.upper_bytes is None and not rec.enough_data
    assert rec.reason.startswith("not enough data") and why in rec.reason
    assert "needs >= 20 samples and >= 60 s" in rec.reason


def test_no_value_exceeds_the_gpu() -> None:
    rec = recommend_series(
        np.arange(300) * 60.0, np.full(300, 5.0e10), DEFAULTS, max_allowed_bytes=4.8e10
    )
    assert rec.target_bytes == rec.upper_bytes == 48_000_000_000
    assert rec.lower_bytes is not None and rec.lower_bytes <= 48_000_000_000
    assert rec.capped and "capped at the GPU's 48000000000 bytes" in rec.reason


def test_a_workload_pools_its_pods_into_one_histogram() -> None:
    """Two pods of ``web`` (1e9 and 3e9 bytes) share one histogram; ``batch`` has its own."""
    rows = []
    for pod, workload, used in (
        ("web-1", "web", 1e9),
        ("web-2", "web", 3e9),
        ("b-1", "batch", 2e9),
    ):
        rows += [
            {"workload": workload, "series": pod, "ts_s": 60.0 * i, "fb_used_bytes": used}
            for i in range(150)
        ]
    frame = pl.DataFrame(rows)
    out = {r.key: r for r in recommendations(frame, DEFAULTS, by=["workload"])}
    assert set(out) == {("batch",), ("web",)}
    web = out[("web",)]
    assert (web.series, web.points, web.peak_bytes) == (2, 300, 3_000_000_000)
    scheme = BucketScheme.of(DEFAULTS)
    end_of_3e9 = float(scheme.answer(scheme.find(np.array([3e9])))[0])
    assert web.target_bytes == math.ceil(end_of_3e9 * 1.15)


def test_settings_reject_disordered_percentiles() -> None:
    with pytest.raises(ValidationError, match="target_percentile_ratio must not exceed"):
        RightsizingSettings(target_percentile_ratio=0.99, upper_percentile_ratio=0.9)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=1e6, max_value=1e11), min_size=1, max_size=40),
    st.floats(min_value=0.05, max_value=1.0),
)
def test_an_answer_is_never_below_the_percentile_nor_a_bucket_above(
    values: list[float], q: float
) -> None:
    """With equal weights the answer covers the exact lower q-quantile and is at most one
    bucket (5 % of the value, or the first bucket's width) above it."""
    frame = peaks(values, [0.0] * len(values))
    answer = answers(frame, q)[0]
    ordered = sorted(values)
    exact = ordered[max(math.ceil(q * len(ordered) * (1 - 1e-12)) - 1, 0)]
    assert answer >= exact * (1 - 1e-9)
    assert answer <= exact * 1.05 * (1 + 1e-9) + DEFAULTS.first_bucket_bytes


def test_workloads_from_the_store_pool_their_pods_and_cap_at_the_gpu(tmp_path: Path) -> None:
    """Two pods of Deployment ``web`` (owner from the inventory) and one pod the inventory
    does not know (its own workload): 150 one-minute samples each on 80 GB GPUs."""
    start = datetime(2026, 3, 1, 12, 0)
    pods = [
        {"ts": start, "pod_uid": f"u{i}", "namespace": "ml", "pod": f"web-{i}", "workload": "web"}
        for i in range(2)
    ]
    samples = [
        {
            "ts": start + timedelta(minutes=m),
            "node": "n1",
            "gpu_uuid": f"GPU-{pod}",
            "namespace": "ml",
            "pod": pod,
            "fb_used_bytes": used,
            "fb_total_bytes": 80 * 10**9,
            "source": "sim",
        }
        for pod, used in (("web-0", 1e9), ("web-1", 3e9), ("lonely", 9e10))
        for m in range(150)
    ]
    with Store.open(tmp_path / "r.duckdb") as store:
        store.append_batch(
            {"pods": pa.Table.from_pylist(pods), "gpu_samples": pa.Table.from_pylist(samples)}
        )
        found = workload_memory(store, start, start + timedelta(hours=3), DEFAULTS)
    by_key = {r.key: r for r in found}
    assert set(by_key) == {("ml", "web"), ("ml", "lonely")}
    web = by_key[("ml", "web")]
    assert (web.series, web.points, web.peak_bytes) == (2, 300, 3_000_000_000)
    lonely = by_key[("ml", "lonely")]
    assert lonely.capped and lonely.target_bytes == lonely.max_allowed_bytes == 80 * 10**9
