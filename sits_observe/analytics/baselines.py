"""Baselines with noise isolation: the 2.5-sigma sliding-window rule, and run comparisons.

SPEC "Baselines and noise": "a 60 s sliding window; a sample further than 2.5 sigma from the
window mean is excluded from baselines (and counted)". "Ablation: baseline reports compare runs
with one module disabled at a time."

The window of a sample at time t holds the *earlier* samples of the same series in
``[t - 60 s, t)``: the sample itself is left out, so one spike cannot widen its own sigma and
hide itself, and the rule can run online (it only looks back). Window statistics use every
earlier sample, kept or not (the spec's "window mean"), so a burst of spikes can mask the later
ones; the docs say so. A sample whose window holds fewer than ``min_window_samples`` values is
kept and counted as ``unchecked`` (a sigma of one or two values means nothing). Standard
deviation uses ``ddof`` (default 1, the sample estimator). NULL values are skipped and counted.

Percentiles interpolate linearly between order statistics (numpy's default), as every exact
quantile in sits_observe does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import polars as pl
import pyarrow as pa

from sits_observe.analytics.settings import BaselineSettings
from sits_observe.domain.tables import find_table
from sits_observe.domain.times import utc_naive
from sits_observe.errors import UnknownNameError
from sits_observe.store.duck import Store

KEPT = "kept"
EXCLUDED = "excluded"
UNCHECKED = "unchecked"

#: Series a metric is split into when the caller names no grouping.
DEFAULT_KEYS: dict[str, tuple[str, ...]] = {
    "gpu_samples": ("node", "gpu_uuid"),
    "container_samples": ("namespace", "pod", "container"),
    "requests": ("model",),
    "server_windows": ("model",),
}


def exclusion_reason(settings: BaselineSettings) -> str:
    """The human reason written beside every excluded count."""
    return f"outside {settings.sigma_k:g} sigma of the {settings.sliding_window_s:g} s window mean"


@dataclass(frozen=True)
class Baseline:
    """The noise-isolated baseline of one metric for one series (and run)."""

    run: str | None
    metric: str
    group: tuple[tuple[str, str | None], ...]
    mean: float | None
    p50: float | None
    p95: float | None
    samples_kept: int
    samples_excluded: int
    samples_unchecked: int
    samples_null: int
    exclusion_reason: str
    first_ts: datetime | None
    last_ts: datetime | None
    mean_change_ratio: float | None = None

    def group_dict(self) -> dict[str, str | None]:
        """The series key as a mapping, e.g. ``{"model": "llama"}``."""
        return dict(self.group)


def flag_noise(
    frame: pl.DataFrame,
    value_column: str,
    key_columns: Sequence[str],
    settings: BaselineSettings,
    *,
    ts_column: str = "ts",
) -> pl.DataFrame:
    """``frame``'s non-NULL rows, sorted, with ``window_mean``, ``window_std``,
    ``window_samples`` and ``status`` (``kept`` | ``excluded`` | ``unchecked``) added."""
    keys = list(key_columns)
    window = f"{round(settings.sliding_window_s * 1_000_000)}us"
    value = pl.col(value_column).cast(pl.Float64)
    data = frame.filter(pl.col(value_column).is_not_null()).sort([*keys, ts_column])
    # Constant helper for counting earlier samples in the window.
    data = data.with_columns(_one=pl.lit(1, dtype=pl.Int64))

    def rolling(expr: pl.Expr) -> pl.Expr:
        return expr.over(keys) if keys else expr

    data = data.with_columns(
        window_mean=rolling(value.rolling_mean_by(ts_column, window_size=window, closed="left")),
        window_std=rolling(
            value.rolling_std_by(ts_column, window_size=window, closed="left", ddof=settings.ddof)
        ),
        window_samples=rolling(
            pl.col("_one").rolling_sum_by(ts_column, window_size=window, closed="left")
        ).fill_null(0),
    ).drop("_one")
    sigma = pl.max_horizontal(pl.col("window_std").fill_null(0.0), pl.lit(settings.sigma_floor))
    too_few = pl.col("window_samples") < settings.min_window_samples
    outside = (value - pl.col("window_mean")).abs() > settings.sigma_k * sigma
    return data.with_columns(
        status=pl.when(too_few)
        .then(pl.lit(UNCHECKED))
        .when(outside)
        .then(pl.lit(EXCLUDED))
        .otherwise(pl.lit(KEPT))
    )


def _group(keys: Sequence[str], key: tuple[object, ...]) -> tuple[tuple[str, str | None], ...]:
    return tuple(zip(keys, (None if v is None else str(v) for v in key), strict=True))


def _quantile(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if values.size else None


def baselines(
    frame: pl.DataFrame,
    metric: str,
    key_columns: Sequence[str],
    settings: BaselineSettings,
    *,
    run: str | None = None,
    ts_column: str = "ts",
) -> tuple[Baseline, ...]:
    """One :class:`Baseline` per series of ``frame`` (grouped by ``key_columns``).

    Kept samples include the unchecked ones; ``mean``, ``p50`` and ``p95`` are over them.
    """
    keys = list(key_columns)
    if frame.height == 0:
        return ()
    nulls = (
        frame.filter(pl.col(metric).is_null()).group_by(keys).len()
        if keys
        else pl.DataFrame({"len": [frame.get_column(metric).null_count()]})
    )
    null_counts = {tuple(r[:-1]): int(r[-1]) for r in nulls.iter_rows()}
    flagged = flag_noise(frame, metric, keys, settings, ts_column=ts_column)
    reason = exclusion_reason(settings)
    groups = (
        flagged.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): flagged}
    )
    out: list[Baseline] = []
    seen: set[tuple[object, ...]] = set()
    for key, part in groups.items():
        seen.add(key)
        status = part.get_column("status")
        used = part.filter(pl.col("status") != EXCLUDED)
        values = used.get_column(metric).cast(pl.Float64).to_numpy()
        ts = part.get_column(ts_column)
        out.append(
            Baseline(
                run=run,
                metric=metric,
                group=_group(keys, key),
                mean=float(values.mean()) if values.size else None,
                p50=_quantile(values, 0.50),
                p95=_quantile(values, 0.95),
                samples_kept=int(values.size),
                samples_excluded=int((status == EXCLUDED).sum()),
                samples_unchecked=int((status == UNCHECKED).sum()),
                samples_null=null_counts.get(key, 0),
                exclusion_reason=reason,
                first_ts=ts.min(),  # type: ignore[arg-type]
                last_ts=ts.max(),  # type: ignore[arg-type]
            )
        )
    for key, count in null_counts.items():  # series with only NULL values
        if key not in seen:
            out.append(
                Baseline(
                    run,
                    metric,
                    _group(keys, key),
                    None,
                    None,
                    None,
                    0,
                    0,
                    0,
                    count,
                    reason,
                    None,
                    None,
                )
            )
    return tuple(out)


def compare_runs(
    runs: Sequence[tuple[str, pl.DataFrame]],
    metric: str,
    key_columns: Sequence[str],
    settings: BaselineSettings,
    *,
    ts_column: str = "ts",
) -> tuple[Baseline, ...]:
    """Baselines of each ``(label, frame)`` run, side by side (ablation).

    Every baseline after the first run carries ``mean_change_ratio`` = its mean / the first
    run's mean of the same series - 1 (None when either is missing or the first mean is 0).
    """
    first: dict[tuple[tuple[str, str | None], ...], float | None] = {}
    out: list[Baseline] = []
    for index, (label, frame) in enumerate(runs):
        for b in baselines(frame, metric, key_columns, settings, run=label, ts_column=ts_column):
            if index == 0:
                first[b.group] = b.mean
                out.append(b)
                continue
            ref = first.get(b.group)
            change = None if not ref or b.mean is None else b.mean / ref - 1
            out.append(replace(b, mean_change_ratio=change))
    return tuple(out)


# -- reading the store -------------------------------------------------------------------------


def numeric_columns(table: str) -> list[str]:
    """Columns of ``table`` a baseline can be computed for (integers and floats)."""
    schema = find_table(table).schema
    return [f.name for f in schema if pa_is_numeric(f.type)]


def pa_is_numeric(dtype: object) -> bool:
    """Whether an Arrow type is an integer or floating type."""
    import pyarrow.types as pat

    return bool(pat.is_integer(dtype) or pat.is_floating(dtype))


def _check_names(table: str, metric: str, key_columns: Sequence[str]) -> None:
    spec = find_table(table)
    valid = numeric_columns(table)
    if metric not in valid:
        raise UnknownNameError(
            f"{table} has no numeric column {metric!r}; valid: {', '.join(valid)}"
        )
    for key in key_columns:
        if spec.schema.get_field_index(key) < 0 or key == metric:
            raise UnknownNameError(
                f"{table} has no key column {key!r}; valid: {', '.join(spec.schema.names)}"
            )


def metric_from_rows(
    rows: pa.Table, table: str, metric: str, key_columns: Sequence[str]
) -> pl.DataFrame:
    """:func:`load_metric`'s frame from rows already read in ``table``'s schema (a source's,
    e.g. a PromQL store's): ``ts``, the keys and ``metric``, names checked the same way."""
    _check_names(table, metric, key_columns)
    ts = find_table(table).time_column
    frame = pl.from_arrow(rows.select([ts, *dict.fromkeys(key_columns), metric]))
    assert isinstance(frame, pl.DataFrame)
    return frame


def load_metric(
    store: Store,
    table: str,
    metric: str,
    key_columns: Sequence[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """``ts``, the keys and ``metric`` of ``table`` in ``[since, until)``.

    Names are checked against the table's schema (they cannot be SQL parameters). For
    ``requests``, failed requests (``ok = false``) are left out: their latency is not service.
    Raises :class:`UnknownNameError` listing the valid names on a bad table, metric or key.
    """
    _check_names(table, metric, key_columns)
    spec = find_table(table)
    ts = spec.time_column
    cols = ", ".join([ts, *dict.fromkeys(key_columns), metric])
    ok = " AND ok IS NOT FALSE" if table == "requests" else ""
    sql = (
        f"SELECT {cols} FROM {table} WHERE (?::TIMESTAMP IS NULL OR {ts} >= ?) "
        f"AND (?::TIMESTAMP IS NULL OR {ts} < ?){ok}"
    )
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return pl.DataFrame(store.query(sql, [lo, lo, hi, hi]))
