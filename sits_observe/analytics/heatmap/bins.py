"""Heatmap bins chosen from the requests themselves, so that a heatmap drawn without bin flags
still resolves its knee and its safe maximum wherever the data holds them.

Fixed bins do not: one second and 10 requests/s put every window of a service that completes
a few requests a second in the lowest throughput bin, and 100 ms latency bins draw a 70 s
tail as hundreds of empty rows. The rules, each from what the analysis needs:

- **time bin** ``bin_s``: the shortest step of :data:`TIME_STEPS_S` at which a time bin holds,
  at the mean request rate of one heatmap (requests / span / groups), at least
  ``min_bin_requests`` requests, the floor a throughput bin needs before its P95 counts
  (:mod:`sits_observe.analytics.heatmap.knee`). A time bin's throughput then moves in steps
  of 1 / ``bin_s``, about 1/``min_bin_requests`` of the mean. It is shortened to leave at least
  :data:`MIN_TIME_BINS` time bins in the span, or there are no throughputs to compare.
- **throughput bin**: the observed range of the time bins' throughputs in at most
  ``requests / (5 x min_bin_requests)`` bins (3 to :data:`MAX_THROUGHPUT_BINS`): on average
  five times the floor per bin, since a load ramp fills its bins unevenly. The width is the
  first of 1, 2, 5 x 10^k that is at least that and a whole number of requests per time bin
  (width x ``bin_s``), so no bin catches more of the throughput steps than its neighbours.
- **latency bin**: the P99 latency in about :data:`LATENCY_BINS` bins, widths 1, 2, 5 x 10^k
  milliseconds: the map shows the body and the tail, not hundreds of empty rows.

Every rule reads one pass of ``requests`` for its count, span and P99, and one more for the time
bins' throughputs, in DuckDB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import duckdb

from sits_observe.analytics.serving.latency import RequestSelection, check_group
from sits_observe.errors import StoreError
from sits_observe.store import Store

#: Time bin lengths offered, seconds (whole microseconds, and divisors of a minute or an hour
#: from a second on, so bins line up with clock time).
TIME_STEPS_S: tuple[float, ...] = (
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600,
)  # fmt: skip
#: Fewest time bins the span is cut into: fewer leave too few throughputs to compare.
MIN_TIME_BINS = 12
#: Most throughput bins: past this a bin rests on a sliver of the load range.
MAX_THROUGHPUT_BINS = 12
#: Requests per throughput bin on average, in units of ``min_bin_requests``.
REQUESTS_PER_BIN_FLOORS = 5
#: Latency bins across the P99 latency.
LATENCY_BINS = 40


@dataclass(frozen=True)
class DataBins:
    """Bins for a heatmap of the selected requests, and what they were chosen from."""

    bin_s: float
    throughput_bin_rps: float
    latency_bin_ms: float
    requests: int
    rate_rps: float
    throughput_lo_rps: float
    throughput_hi_rps: float
    p99_s: float

    def describe(self) -> str:
        """One line saying what the bins are and why."""
        return (
            f"bins from the data: {self.bin_s:g} s time bins (mean {self.rate_rps:.3g} "
            f"requests/s), {self.throughput_bin_rps:g} rps over the observed "
            f"{self.throughput_lo_rps:g}-{self.throughput_hi_rps:g} rps, "
            f"{self.latency_bin_ms / 1000:g} s latency bins (P99 {self.p99_s:.3g} s)"
        )


def nice_at_least(value: float, *, multiple_of: Fraction | None = None) -> Fraction:
    """The smallest of 1, 2, 5 x 10^k (k any integer) that is >= ``value`` and, given
    ``multiple_of``, a whole multiple of it; exact, so ``0.1`` is 1/10."""
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"need a finite value > 0, got {value!r}")
    exponent = math.floor(math.log10(value)) - 1
    while True:
        scale = Fraction(10) ** exponent
        for mantissa in (1, 2, 5):
            step = mantissa * scale
            if step >= Fraction(value) and (
                multiple_of is None or (step / multiple_of).denominator == 1
            ):
                return step
        exponent += 1


def time_bin_s(rate_rps: float, span_s: float, min_bin_requests: int) -> float:
    """The time bin for a mean rate of ``rate_rps`` over ``span_s`` (module docstring)."""
    wanted = min_bin_requests / rate_rps if rate_rps > 0 else TIME_STEPS_S[-1]
    fitting = [s for s in TIME_STEPS_S if s * MIN_TIME_BINS <= span_s] or [TIME_STEPS_S[0]]
    longest = fitting[-1]
    return next((s for s in TIME_STEPS_S if s >= wanted and s <= longest), longest)


def throughput_bin_rps(
    lo_rps: float, hi_rps: float, requests: int, bin_s: float, floor: int
) -> float:
    """The throughput bin width over ``[lo_rps, hi_rps]`` (module docstring)."""
    bins = max(3, min(MAX_THROUGHPUT_BINS, requests // (REQUESTS_PER_BIN_FLOORS * floor)))
    quantum = 1 / Fraction(repr(bin_s))  # one request per time bin, requests/s
    spread = max(hi_rps - lo_rps, float(quantum))
    return float(nice_at_least(spread / bins, multiple_of=quantum))


def latency_bin_ms(p99_s: float) -> float:
    """The latency bin width for a P99 of ``p99_s`` (module docstring), whole milliseconds."""
    return float(nice_at_least(max(p99_s * 1000 / LATENCY_BINS, 1.0)))


def data_bins(
    store: Store,
    selection: RequestSelection,
    *,
    by: str | None,
    min_bin_requests: int,
) -> DataBins | None:
    """The bins of a heatmap of ``selection`` (one per ``by`` group); None without requests."""
    if by is not None:
        check_group(by)
    where, params = selection.where_named("latency_s")
    group = by if by is not None else "NULL"
    stats_sql = (
        "SELECT count(*), epoch_us(min(ts)), epoch_us(max(ts)), "
        f"count(DISTINCT coalesce({group}::VARCHAR, '')), quantile_cont(latency_s, 0.99) "
        f"FROM requests WHERE ts IS NOT NULL AND {where}"
    )
    spread_sql = (
        "SELECT min(n), max(n) FROM ("
        f"  SELECT count(*) AS n FROM requests WHERE ts IS NOT NULL AND {where} "
        f"  GROUP BY {group}, floor(epoch_us(ts) / $w))"
    )
    cur = store.cursor()
    try:
        row = cur.sql(stats_sql, params=params).fetchall()[0]
        requests, first_us, last_us, groups, p99_s = row
        if not requests:
            return None
        span_s = max((last_us - first_us) / 1e6, 1e-3)
        rate = requests / span_s / max(groups, 1)
        bin_s = time_bin_s(rate, span_s, min_bin_requests)
        width_us = round(bin_s * 1e6)
        lo_n, hi_n = cur.sql(spread_sql, params={**params, "w": width_us}).fetchall()[0]
    except duckdb.Error as exc:
        raise StoreError(f"reading the requests' rate for the heatmap bins failed: {exc}") from exc
    finally:
        cur.close()
    lo, hi = lo_n / bin_s, hi_n / bin_s
    return DataBins(
        bin_s=bin_s,
        throughput_bin_rps=throughput_bin_rps(lo, hi, requests, bin_s, min_bin_requests),
        latency_bin_ms=latency_bin_ms(float(p99_s)),
        requests=int(requests),
        rate_rps=rate,
        throughput_lo_rps=lo,
        throughput_hi_rps=hi,
        p99_s=float(p99_s),
    )
