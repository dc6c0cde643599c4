"""Reader of the Alibaba GenAI trace's per-container GPU telemetry (cluster-trace-v2026-GenAI).

Two CSV files of production serving containers, one sample a minute for about a day
(``pod_gpu_memory_used_bytes_anon*.csv``: GPU memory in use, bytes; ``pod_gpu_duty_cycle_
anon*.csv``: GPU utilisation, percent), both with the columns ``timestamp_anon`` (seconds, a
shifted clock shared by the two files), ``value`` and ``container_ip`` (an MD5 hash: the join
key, one GPU per container). The files are read where they are (never copied).

Past this reader the domain names rule: ``series`` (the container), ``ts_s``,
``fb_used_bytes`` and ``gpu_util_ratio`` (percent / 100, 0-1). A row whose value is missing,
non-finite or out of range (negative bytes, a duty cycle outside 0-100 %) is dropped and
counted in :attr:`GenaiSeries.dropped`, as a collector drops vendor sentinels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from sits_observe.errors import ParseError

MEMORY_FILE = "pod_gpu_memory_used_bytes_anon_half.csv"
DUTY_FILE = "pod_gpu_duty_cycle_anon_half.csv"
_COLUMNS = {"timestamp_anon", "value", "container_ip"}


@dataclass(frozen=True)
class GenaiSeries:
    """One file as a frame (``series``, ``ts_s`` and the value column) and its dropped rows."""

    frame: pl.DataFrame
    dropped: int


def _read(path: Path) -> pl.DataFrame:
    try:
        frame = pl.read_csv(
            path, schema_overrides={"timestamp_anon": pl.Float64, "value": pl.Float64}
        )
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ParseError(f"cannot read GenAI trace file {path}: {exc}") from exc
    missing = _COLUMNS - set(frame.columns)
    if missing:
        raise ParseError(
            f"{path} lacks column(s) {sorted(missing)}; expected timestamp_anon, value, "
            "container_ip (cluster-trace-v2026-GenAI per-container telemetry)"
        )
    return frame


def _clean(frame: pl.DataFrame, value: pl.Expr, ok: pl.Expr, name: str) -> GenaiSeries:
    shaped = frame.select(
        pl.col("container_ip").alias("series"),
        pl.col("timestamp_anon").alias("ts_s"),
        value.alias(name),
    )
    keep = pl.col("series").is_not_null() & pl.col("ts_s").is_finite() & pl.col(name).is_finite()
    kept = shaped.filter((keep & ok).fill_null(False)).sort("series", "ts_s")
    return GenaiSeries(kept, shaped.height - kept.height)


def load_memory(path: Path) -> GenaiSeries:
    """``series``, ``ts_s``, ``fb_used_bytes`` (Float64) from the memory file at ``path``."""
    frame = _read(path)
    return _clean(frame, pl.col("value"), pl.col("fb_used_bytes") >= 0, "fb_used_bytes")


def load_duty_cycle(path: Path) -> GenaiSeries:
    """``series``, ``ts_s``, ``gpu_util_ratio`` (0-1) from the duty-cycle file at ``path``."""
    frame = _read(path)
    ok = pl.col("gpu_util_ratio").is_between(0.0, 1.0)
    return _clean(frame, pl.col("value") / 100.0, ok, "gpu_util_ratio")
