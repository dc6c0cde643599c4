"""The knee and the safe maximum throughput of a latency-throughput curve.

Both read the same evidence: per throughput bin (windows grouped by their throughput, see
:mod:`sits_observe.analytics.heatmap.grid`) the EXACT P95 of every request of every window in that
bin. Bins with fewer than ``min_requests`` requests are shown but not used: their P95 rests on
too few values (with 20 values P95 already interpolates between the two largest).

Knee. On the used bins, in throughput order, up to the one with the highest P95 (where the
climb ends; bins past it, bursts of short requests in busy windows, are no part of it), draw
the straight line (the chord) from the first bin's P95 to the last bin's P95. The knee is the
bin whose P95 lies farthest below that line, measured in units of the chord's total rise;
below it P95 grows slowly, above it faster than anywhere before (the "Kneedle" rule:
Satopää, Albrecht, Irwin, Raghavan, "Finding a 'Kneedle' in a Haystack", ICDCS workshops
2011). Reported value: the knee bin's lower edge.
Why not simply "the bin pair with the steepest P95 slope": on a queueing curve (latency
~ 1 / (1 - utilisation)) the steepest pair is always the last one, and on a flat-then-linear
curve every pair past the bend ties, so that rule names the end of the data, not the bend.
There is no knee when fewer than three bins are used, when P95 does not rise from the first
to the last bin, or when no bin lies below the chord (P95 rises at least linearly from the
start).

Safe maximum throughput at an SLO. Walk the used bins upwards; the safe maximum is the last
bin reached before the first bin whose P95 exceeds the SLO (so every lower used bin meets the
SLO too). Reported: that bin's lower edge as the conservative figure, with its upper edge, and
the lower edge of the first bin that broke the SLO (none when the SLO held everywhere: the true
limit then lies above the data). None when even the lowest used bin breaks the SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ThroughputBin:
    """Requests of every window whose throughput fell in ``[lo, lo + width)``."""

    throughput_lo_rps: float
    throughput_hi_rps: float
    windows: int
    requests: int
    p50_s: float
    p95_s: float
    p99_s: float


@dataclass(frozen=True)
class Knee:
    """Where P95 starts to rise fastest."""

    throughput_lo_rps: float
    p95_s: float
    #: distance below the chord, as a fraction of the chord's rise (0-1)
    depth_ratio: float


@dataclass(frozen=True)
class SafeMax:
    """The highest throughput bin with P95 within the SLO, every lower bin within it too."""

    throughput_lo_rps: float
    throughput_hi_rps: float
    p95_s: float
    slo_s: float
    #: lower edge of the first bin that broke the SLO; None = the SLO held in every bin
    exceeded_from_rps: float | None


@dataclass(frozen=True)
class Verdict(Generic[T]):
    """A result, or None with the reason in words."""

    value: T | None
    note: str


def used_bins(bins: Sequence[ThroughputBin], min_requests: int) -> list[ThroughputBin]:
    """The bins with at least ``min_requests`` requests, in throughput order."""
    return sorted(
        (b for b in bins if b.requests >= min_requests), key=lambda b: b.throughput_lo_rps
    )


def find_knee(bins: Sequence[ThroughputBin], min_requests: int) -> Verdict[Knee]:
    """The knee of the P95 curve (rule in the module docstring)."""
    used = used_bins(bins, min_requests)
    if len(used) < 3:
        return Verdict(
            None,
            f"no knee: needs 3 throughput bins with >= {min_requests} requests, found {len(used)}",
        )
    # The rise ends at the highest P95: a bin past it (a burst of short requests in a busy
    # window) is no point of the curve's climb, and a chord drawn to it would slope the wrong
    # way (the first highest one, so a plateau ends where it starts).
    peak = max(range(len(used)), key=lambda i: (used[i].p95_s, -i))
    if peak >= 2:
        used = used[: peak + 1]
    first, last = used[0], used[-1]
    rise_s = last.p95_s - first.p95_s
    if rise_s <= 0:
        return Verdict(None, "no knee: P95 does not rise from the lowest to the highest bin")
    span_rps = last.throughput_lo_rps - first.throughput_lo_rps
    best: ThroughputBin | None = None
    best_depth = 0.0
    for b in used[1:-1]:
        chord_s = first.p95_s + rise_s * (b.throughput_lo_rps - first.throughput_lo_rps) / span_rps
        depth = (chord_s - b.p95_s) / rise_s
        if depth > best_depth:
            best, best_depth = b, depth
    if best is None:
        return Verdict(None, "no knee: P95 rises at least linearly from the lowest bin on")
    knee = Knee(best.throughput_lo_rps, best.p95_s, best_depth)
    return Verdict(
        knee,
        f"knee at {best.throughput_lo_rps:g} rps (P95 {best.p95_s:.4g} s), "
        f"{best_depth:.0%} of the rise below the chord",
    )


def find_safe_max(
    bins: Sequence[ThroughputBin], slo_s: float, min_requests: int
) -> Verdict[SafeMax]:
    """The safe maximum throughput at a P95 SLO of ``slo_s`` (rule in the module docstring)."""
    used = used_bins(bins, min_requests)
    if not used:
        return Verdict(None, f"no safe maximum: no throughput bin has >= {min_requests} requests")
    last_ok: ThroughputBin | None = None
    breach: ThroughputBin | None = None
    for b in used:
        if b.p95_s <= slo_s:
            last_ok = b
        else:
            breach = b
            break
    if last_ok is None:
        assert breach is not None
        return Verdict(
            None,
            f"no safe maximum: the lowest bin ({breach.throughput_lo_rps:g} rps) already has "
            f"P95 {breach.p95_s:.4g} s > SLO {slo_s:g} s",
        )
    exceeded = None if breach is None else breach.throughput_lo_rps
    safe = SafeMax(
        last_ok.throughput_lo_rps, last_ok.throughput_hi_rps, last_ok.p95_s, slo_s, exceeded
    )
    if breach is None:
        note = (
            f"safe maximum >= {last_ok.throughput_lo_rps:g} rps: P95 met the {slo_s:g} s SLO in "
            "every bin, so the limit lies above the measured load"
        )
    else:
        note = (
            f"safe maximum {last_ok.throughput_lo_rps:g} rps (P95 {last_ok.p95_s:.4g} s); the "
            f"{breach.throughput_lo_rps:g} rps bin broke the {slo_s:g} s SLO "
            f"(P95 {breach.p95_s:.4g} s)"
        )
    return Verdict(safe, note)
