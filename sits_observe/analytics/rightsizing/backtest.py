"""Backtest of GPU memory reservations: fit on the first part of a trace, check on the rest.

For each strategy, a reservation per workload is fitted on the samples before the cut
(``fit_ratio`` of the trace's span, on the trace's one clock) and checked against every sample
after it, minute by minute:

- **above**: minutes whose use exceeds the reservation (a framebuffer limit that low would
  have failed an allocation: the OOM risk), as a share of the checked minutes;
- **unused**: reserved minus used on the minutes at or under the reservation (memory held but
  idle: the waste), mean bytes per container-minute.

A reservation never exceeds the GPU (``gpu_memory_bytes``); a strategy that has no answer for a
workload ("not enough data") reserves the whole GPU, as today. Only containers with samples on
both sides of the cut are checked: one first seen after the cut can be sized by no strategy.

Two protocols: :func:`split` fits once and checks the whole rest of the trace (the issue's
"fit on the first part of the day, check on the rest"); :func:`rolling` refits every
``step_s`` on everything seen so far and checks the next step only, as a recommender that
reruns (``recommend`` each pass, VPA every minute) is used. :func:`backtest` takes either and
sums the checked minutes over the splits.

The peers' rules, as their sources define them: krr's ``simple`` strategy sizes memory at the
maximum plus 15 % (``memory_buffer_percentage``) once it has ``points_required`` (100) points;
VPA at P90 of its daily peaks plus 15 % (:class:`RightsizingSettings` with a 24 h interval).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import polars as pl

from sits_observe.analytics.rightsizing.memory import (
    SERIES,
    TS_S,
    USED,
    RightsizingSettings,
    recommend_frame,
)

#: A strategy maps the fit samples (``series``, ``ts_s``, ``fb_used_bytes``, and the key
#: columns) to one reservation per key: columns ``by`` + ``reserved_bytes`` (NaN = no answer).
Fit = Callable[[pl.DataFrame, Sequence[str]], pl.DataFrame]


@dataclass(frozen=True)
class Strategy:
    """A named way to turn history into a reservation."""

    name: str
    fit: Fit


def whole_gpu() -> Strategy:
    """Today's reservation: the whole GPU (a NaN answer the GPU cap turns into the GPU)."""

    def fit(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
        keys = frame.select(list(by)).unique() if by else pl.DataFrame({"_": [0]})
        return keys.with_columns(reserved_bytes=pl.lit(float("nan"))).drop("_", strict=False)

    return Strategy("whole GPU", fit)


def krr_simple(buffer_ratio: float = 0.15, points_required: int = 100) -> Strategy:
    """krr ``simple``: max x (1 + buffer) with at least ``points_required`` points."""

    def fit(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
        agg = [
            pl.when(pl.len() >= points_required)
            .then(pl.col(USED).max() * (1 + buffer_ratio))
            .otherwise(float("nan"))
            .cast(pl.Float64)
            .alias("reserved_bytes")
        ]
        return frame.group_by(list(by)).agg(agg) if by else frame.select(agg)

    return Strategy(f"krr simple (max + {buffer_ratio:.0%})", fit)


def vpa_method(name: str, settings: RightsizingSettings) -> Strategy:
    """The decaying-histogram target of :func:`~.rightsizing.recommend_frame`."""

    def fit(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
        out = recommend_frame(frame, settings, by=by)
        return out.select(*by, pl.col("target_bytes").alias("reserved_bytes"))

    return Strategy(name, fit)


@dataclass(frozen=True)
class BacktestRow:
    """One strategy's result on the checked minutes (bytes; ratios 0-1)."""

    strategy: str
    gpu_memory_bytes: int
    workloads: int
    no_answer: int
    minutes: int
    minutes_above: int
    above_ratio: float
    unused_bytes_mean: float
    unused_vs_whole_ratio: float


@dataclass(frozen=True)
class Split:
    """The fit and check samples of the containers seen on both sides of the cut."""

    fit: pl.DataFrame
    check: pl.DataFrame
    cut_s: float
    containers: int
    dropped_containers: int


def split(frame: pl.DataFrame, fit_ratio: float) -> Split:
    """Samples before / from ``min + fit_ratio x (max - min)`` of ``ts_s``, for the series on
    both sides."""
    if not 0 < fit_ratio < 1:
        raise ValueError(f"fit_ratio must be in (0, 1), got {fit_ratio!r}")
    lo, hi = frame.get_column(TS_S).min(), frame.get_column(TS_S).max()
    cut = float(lo) + fit_ratio * (float(hi) - float(lo))  # type: ignore[arg-type]
    fit, check = frame.filter(pl.col(TS_S) < cut), frame.filter(pl.col(TS_S) >= cut)
    both = set(fit.get_column(SERIES).unique()) & set(check.get_column(SERIES).unique())
    every = frame.get_column(SERIES).n_unique()
    keep = pl.col(SERIES).is_in(sorted(both))
    return Split(fit.filter(keep), check.filter(keep), cut, len(both), every - len(both))


def rolling(frame: pl.DataFrame, *, first_fit_s: float, step_s: float) -> tuple[Split, ...]:
    """One split per cut at ``min + first_fit_s``, then every ``step_s``: fit on every sample
    before the cut, check the samples in ``[cut, cut + step_s)``, for the series on both
    sides (a cut whose next step holds no sample is left out)."""
    if first_fit_s <= 0 or step_s <= 0:
        raise ValueError(f"first_fit_s and step_s must be > 0, got {first_fit_s!r}, {step_s!r}")
    lo, hi = frame.get_column(TS_S).min(), frame.get_column(TS_S).max()
    splits, cut = [], float(lo) + first_fit_s  # type: ignore[arg-type]
    while cut <= float(hi):  # type: ignore[arg-type]
        fit = frame.filter(pl.col(TS_S) < cut)
        check = frame.filter((pl.col(TS_S) >= cut) & (pl.col(TS_S) < cut + step_s))
        fitted, checked = set(fit.get_column(SERIES)), set(check.get_column(SERIES))
        both = fitted & checked
        if both:
            keep = pl.col(SERIES).is_in(sorted(both))
            dropped = len(fitted | checked) - len(both)
            splits.append(Split(fit.filter(keep), check.filter(keep), cut, len(both), dropped))
        cut += step_s
    return tuple(splits)


def backtest(
    data: Split | Sequence[Split],
    strategies: Sequence[Strategy],
    *,
    gpu_memory_bytes: int,
    by: Sequence[str] = (SERIES,),
) -> tuple[BacktestRow, ...]:
    """Every strategy on ``data`` (one split, or several whose checked minutes are summed:
    :func:`rolling`); ``by`` the workload key (per container by default; ``()``: all
    containers one workload, as VPA pools the pods of one owner)."""
    splits = (data,) if isinstance(data, Split) else tuple(data)
    rows = []
    whole = _evaluate(splits, whole_gpu(), gpu_memory_bytes, by)
    for strategy in strategies:
        row = _evaluate(splits, strategy, gpu_memory_bytes, by)
        reduction = (
            1 - row.unused_bytes_mean / whole.unused_bytes_mean if whole.unused_bytes_mean else 0.0
        )
        rows.append(replace(row, unused_vs_whole_ratio=reduction))
    return tuple(rows)


class _Checked(NamedTuple):
    """One strategy on one split: fits, minutes and bytes, to be summed over splits."""

    workloads: int
    no_answer: int
    minutes: int
    above: int
    unused_bytes: float


def _evaluate(
    splits: Sequence[Split], strategy: Strategy, gpu_memory_bytes: int, by: Sequence[str]
) -> BacktestRow:
    """The strategy's row over the splits: fits (``workloads``), minutes and bytes summed."""
    parts = [_evaluate_one(data, strategy, gpu_memory_bytes, by) for data in splits]
    minutes = sum(p.minutes for p in parts)
    above = sum(p.above for p in parts)
    return BacktestRow(
        strategy=strategy.name,
        gpu_memory_bytes=gpu_memory_bytes,
        workloads=sum(p.workloads for p in parts),
        no_answer=sum(p.no_answer for p in parts),
        minutes=minutes,
        minutes_above=above,
        above_ratio=above / minutes if minutes else 0.0,
        unused_bytes_mean=sum(p.unused_bytes for p in parts) / minutes if minutes else 0.0,
        unused_vs_whole_ratio=0.0,
    )


def _evaluate_one(
    data: Split, strategy: Strategy, gpu_memory_bytes: int, by: Sequence[str]
) -> _Checked:
    """The strategy fitted on ``data.fit`` and checked on ``data.check``."""
    cap = float(gpu_memory_bytes)
    answers = strategy.fit(data.fit, by)
    missing = pl.col("reserved_bytes").is_nan() | pl.col("reserved_bytes").is_null()
    no_answer = answers.filter(missing)
    reserved = answers.with_columns(
        reserved_bytes=pl.when(missing)
        .then(cap)
        .otherwise(pl.min_horizontal(pl.col("reserved_bytes"), pl.lit(cap)))
    )
    checked = (
        data.check.join(reserved, on=list(by), how="left")
        if by
        else data.check.with_columns(
            reserved_bytes=pl.lit(reserved.get_column("reserved_bytes")[0])
        )
    )
    checked = checked.with_columns(pl.col("reserved_bytes").fill_null(cap))
    summary = checked.select(
        pl.len().alias("minutes"),
        (pl.col(USED) > pl.col("reserved_bytes")).sum().alias("above"),
        (pl.col("reserved_bytes") - pl.col(USED)).clip(lower_bound=0).sum().alias("unused"),
    ).row(0, named=True)
    return _Checked(
        answers.height,
        no_answer.height,
        int(summary["minutes"]),
        int(summary["above"]),
        float(summary["unused"] or 0.0),
    )
