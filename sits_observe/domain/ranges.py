"""The physical-range rules of every numeric column, and one vectorised check that applies them.

The collectors drop what cannot be a measurement (non-finite values, sentinels, negative
memory, a utilisation above 100 %) before it reaches a table. Rows that arrive over the
network (``POST /api/v1/ingest``, ``POST /v1/traces``) were made by code the service does
not control, so the same rules run again there, from this one table: the GPU columns'
bounds are dcgm-exporter's field table (:data:`sits_observe.domain.schema.dcgm_fields.FIELDS`,
scaled to the column's unit), so the collector and the ingest path cannot disagree.

A :class:`Bound` says what a column may hold (inclusive ``low`` / ``high`` in the column's
unit; floats must also be finite). A value that breaks it is dropped and counted under
``"<table>.<column>:<why>"``, ``why`` being ``missing``, ``non_finite``, ``negative``,
``below_min`` or ``above_max``. What "dropped" means follows the collectors:

- an optional value becomes NULL and the rest of the row is kept (dcgm-exporter, cgroup and
  inference-server collectors NULL one bad sample; the request-log importer NULLs a bad TTFT
  or token count);
- a ``required`` column (``ts`` everywhere; ``model`` and ``latency_s`` of ``requests``, as
  the request-log importer rejects such rows; ``count`` of ``collector_drops``) drops the
  whole row.

Time (``ts``): a row stamped after ``latest`` (the caller's clock plus its allowed skew) is
dropped as ``ts:future``, since it would sit in every "last N minutes" window until the
clock caught up; one stamped before :data:`EARLIEST_TS` (2000-01-01, before any GPU this
product measures; it catches zeroed 1970 clocks) is dropped as ``ts:too_old``. Older rows
that are still after 2000 are kept: retention removes them on its next run, as it would
have had they arrived in time.

A row is counted once, under the first required rule it breaks (in :data:`RULES` order);
values of dropped rows are not counted again.

Every ingest path runs one batch-level screening, :func:`screen_tables` (the service's
``POST /api/v1/ingest`` and each ``sits-observe ingest`` command, whose files and bodies carry
their own timestamps): the rules above with ``latest`` = the storing side's clock +
``max_future_skew_s`` (:data:`MAX_FUTURE_SKEW_S` unless configured), and what it dropped
stored as ``collector_drops`` rows of collector :data:`SCREEN_COLLECTOR`
(:meth:`Screened.batch`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.domain.collect import drops_table
from sits_observe.domain.schema.dcgm_fields import FIELDS
from sits_observe.domain.times import utc_naive

#: Rows stamped before this (naive UTC) are dropped as ``ts:too_old``.
EARLIEST_TS = datetime(2000, 1, 1)
#: Seconds a row's ``ts`` may lie ahead of the storing side's clock before it is dropped as
#: ``ts:future`` (the service's ``max_future_skew_s`` default; the ingest commands' too).
MAX_FUTURE_SKEW_S = 300.0
#: ``collector_drops.collector`` of the rows :func:`screen_tables` drops.
SCREEN_COLLECTOR = "ingest"

_INT64_MAX = float(2**63 - 1)


@dataclass(frozen=True, slots=True)
class Bound:
    """What one column may hold: ``low <= value <= high`` (None: unbounded), finite floats.

    ``required``: a NULL or bad value drops the whole row instead of NULLing the value.
    """

    column: str
    low: float | None = None
    high: float | None = None
    required: bool = False


def _nonneg(*columns: str, high: float | None = None) -> tuple[Bound, ...]:
    return tuple(Bound(c, 0.0, high) for c in columns)


def _ratios(*columns: str) -> tuple[Bound, ...]:
    return tuple(Bound(c, 0.0, 1.0) for c in columns)


_TS = Bound("ts", required=True)
_GPU_FIELDS = tuple(Bound(s.column, s.low * s.scale, s.high * s.scale) for s in FIELDS)

#: Table -> the rule of every numeric (and every required) column, in check order.
RULES: dict[str, tuple[Bound, ...]] = {
    "gpu_samples": (
        _TS,
        Bound("gpu_index", 0.0, 1023.0),
        Bound("mig_instance_id", 0.0, None),
        *_GPU_FIELDS,
    ),
    "container_samples": (
        _TS,
        *_nonneg(
            "memory_current_bytes",
            "memory_max_bytes",
            "memory_anon_bytes",
            "memory_file_bytes",
            "memory_kernel_bytes",
            "oom_events_total",
            "oom_kill_events_total",
            "cpu_periods_total",
            "cpu_throttled_periods_total",
        ),
        *_ratios(
            "memory_pressure_some_avg10_ratio",
            "memory_pressure_full_avg10_ratio",
            "cpu_pressure_some_avg10_ratio",
        ),
        *_nonneg(
            "memory_pressure_some_total_s",
            "cpu_pressure_some_total_s",
            "cpu_usage_s",
            "cpu_throttled_s",
            "cpu_limit_cores",
        ),
    ),
    "gpu_processes": (
        _TS,
        Bound("mig_instance_id", 0.0, None),
        *_nonneg("pid", "used_memory_bytes"),
    ),
    "requests": (
        _TS,
        Bound("model", required=True),
        Bound("latency_s", 0.0, None, required=True),
        *_nonneg("ttft_s", "inter_token_s", "prompt_tokens", "output_tokens"),
    ),
    "server_windows": (
        _TS,
        *_nonneg(
            "window_s",
            "completed",
            "throughput_rps",
            "requests_running",
            "requests_waiting",
        ),
        *_ratios("kv_cache_usage_ratio"),
        *_nonneg(
            "latency_mean_s",
            "latency_p50_s",
            "latency_p95_s",
            "latency_p99_s",
            "latency_error_bound_s",
            "ttft_p95_s",
            "inter_token_p95_s",
        ),
    ),
    "collector_drops": (_TS, Bound("count", 0.0, _INT64_MAX, required=True)),
    "numa_samples": (
        _TS,
        Bound("numa_node", 0.0, 1023.0),
        *_nonneg(
            "numa_hit_pages_total",
            "numa_miss_pages_total",
            "numa_foreign_pages_total",
            "interleave_hit_pages_total",
            "local_node_pages_total",
            "other_node_pages_total",
        ),
    ),
    "container_numa_samples": (
        _TS,
        Bound("numa_node", 0.0, 1023.0),
        *_nonneg("anon_bytes", "file_bytes"),
    ),
    "gpu_topology": (
        _TS,
        Bound("gpu_index", 0.0, 1023.0),
        Bound("numa_node", 0.0, 1023.0),
        *_nonneg("nvlink_links_active", "nvlink_links_total"),
    ),
    "gpu_links": (_TS,),
    "sync_delays": (_TS, Bound("delay_s", 0.0, None, required=True)),
}


@dataclass(frozen=True)
class Checked:
    """One table after :func:`check_rows`: what is kept, and what was dropped by reason."""

    table: pa.Table
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Screened:
    """A batch after :func:`screen_tables`: the tables to store and what was dropped, by
    ``"<table>.<column>:<why>"``."""

    tables: dict[str, pa.Table]
    dropped: Counter[str] = field(default_factory=Counter)

    def batch(self, *, at: datetime, node: str | None) -> dict[str, pa.Table]:
        """The tables to store: :attr:`tables` plus one ``collector_drops`` row per reason
        (collector :data:`SCREEN_COLLECTOR`, stamped ``at``, for ``node``)."""
        if not self.dropped:
            return self.tables
        tables = dict(self.tables)
        rows = drops_table(self.dropped, at=utc_naive(at), node=node, collector=SCREEN_COLLECTOR)
        sent = tables.get("collector_drops")
        tables["collector_drops"] = rows if sent is None else pa.concat_tables([sent, rows])
        return tables


def screen_tables(
    tables: Mapping[str, pa.Table],
    *,
    now: datetime,
    max_future_skew_s: float = MAX_FUTURE_SKEW_S,
) -> Screened:
    """Every table of a batch (each conformed to its schema already) through
    :func:`check_rows`, rows stamped after ``now + max_future_skew_s`` dropped as
    ``ts:future``: the one screening every ingest path applies before it stores."""
    latest = utc_naive(now) + timedelta(seconds=max_future_skew_s)
    kept: dict[str, pa.Table] = {}
    dropped: Counter[str] = Counter()
    for name, table in tables.items():
        checked = check_rows(name, table, latest=latest)
        kept[name] = checked.table
        dropped.update(checked.dropped)
    return Screened(kept, dropped)


def bound_of(table: str, column: str) -> Bound | None:
    """The rule of ``table.column``, or None when the column has none."""
    return next((b for b in RULES.get(table, ()) if b.column == column), None)


def value_problem(bound: Bound, value: float) -> str | None:
    """Why one number breaks ``bound`` (``non_finite``, ``negative`` ...), None when it fits.

    The scalar twin of :func:`check_rows`, for parsers that build rows one at a time.
    """
    if not math.isfinite(value):
        return "non_finite"
    if bound.low is not None and value < bound.low:
        return "negative" if bound.low == 0 else "below_min"
    if bound.high is not None and value > bound.high:
        return "above_max"
    return None


def check_rows(name: str, table: pa.Table, *, latest: datetime) -> Checked:
    """``table`` (already conformed to ``name``'s schema) with :data:`RULES` applied.

    ``latest`` (naive UTC) is the newest ``ts`` accepted; see the module docstring.
    """
    # Most batches break no rule: two reductions per column prove it, where the full check
    # below costs a dozen kernels per column (the ingest route's largest per-row cost).
    rules = tuple(b for b in RULES.get(name, ()) if not _clean(b, table.column(b.column), latest))
    if not rules:
        return Checked(table)
    keep = pa.array([True] * table.num_rows, pa.bool_())
    dropped: Counter[str] = Counter()
    for bound in (b for b in rules if b.required):
        for why, mask in _problems(bound, table.column(bound.column), latest):
            bad = pc.and_(mask, keep)  # a row already dropped is not counted again
            count = pc.sum(bad).as_py() or 0
            if count:
                dropped[f"{name}.{bound.column}:{why}"] += count
                keep = pc.and_(keep, pc.invert(bad))
    if dropped:
        table = table.filter(keep)
    for bound in (b for b in rules if not b.required):
        column = table.column(bound.column)
        any_bad = None
        for why, bad in _problems(bound, column, latest):
            count = pc.sum(bad).as_py() or 0
            if count:
                dropped[f"{name}.{bound.column}:{why}"] += count
                any_bad = bad if any_bad is None else pc.or_(any_bad, bad)
        if any_bad is not None:
            nulled = pc.if_else(any_bad, pa.scalar(None, column.type), column)
            table = table.set_column(
                table.schema.get_field_index(bound.column), bound.column, nulled
            )
    return Checked(table, dropped)


def _clean(bound: Bound, column: pa.ChunkedArray, latest: datetime) -> bool:
    """True when no value of ``column`` can break ``bound`` (what :func:`_problems` would flag),
    from its null count and its extremes; False means "look closer", never "bad".

    A numeric column without NULLs is read in place as a NumPy array (no copy for one
    chunk): a NaN makes both its extremes NaN and an infinity one of them, neither finite.
    Two NumPy reductions instead of two Arrow kernels and three scalar conversions: 0.46 ->
    0.23 ms for a bench batch of 40 such columns. With NULLs, Arrow's sum (finite only
    without NaN or infinity) and min_max, which skip them."""
    if column.null_count == len(column):
        return not (bound.required and len(column))
    if bound.required and column.null_count:
        return False
    kind = column.type
    if pa.types.is_timestamp(kind):
        extremes = pc.min_max(column)
        oldest, newest = extremes["min"].value, extremes["max"].value
        return bool(
            newest <= pa.scalar(latest, kind).value and oldest >= pa.scalar(EARLIEST_TS, kind).value
        )
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return True
    # float() rounds as Arrow's int-to-double cast in the comparisons of _problems does.
    if column.null_count == 0:
        values = column.to_numpy()
        least, most = float(values.min()), float(values.max())
        if not (math.isfinite(least) and math.isfinite(most)):
            return False
    else:
        if pa.types.is_floating(kind) and not math.isfinite(pc.sum(column).as_py()):
            return False  # a NaN or an infinity (or a sum that overflowed: look closer)
        if bound.low is None and bound.high is None:
            return True
        extremes = pc.min_max(column)
        least, most = float(extremes["min"].as_py()), float(extremes["max"].as_py())
    return (bound.low is None or least >= bound.low) and (bound.high is None or most <= bound.high)


def _problems(
    bound: Bound, column: pa.ChunkedArray, latest: datetime
) -> list[tuple[str, pa.ChunkedArray]]:
    """(why, mask) for each way ``column`` breaks ``bound``; masks are never NULL, and a
    value is flagged for its first problem only."""
    present = pc.is_valid(column)
    problems: list[tuple[str, pa.ChunkedArray]] = []
    if bound.required:
        problems.append(("missing", pc.invert(present)))
    if pa.types.is_timestamp(column.type):
        problems.append(("future", _flag(pc.greater(column, pa.scalar(latest, column.type)))))
        problems.append(("too_old", _flag(pc.less(column, pa.scalar(EARLIEST_TS, column.type)))))
        return problems
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        return problems
    finite = present
    if pa.types.is_floating(column.type):
        non_finite = _flag(pc.and_(present, pc.invert(pc.is_finite(column))))
        problems.append(("non_finite", non_finite))
        finite = pc.and_(present, pc.invert(non_finite))
    low, high = _limits(bound, column.type)
    if low is not None:
        why = "negative" if bound.low == 0 else "below_min"
        problems.append((why, _flag(pc.and_(finite, pc.less(column, low)))))
    if high is not None:
        problems.append(("above_max", _flag(pc.and_(finite, pc.greater(column, high)))))
    return problems


def _limits(bound: Bound, kind: pa.DataType) -> tuple[pa.Scalar | None, pa.Scalar | None]:
    """The bounds as scalars of the column's own type. An integer column compared with a
    float bound would be cast to double, which Arrow refuses past 2**53; for integers
    ``v < low`` is ``v < ceil(low)`` and ``v > high`` is ``v > floor(high)``, and a bound
    outside the type's range can break no value (None)."""
    if not pa.types.is_integer(kind):
        low = None if bound.low is None else pa.scalar(bound.low, pa.float64())
        high = None if bound.high is None else pa.scalar(bound.high, pa.float64())
        return low, high
    width = kind.bit_width
    lowest, highest = (
        (0, 2**width - 1)
        if pa.types.is_unsigned_integer(kind)
        else (
            -(2 ** (width - 1)),
            2 ** (width - 1) - 1,
        )
    )
    low_i = None if bound.low is None else math.ceil(bound.low)
    high_i = None if bound.high is None else math.floor(bound.high)
    return (
        None if low_i is None or low_i <= lowest else pa.scalar(low_i, kind),
        None if high_i is None or high_i >= highest else pa.scalar(high_i, kind),
    )


def _flag(mask: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.fill_null(mask, False)
