"""Timestamps of request logs: ISO text in the formats logs use (sniffed once per column),
or epoch numbers in seconds or milliseconds, checked against a plausible range."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

#: Epoch values at or above this are milliseconds (1e11 s = year 5138; 1e11 ms = 1973-03-03).
EPOCH_MS_FROM = 1e11


#: Epoch values at or above this are rejected (1e14 ms = year 5138).
EPOCH_LIMIT = 1e14


SECONDS_PER_UNIT: dict[str, float] = {"s": 1.0, "ms": 1e-3}


def _from_epoch(value: pl.Expr, whole: pl.Expr | None = None) -> pl.Expr:
    """Epoch seconds / milliseconds (rule in the module docstring) -> datetime, else null.

    ``whole`` is the same value as Int64 where it is integral: it is scaled in integers, so a
    millisecond epoch keeps every digit (a float has 53 bits, short of some microsecond
    epochs); fractional values are scaled as floats and rounded to the microsecond.
    """
    in_seconds = value < EPOCH_MS_FROM
    micros_float = pl.when(in_seconds).then(value * 1e6).otherwise(value * 1e3).round(0)
    micros = micros_float.cast(pl.Int64, strict=False)
    if whole is not None:
        scaled = pl.when(in_seconds).then(whole * 1_000_000).otherwise(whole * 1_000)
        micros = pl.coalesce(scaled, micros)
    valid = value.is_finite() & (value >= 0) & (value < EPOCH_LIMIT)
    return pl.when(valid).then(micros).otherwise(None).cast(pl.Datetime("us"))


def _epoch_out_of_range(value: pl.Expr) -> pl.Expr:
    return value.is_not_null() & ~(value.is_finite() & (value >= 0) & (value < EPOCH_LIMIT))


def _text_parsers() -> list[Callable[[pl.Series], pl.Series]]:
    """Every accepted text form, each a vectorised parser giving naive UTC or null."""

    def zoned(fmt: str) -> Callable[[pl.Series], pl.Series]:
        # chrono's %#z takes Z, +02:00, +0200 and +02; Polars returns UTC, the zone is dropped
        return lambda s: s.str.to_datetime(fmt, strict=False, time_unit="us").dt.replace_time_zone(
            None
        )

    def naive(fmt: str) -> Callable[[pl.Series], pl.Series]:
        return lambda s: s.str.to_datetime(fmt, strict=False, time_unit="us")

    def epoch(s: pl.Series) -> pl.Series:
        frame = s.to_frame("v")
        value = pl.col("v").cast(pl.Float64, strict=False)
        return frame.select(
            _from_epoch(value, pl.col("v").cast(pl.Int64, strict=False))
        ).to_series()

    parsers = [zoned(f"%Y-%m-%d{sep}%H:%M:%S%.f%#z") for sep in ("T", " ")]
    parsers += [naive(f"%Y-%m-%d{sep}%H:%M:%S%.f") for sep in ("T", " ")]
    parsers += [zoned(f"%Y-%m-%d{sep}%H:%M%#z") for sep in ("T", " ")]
    parsers += [naive(f"%Y-%m-%d{sep}%H:%M") for sep in ("T", " ")]
    return [*parsers, naive("%Y-%m-%d"), epoch]


#: how many values decide the order the text parsers are tried in
_SNIFF_VALUES = 64


def _parse_text(text: pl.Series) -> pl.Series:
    """Parse text timestamps, trying each parser only on the rows still unparsed.

    Parsers are ordered by how many of the first values they read, so a file in one form pays
    one parsing pass (a failing ``strptime`` pass over millions of rows costs seconds).
    """
    parsers = _text_parsers()
    sample = text.drop_nulls().head(_SNIFF_VALUES)
    hits = [int(parse(sample).is_not_null().sum()) for parse in parsers]
    order = sorted(range(len(parsers)), key=lambda i: -hits[i])
    result = pl.repeat(None, text.len(), dtype=pl.Datetime("us"), eager=True).alias("ts")
    pending = text.is_not_null()
    for i in order:
        rows = pending.arg_true()
        if rows.len() == 0:
            break
        parsed = parsers[i](text.gather(rows))
        ok = parsed.is_not_null()
        if ok.any():
            result = result.scatter(rows.filter(ok), parsed.filter(ok))
            pending = pending.scatter(rows.filter(ok), False)
    return result


def parse_timestamps(values: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Timestamps of any accepted form -> (naive-UTC ``Datetime("us")`` or null, out-of-range).

    The second series is true where a value is a number outside the epoch rule (negative,
    not finite, or >= 1e14); see the module docstring for every accepted form.
    """
    dtype = values.dtype
    no = pl.repeat(False, values.len(), dtype=pl.Boolean, eager=True)
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone is not None:
            values = values.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
        return values.dt.cast_time_unit("us"), no
    if dtype == pl.Date:
        return values.cast(pl.Datetime("us")), no
    frame = values.to_frame("v")
    if dtype.is_numeric():
        value = pl.col("v").cast(pl.Float64)
        whole = pl.col("v").cast(pl.Int64, strict=False) if dtype.is_integer() else None
        out = frame.select(_from_epoch(value, whole).alias("ts"), _epoch_out_of_range(value))
        return out.to_series(0), out.to_series(1)
    if dtype == pl.String:
        text = values.str.strip_chars()
        text = text.set(text == "", None)
        number = text.cast(pl.Float64, strict=False)
        out_of_range = number.is_not_null() & ~(
            number.is_finite() & (number >= 0) & (number < EPOCH_LIMIT)
        )
        return _parse_text(text), out_of_range
    return pl.repeat(None, values.len(), dtype=pl.Datetime("us"), eager=True), no
