"""The knee and safe-maximum rules on hand-made P95 curves."""

from __future__ import annotations

import pytest

from sits_observe.analytics.heatmap.knee import ThroughputBin, find_knee, find_safe_max


def curve(p95_s: list[float], width: float = 10.0, requests: int = 100) -> list[ThroughputBin]:
    return [
        ThroughputBin(i * width, (i + 1) * width, 5, requests, p / 2, p, p * 1.2)
        for i, p in enumerate(p95_s)
    ]


def test_knee_of_a_flat_then_linear_curve_is_the_bend() -> None:
    # flat 0.3 s up to 40 rps, then +0.2 s per bin: every pair after the bend is equally steep,
    # so "steepest pair" would not single it out; the chord rule does
    bins = curve([0.3, 0.3, 0.3, 0.3, 0.3, 0.5, 0.7, 0.9, 1.1])
    knee = find_knee(bins, min_requests=20)
    assert knee.value is not None
    assert knee.value.throughput_lo_rps == 40.0
    assert knee.value.p95_s == 0.3
    assert 0 < knee.value.depth_ratio < 1


def test_knee_of_a_queueing_curve_is_before_the_end() -> None:
    # P95 ~ 1 / (1 - utilisation): the steepest pair is always the last one
    bins = curve([0.2 / (1 - u / 10) for u in range(10)])
    knee = find_knee(bins, min_requests=20)
    assert knee.value is not None
    assert 40.0 <= knee.value.throughput_lo_rps <= 80.0


def test_no_knee_cases() -> None:
    assert find_knee(curve([0.1, 0.2]), 20).value is None
    assert "does not rise" in find_knee(curve([0.5, 0.4, 0.3]), 20).note
    # concave: rises fastest at the start, never below the chord
    concave = find_knee(curve([0.1, 0.5, 0.7, 0.8]), 20)
    assert concave.value is None and "at least linearly" in concave.note
    # bins with too few requests are not used
    thin = curve([0.3, 0.3, 0.3, 2.0], requests=5)
    assert "found 0" in find_knee(thin, 20).note


def test_safe_max_stops_at_the_first_breach() -> None:
    bins = curve([0.2, 0.3, 0.6, 0.4, 0.9])  # 0.4 at 30 rps comes after the 20 rps breach
    safe = find_safe_max(bins, slo_s=0.5, min_requests=20)
    assert safe.value is not None
    assert (safe.value.throughput_lo_rps, safe.value.throughput_hi_rps) == (10.0, 20.0)
    assert safe.value.exceeded_from_rps == 20.0
    assert safe.value.p95_s == 0.3


def test_safe_max_edges() -> None:
    assert find_safe_max(curve([0.6, 0.7]), 0.5, 20).value is None
    assert "lowest bin" in find_safe_max(curve([0.6, 0.7]), 0.5, 20).note
    held = find_safe_max(curve([0.1, 0.2]), 0.5, 20)
    assert held.value is not None and held.value.exceeded_from_rps is None
    assert find_safe_max(curve([0.1], requests=1), 0.5, 20).value is None
    # an SLO exactly equal to the P95 is met
    assert find_safe_max(curve([0.5]), 0.5, 20).value is not None


def test_thin_bins_are_skipped_not_breaking() -> None:
    bins = curve([0.2, 0.3, 0.4])
    thin_breach = ThroughputBin(15.0, 16.0, 1, 3, 0.9, 5.0, 6.0)
    safe = find_safe_max([*bins, thin_breach], slo_s=0.5, min_requests=20)
    assert safe.value is not None and safe.value.throughput_lo_rps == pytest.approx(20.0)


def test_a_bin_past_the_highest_p95_does_not_hide_the_knee() -> None:
    """The demo's servers: P95 32, 35, 67 s at 2, 3, 4 rps, then one busy window of short
    requests at 6 rps with 35 s. The chord to that last bin slopes the wrong way; the climb
    ends at 4 rps, and its knee is 3 rps."""
    bins = [
        ThroughputBin(lo, lo + 1, windows, requests, p95 / 3, p95, p95 * 1.1)
        for lo, windows, requests, p95 in (
            (2.0, 5, 117, 32.2),
            (3.0, 8, 237, 35.0),
            (4.0, 7, 305, 67.1),
            (6.0, 1, 63, 35.5),
        )
    ]
    knee = find_knee(bins, min_requests=20)
    assert knee.value is not None and knee.value.throughput_lo_rps == 3.0
