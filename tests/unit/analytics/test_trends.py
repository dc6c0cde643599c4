"""Trend features, the k-distance knee, DBSCAN clusters and their words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sits_observe.analytics.trends.clusters import (
    TrendSettings,
    choose_eps,
    cluster_features,
    cluster_sizes,
    cluster_words,
    default_min_samples,
    describe,
    knee,
    knee_index,
    resolution_eps,
)
from sits_observe.analytics.trends.features import FEATURES, series_features

DAY0 = 1_700_006_400.0  # a UTC midnight
MINUTE = 60.0

Series = Callable[[np.random.Generator, np.ndarray], np.ndarray]


def hours(t: np.ndarray) -> np.ndarray:
    return (t - DAY0) / 3600.0


def noise(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    return rng.normal(0.0, rng.uniform(0.002, 0.006), t.size)


def steady(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    return rng.uniform(0.45, 0.55) + noise(rng, t)


def leaking(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    return rng.uniform(0.05, 0.15) + rng.uniform(0.007, 0.009) * hours(t) + noise(rng, t)


def saw_tooth(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    period_h = rng.uniform(1.8, 2.2)
    phase = ((hours(t) + rng.uniform(0, period_h)) % period_h) / period_h
    return 0.1 + rng.uniform(0.45, 0.55) * phase + noise(rng, t)


def daily(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    angle = 2 * np.pi * (t % 86400) / 86400 + rng.uniform(-0.3, 0.3)
    return rng.uniform(0.45, 0.55) + rng.uniform(0.2, 0.3) * np.sin(angle) + noise(rng, t)


def idle(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    return rng.uniform(0.0, 0.01) + rng.normal(0, 0.0005, t.size)


def oddball(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    return np.clip(0.5 + np.cumsum(rng.normal(0, 0.01, t.size)), 0, 1)


SHAPES: dict[str, Series] = {
    "flat": steady,
    "leaking": leaking,
    "saw-tooth": saw_tooth,
    "daily cycle": daily,
    "idle/empty": idle,
}


def fleet(
    seed: int, per_shape: int = 20, oddballs: int = 3, days: float = 3.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Long-format one-minute series of known shapes; returns codes, t, values, truth."""
    rng = np.random.default_rng(seed)
    t = DAY0 + np.arange(0.0, days * 86400, MINUTE)
    truth: list[str] = []
    values = []
    for name, shape in SHAPES.items():
        for _ in range(per_shape):
            truth.append(name)
            values.append(shape(rng, t))
    for _ in range(oddballs):
        truth.append("oddball")
        values.append(oddball(rng, t))
    codes = np.repeat(np.arange(len(truth)), t.size)
    return codes, np.tile(t, len(truth)), np.concatenate(values), truth


# -- features ---------------------------------------------------------------------------


def reference_features(t_s: np.ndarray, x: np.ndarray, drop_ratio: float) -> np.ndarray:
    """One series, the slow obvious way (numpy least squares on an explicit design)."""
    t_h = (t_s - t_s[0]) / 3600.0
    span_h = t_h[-1]
    cols = [np.ones_like(t_h), t_h - t_h.mean()]
    if span_h >= 24:
        angle = 2 * np.pi * np.mod(t_s, 86400) / 86400
        cols += [np.cos(angle), np.sin(angle)]
    design = np.column_stack(cols)
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    resid = x - design @ coef
    amplitude = float(np.hypot(coef[2], coef[3])) if span_h >= 24 else 0.0
    drops = int(np.sum(np.diff(x) <= -drop_ratio))
    return np.array([x.mean(), coef[1], np.sqrt(np.mean(resid**2)), amplitude, drops / span_h])


def test_features_of_known_shapes() -> None:
    t = DAY0 + np.arange(0.0, 2 * 86400, MINUTE)
    th = hours(t)
    flat = np.full(t.size, 0.4)
    ramp = 0.1 + 0.01 * th
    cycle = 0.5 + 0.2 * np.cos(2 * np.pi * (t % 86400) / 86400)
    teeth = 0.1 + 0.5 * ((th % 2.0) / 2.0)  # 2 h teeth: 23 full drops in 48 h
    codes = np.repeat(np.arange(4), t.size)
    f = series_features(codes, np.tile(t, 4), np.concatenate([flat, ramp, cycle, teeth]))
    m = dict(zip(FEATURES, f.matrix.T, strict=True))
    assert m["level"][0] == pytest.approx(0.4)
    assert np.allclose(m["slope_per_h"][:3], [0.0, 0.01, 0.0], atol=1e-12)
    # the residual sum of squares comes from the normal equations: zero to ~1e-17, whose
    # square root is ~1e-9
    assert np.allclose(m["resid_std"][:3], 0.0, atol=1e-7)
    assert m["daily_amplitude"][2] == pytest.approx(0.2, rel=1e-9)
    assert m["daily_amplitude"][1] == pytest.approx(0.0, abs=1e-9)  # a trend is no cycle
    span_h = (t[-1] - t[0]) / 3600
    assert m["drops_per_h"][3] == pytest.approx(23 / span_h)
    assert np.all(m["drops_per_h"][:3] == 0)
    assert list(f.points) == [t.size] * 4


def test_a_cycle_under_a_day_is_not_measured_and_the_slope_stays_a_slope() -> None:
    t = DAY0 + np.arange(0.0, 12 * 3600, MINUTE)
    x = 0.2 + 0.03 * hours(t) + 0.1 * np.sin(2 * np.pi * (t % 86400) / 86400)
    f = series_features(np.zeros(t.size, np.int64), t, x)
    assert f.column("daily_amplitude")[0] == 0.0
    assert f.column("slope_per_h")[0] > 0.03  # the rising half-cycle adds to the trend


@given(
    n=st.integers(3, 400),
    seed=st.integers(0, 2**32 - 1),
    step_s=st.sampled_from([1.0, 60.0, 300.0, 900.0]),
    chunk_points=st.integers(1, 2000),
)
@settings(max_examples=40, deadline=None)
def test_vectorised_features_equal_the_per_series_reference(
    n: int, seed: int, step_s: float, chunk_points: int
) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, n + 1, size=4)
    codes, ts, xs, refs = [], [], [], []
    for code, length in enumerate(lengths):
        t = DAY0 + rng.uniform(0, 86400) + np.cumsum(rng.uniform(0.5, 1.5, length) * step_s)
        x = rng.uniform(0, 1, length)
        codes.append(np.full(length, code * 3))  # sparse codes
        ts.append(t)
        xs.append(x)
        refs.append(reference_features(t, x, 0.05))
    order = rng.permutation(sum(lengths))  # unsorted input
    f = series_features(
        np.concatenate(codes)[order],
        np.concatenate(ts)[order],
        np.concatenate(xs)[order],
        chunk_points=chunk_points,
    )
    assert list(f.codes) == [0, 3, 6, 9]
    assert np.allclose(f.matrix, np.array(refs), rtol=1e-7, atol=1e-9)


@given(shift=st.floats(-0.3, 0.3), days=st.integers(-30, 30))
@settings(max_examples=25, deadline=None)
def test_features_shift_with_the_level_and_ignore_whole_days(shift: float, days: int) -> None:
    codes, t, x, _ = fleet(seed=5, per_shape=1, oddballs=0, days=1.5)
    base = series_features(codes, t, x).matrix
    moved = series_features(codes, t + days * 86400.0, x + shift).matrix
    assert np.allclose(moved[:, 0], base[:, 0] + shift, atol=1e-9)
    assert np.allclose(moved[:, 1:], base[:, 1:], atol=1e-7)


def test_nan_points_and_short_series_are_dropped_and_counted() -> None:
    t = DAY0 + np.arange(10) * MINUTE
    x = np.linspace(0.1, 0.2, 10)
    x_nan = x.copy()
    x_nan[[2, 5]] = np.nan
    codes = np.repeat([0, 1, 2, 3, 4], [10, 10, 2, 10, 3])
    ts = np.concatenate([t, t, t[:2], t, np.full(3, DAY0)])
    xs = np.concatenate([x, x_nan, x[:2], np.full(10, np.nan), x[:3]])
    f = series_features(codes, ts, xs)
    assert list(f.codes) == [0, 1]
    assert list(f.points) == [10, 8]
    assert f.dropped == Counter(non_finite_points=12, too_few_points=2, zero_span=1)
    assert sorted(f.dropped_codes.tolist()) == [2, 3, 4]


def test_empty_input() -> None:
    f = series_features(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    assert f.n_series == 0 and f.matrix.shape == (0, len(FEATURES))


# -- eps ------------------------------------------------------------------------------


def test_knee_of_a_piecewise_linear_curve_is_its_vertex() -> None:
    flat = 0.01 * np.arange(80)
    steep = flat[-1] + 0.5 * np.arange(1, 21)
    assert knee_index(np.concatenate([flat, steep])) == 79


def test_knee_of_degenerate_curves() -> None:
    assert knee_index(np.zeros(10)) == 0
    assert knee_index(np.array([1.0, 2.0])) == 0
    assert knee_index(np.linspace(0, 1, 50)) in range(50)  # a line: any point is as good


@given(hnp.arrays(np.float64, st.integers(3, 200), elements=st.floats(0, 1e3)))
def test_knee_lies_on_the_curve(values: np.ndarray) -> None:
    curve = np.sort(values)
    index = knee_index(curve)
    assert 0 <= index < curve.size


def test_knee_strength_runs_from_line_to_l() -> None:
    assert knee(np.linspace(0, 1, 50))[1] == pytest.approx(0.0, abs=1e-12)
    index, strength = knee(np.r_[np.zeros(99), 1.0])
    assert index == 98 and strength == pytest.approx(98 / 99)
    assert knee(np.sqrt(np.linspace(0, 1, 50)))[1] == 0.0  # concave: nothing below the chord


def test_without_a_knee_every_series_is_a_core_point() -> None:
    rng = np.random.default_rng(2)
    blobs = np.vstack([rng.normal(0, 0.05, (8, 2)), rng.normal(3, 0.05, (8, 2))])
    choice = choose_eps(blobs, min_samples=3)
    assert choice.source == "no_knee" and choice.knee_strength < 0.5
    assert choice.eps == pytest.approx(choice.k_distances[-1], rel=1e-8)


def test_eps_is_the_k_distance_at_the_knee() -> None:
    rng = np.random.default_rng(0)
    dense = rng.normal(0, 0.05, size=(60, 2))
    sparse = rng.uniform(-5, 5, size=(6, 2))
    choice = choose_eps(np.vstack([dense, sparse]), min_samples=4)
    assert choice.source == "knee" and choice.k == 4 and choice.knee_strength >= 0.5
    assert choice.knee_index is not None
    assert choice.eps == pytest.approx(choice.k_distances[choice.knee_index], rel=1e-8)
    assert choice.eps < 0.5  # inside the dense blob's scale, well below the sparse points'
    assert choose_eps(dense, 4, given=0.3).eps == 0.3


def test_default_min_samples() -> None:
    assert [default_min_samples(n) for n in (1, 2, 8, 40, 100, 8000)] == [1, 2, 3, 4, 10, 10]


# -- clustering and words --------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_dbscan_recovers_the_shapes_and_names_them(seed: int) -> None:
    codes, t, x, truth = fleet(seed)
    keys = tuple(f"gpu-{i}" for i in range(len(truth)))
    result = cluster_features(series_features(codes, t, x), keys, keys)
    assert result.eps.source == "knee"
    assert len(result.clusters) == len(SHAPES)
    for cluster in result.clusters:
        members = {truth[int(m.key[4:])] for m in cluster.members}
        assert len(members) == 1, members  # pure
        (shape,) = members
        assert len(cluster.members) >= 18  # nearly every member of its shape
        assert cluster.words[0] == shape
    named = {c.words[0] for c in result.clusters}
    assert named == set(SHAPES)
    noise = Counter(truth[int(n.members[0].key[4:])] for n in result.noise)
    assert noise["oddball"] == 3  # the random walks belong to no shape
    assert sum(noise.values()) - 3 <= 2
    assert cluster_sizes(result)["noise"] == len(result.noise)


def test_all_identical_series_form_one_cluster() -> None:
    t = DAY0 + np.arange(100) * MINUTE
    codes = np.repeat(np.arange(6), t.size)
    x = np.tile(0.3 + 0.001 * np.arange(100), 6)
    keys = tuple(f"g{i}" for i in range(6))
    result = cluster_features(series_features(codes, np.tile(t, 6), x), keys, keys)
    assert result.eps.source == "resolution" and result.eps.eps == 1.0
    (cluster,) = result.clusters
    assert len(cluster.members) == 6 and result.noise == ()


def test_one_series_and_no_series() -> None:
    t = DAY0 + np.arange(30) * MINUTE
    one = cluster_features(
        series_features(np.zeros(30, np.int64), t, np.full(30, 0.5)), ("g0",), ("n1",)
    )
    assert one.n_series == 1 and len(one.clusters) == 1
    assert one.clusters[0].members[0].node == "n1"
    assert one.notes
    none = cluster_features(series_features(np.zeros(0, np.int64), t[:0], t[:0]), (), ())
    assert none.n_series == 0 and none.clusters == () and none.notes


def test_dropped_series_are_named() -> None:
    t = DAY0 + np.arange(30) * MINUTE
    codes = np.repeat([0, 1, 2, 3], [30, 30, 30, 1])
    x = np.concatenate([np.full(30, 0.5), np.full(30, 0.5), np.full(30, np.nan), [0.1]])
    result = cluster_features(
        series_features(codes, np.concatenate([t, t, t, t[:1]]), x),
        ("a", "b", "c", "d"),
        ("n", "n", "n", "n"),
    )
    assert result.n_series == 2
    assert sorted(result.dropped_keys) == ["c", "d"]
    assert result.dropped == {"non_finite_points": 30, "too_few_points": 2}


def test_given_eps_and_min_samples_are_used() -> None:
    codes, t, x, truth = fleet(1, per_shape=6, oddballs=0, days=1.2)
    keys = tuple(str(i) for i in range(len(truth)))
    result = cluster_features(
        series_features(codes, t, x), keys, keys, settings=TrendSettings(eps=50.0, min_samples=2)
    )
    assert (result.eps.eps, result.eps.source, result.min_samples) == (50.0, "given", 2)
    assert len(result.clusters) == 1  # a huge radius joins everything


@pytest.mark.parametrize(
    ("centroid", "words"),
    [
        ({"level": 0.005}, ("idle/empty",)),
        ({"level": 0.5}, ("flat",)),
        ({"level": 0.5, "resid_std": 0.1}, ("erratic",)),
        ({"level": 0.95}, ("flat", "full")),
        ({"level": 0.3, "slope_per_h": 0.02}, ("leaking",)),
        ({"level": 0.3, "slope_per_h": -0.02}, ("draining",)),
        ({"level": 0.3, "drops_per_h": 1.0, "resid_std": 0.1}, ("saw-tooth",)),
        ({"level": 0.3, "drops_per_h": 1.0, "slope_per_h": 0.02}, ("saw-tooth", "leaking")),
        ({"level": 0.5, "daily_amplitude": 0.2}, ("daily cycle",)),
    ],
)
def test_words(centroid: dict[str, float], words: tuple[str, ...]) -> None:
    full = dict.fromkeys(FEATURES, 0.0) | centroid
    assert describe(full, TrendSettings()) == words


def test_a_homogeneous_fleet_stays_one_group() -> None:
    # 40 steady GPUs that differ only by measurement noise: the scale floors keep that noise
    # from being stretched to unit variance and split into clusters and noise.
    rng = np.random.default_rng(8)
    t = DAY0 + np.arange(0.0, 6 * 3600, MINUTE)
    values = [0.5 + rng.normal(0, 0.002) + rng.normal(0, 0.002, t.size) for _ in range(40)]
    codes = np.repeat(np.arange(40), t.size)
    keys = tuple(f"g{i}" for i in range(40))
    result = cluster_features(
        series_features(codes, np.tile(t, 40), np.concatenate(values)), keys, keys
    )
    assert [c.words for c in result.clusters] == [("flat",)]
    assert len(result.clusters[0].members) == 40 and result.noise == ()


def test_resolution_eps_is_one_floor_of_the_most_spread_feature() -> None:
    flat = np.zeros((10, len(FEATURES)))
    assert resolution_eps(flat) == 1.0
    spread = flat.copy()
    spread[:, 0] = np.r_[np.zeros(5), np.full(5, 0.2)]  # level std 0.1 = 10 floors of 1 pp
    assert resolution_eps(spread) == pytest.approx(0.1)
    assert resolution_eps(np.zeros((0, len(FEATURES)))) == 0.0
    rng = np.random.default_rng(0)
    choice = choose_eps(rng.normal(0, 0.01, (30, 2)), min_samples=3, min_eps=0.5)
    assert (choice.eps, choice.source) == (0.5, "resolution")


def test_a_cluster_carries_only_the_words_most_of_its_members_earn() -> None:
    assert cluster_words([("flat", "full")] * 12 + [("leaking",)] * 4) == ("flat", "full")
    assert cluster_words([("saw-tooth", "leaking")] * 2 + [("saw-tooth",)] * 2) == ("saw-tooth",)
    assert cluster_words([("flat",), ("leaking",), ("erratic",)]) == ("mixed",)


def flat_and_filling() -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """The demo's shape over 6 h: 12 vLLM GPUs flat at 92 % (g0-g11) and 4 batch GPUs filling
    up (g12-g15); series codes, the time axis, the values and the keys."""
    rng = np.random.default_rng(7)
    t = DAY0 + np.arange(0.0, 6 * 3600, MINUTE)
    flat = [0.92 + rng.normal(0, 0.002, t.size) for _ in range(12)]
    filling = [0.1 + 0.12 * hours(t) + rng.normal(0, 0.002, t.size) for _ in range(4)]
    return (
        np.repeat(np.arange(16), t.size),
        t,
        np.concatenate(flat + filling),
        tuple(f"g{i}" for i in range(16)),
    )


def test_flat_servers_are_not_called_leaking_beside_a_few_leaking_gpus() -> None:
    """The demo's shape: 12 vLLM GPUs flat at 90 % and 4 batch GPUs filling up, 6 h, one
    group forced (eps given large): the centroid rises, but the group is flat and full."""
    codes, t, x, keys = flat_and_filling()
    forced = cluster_features(
        series_features(codes, np.tile(t, 16), x), keys, keys, settings=TrendSettings(eps=1e3)
    )
    (group,) = forced.clusters
    assert describe(group.centroid, TrendSettings())[0] == "leaking"  # the mean would say so
    assert group.words == ("flat", "full")
    found = cluster_features(series_features(codes, np.tile(t, 16), x), keys, keys)
    words = sorted(c.words for c in found.clusters)
    assert words == [("flat", "full"), ("leaking",)]


def test_a_fleet_without_structure_says_so() -> None:
    """Series that differ only by evenly spread levels: no knee, one group, and a note."""
    t = DAY0 + np.arange(0.0, 3 * 3600, MINUTE)
    rng = np.random.default_rng(3)
    levels = np.linspace(0.2, 0.8, 20)
    x = np.concatenate([lv + rng.normal(0, 0.002, t.size) for lv in levels])
    codes = np.repeat(np.arange(20), t.size)
    keys = tuple(f"g{i}" for i in range(20))
    result = cluster_features(series_features(codes, np.tile(t, 20), x), keys, keys)
    assert result.eps.source == "no_knee"
    assert len(result.clusters) == 1
    assert any(n.startswith("no structure") for n in result.notes)


def test_a_member_that_does_not_earn_its_clusters_words_says_its_own() -> None:
    """Twelve flat GPUs and four filling up, forced into one group: the group is named by what
    two thirds earn (flat, full), and the report names each filling GPU with its own shape,
    so no growing GPU hides under "flat" (nor, the other way round, a flat one under
    "leaking")."""
    from datetime import UTC, datetime

    from sits_observe.reports import trends as trends_report
    from sits_observe.reports.window import Window

    codes, t, x, keys = flat_and_filling()
    forced = cluster_features(
        series_features(codes, np.tile(t, 16), x), keys, keys, settings=TrendSettings(eps=1e3)
    )
    (group,) = forced.clusters
    assert [w[0] for w in group.member_words].count("leaking") == 4
    at = datetime.fromtimestamp(DAY0, UTC).replace(tzinfo=None)
    report = trends_report.report_of(Window(None, at, "given"), forced, {})
    (row,) = report.table("clusters").records()
    marked = [n for n in row["members"] if n.endswith("[leaking]")]
    assert sorted(marked) == [f"g{i} [leaking]" for i in range(12, 16)]
    assert all(f["words"] for f in row["member_features"])
