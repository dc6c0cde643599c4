"""Settings of the ``heatmap`` report (:class:`HeatmapQuery`) and the time bins it reads.

Requests are grouped by completion time into bins of ``bin_s`` seconds (whole multiples of
``bin_s`` since the epoch; a bin's throughput is its requests / ``bin_s``). The first time bin
starts at the first bin boundary in the window (:func:`first_bin_at`) and the last ends where
the data leaves it whole (:func:`last_bin_end`), so every bin read is whole and no request
before the window is read. Bins the query leaves open are chosen from the data
(:meth:`HeatmapQuery.with_bins`) or take :class:`HeatmapSettings`' fixed defaults.
"""

from __future__ import annotations

from copy import copy
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sits_observe.analytics.heatmap.bins import DataBins
from sits_observe.analytics.heatmap.settings import US_PER_S, HeatmapSettings, exact
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.validation import named_seconds
from sits_observe.reports.serving.latency import LatencyGroup
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: One heatmap per model, pod, node or GPU: the groupings of ``latency``, one definition.
HeatmapBy = LatencyGroup


class HeatmapTable(StrEnum):
    """Which table is the main one (the one ``-o csv`` writes)."""

    bins = "bins"
    cells = "cells"
    windows = "windows"


def _as_in_analytics(name: str) -> Any:
    """The field ``name`` of :class:`HeatmapSettings` (default, bounds, description): one
    definition for the report and the analytics."""
    return copy(HeatmapSettings.model_fields[name])


class HeatmapQuery(BaseModel):
    """Settings of the ``heatmap`` report: :class:`HeatmapSettings` (its ``window_s`` is the
    time bin ``bin_s`` here, the name every report gives a bin width) and the selection."""

    model_config = ConfigDict(frozen=True)

    bin_s: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="time bin: requests are grouped by completion time into bins this long, "
        "a bin's throughput is its requests / bin_s (whole microseconds; default: from the "
        "request rate, each bin holding about min_bin_requests requests)",
    )
    latency_bin_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        description="latency bin width, ms (whole microseconds; default: the P99 latency in "
        "about 40 bins)",
    )
    throughput_bin_rps: float | None = Field(
        None,
        gt=0,
        le=1e9,
        description="throughput bin width, requests/s (<= 9 decimals; default: the observed "
        "throughput range in up to 12 bins)",
    )
    slo_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        description="P95 latency SLO of every model without its own (--slo), ms, for the safe "
        "maximum; none: no safe maximum",
    )
    slo: tuple[str, ...] = Field(
        (),
        description="MODEL=SECONDS: a model's P95 latency SLO (repeat for each), for its safe "
        "maximum",
    )
    min_bin_requests: int = _as_in_analytics("min_bin_requests")
    by: HeatmapBy | None = Field(
        None, description="one heatmap per model, pod, node or GPU (default: one over all)"
    )
    model: str | None = Field(None, description="only this model")
    include_failed: bool = Field(False, description="count failed requests (ok = false) too")
    table: HeatmapTable = Field(
        HeatmapTable.bins,
        description="the table to list: bins (per throughput bin), cells (per latency x "
        "throughput cell) or windows (per time bin)",
    )

    @field_validator("bin_s")
    @classmethod
    def _whole_microseconds(cls, value: float | None) -> float | None:
        if value is not None and (exact(value) * US_PER_S).denominator != 1:
            raise ValueError(f"{value!r} s is not a whole number of microseconds")
        return value

    @field_validator("latency_bin_ms", "throughput_bin_rps")
    @classmethod
    def _as_the_heatmap_allows(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        try:
            HeatmapSettings.model_validate({info.field_name: value})
        except ValidationError as exc:
            raise ValueError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
        return value

    @field_validator("slo")
    @classmethod
    def _model_seconds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        named_seconds(value, "MODEL", "llama2-70b=40")
        return value

    def slo_s_of(self, model: str | None) -> float | None:
        """The P95 SLO of ``model`` in seconds: its own (``slo``), else ``slo_ms``; None when
        neither is set."""
        own = named_seconds(self.slo, "MODEL", "llama2-70b=40")
        if model is not None and model in own:
            return own[model]
        return None if self.slo_ms is None else self.slo_ms / 1000

    def with_bins(self, bins: DataBins | None) -> HeatmapQuery:
        """This query with every bin it leaves open taken from ``bins`` (or, without,
        :class:`HeatmapSettings`' fixed defaults)."""
        fixed = HeatmapSettings()
        chosen = {
            "bin_s": fixed.window_s if bins is None else bins.bin_s,
            "latency_bin_ms": fixed.latency_bin_ms if bins is None else bins.latency_bin_ms,
            "throughput_bin_rps": fixed.throughput_bin_rps
            if bins is None
            else bins.throughput_bin_rps,
        }
        return self.model_copy(update={k: v for k, v in chosen.items() if getattr(self, k) is None})

    def heatmap(self, model: str | None = None) -> HeatmapSettings:
        """The analytics' settings for ``model`` (its SLO, :meth:`slo_s_of`); bins left open
        take :class:`HeatmapSettings`' fixed defaults (:meth:`with_bins` first to have them
        from the data)."""
        slo_s = self.slo_s_of(model)
        q = self.with_bins(None)
        assert q.bin_s is not None and q.latency_bin_ms is not None
        assert q.throughput_bin_rps is not None
        return HeatmapSettings(
            window_s=q.bin_s,
            latency_bin_ms=q.latency_bin_ms,
            throughput_bin_rps=q.throughput_bin_rps,
            slo_ms=None if slo_s is None else slo_s * 1000,
            min_bin_requests=self.min_bin_requests,
        )

    def selection(self, window: Window, until: datetime | None = None) -> RequestSelection:
        """The requests of ``window``'s whole time bins: from its first whole bin on, up to
        ``until`` (the end of its last whole bin, :func:`last_bin_end`; default the window's
        end)."""
        bin_s = self.heatmap().window_s
        since = None if window.since is None else first_bin_at(window.since, bin_s)
        return RequestSelection(
            model=self.model,
            since=since,
            until=window.until if until is None else until,
            include_failed=self.include_failed,
        )


#: Mean gaps between requests after the newest one, at their rate in its time bin, past which
#: that bin is taken as cut short by the data's end: a Poisson stream leaves such a silence
#: e^-10 of the time (4.5e-5), a load falling off at a run's end (3-4 gaps) is kept, a demo
#: stopped 2 s into a 10 s bin (30 gaps) is not.
PARTIAL_GAPS = 10.0


def last_bin_end(store: Store, until: datetime, bin_s: float) -> datetime:
    """Where the last whole time bin of a window ending at ``until`` ends. While the store's
    requests go on past ``until``, its bins are whole up to ``until`` floored to a bin boundary.
    When they stop inside the window, the bin they stop in is whole unless they leave it
    emptier than its own rate explains (more than :data:`PARTIAL_GAPS` mean gaps between its
    requests to its end): then it ends at that bin's start. Such a bin counts a part of its
    time as a whole bin's, a low throughput with the latencies of a full one, which can break
    the SLO at the lowest bin (a demo stopped mid-bin)."""
    width = timedelta(microseconds=int(exact(bin_s) * US_PER_S))
    newest = store.scalar("SELECT max(ts) FROM requests")
    if not isinstance(newest, datetime):
        return _floor(until, width)
    newest = newest.replace(tzinfo=until.tzinfo) if newest.tzinfo is None else newest
    if newest >= until:
        return _floor(until, width)
    start = _floor(newest, width)
    held = store.scalar(
        "SELECT count(*) FROM requests WHERE ts >= ? AND ts <= ?",
        [start.replace(tzinfo=None), newest.replace(tzinfo=None)],
    )
    gap = (newest - start) / max(int(held or 0), 1)
    if start + width - newest > PARTIAL_GAPS * gap:
        return start
    return min(start + width, until)  # no request lies between ``newest`` and ``until``


def _floor(at: datetime, width: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=at.tzinfo)
    us = (at - epoch) // timedelta(microseconds=1)
    step = width // timedelta(microseconds=1)
    return epoch + timedelta(microseconds=us - us % step)


def first_bin_at(since: datetime, bin_s: float) -> datetime:
    """The first time bin boundary at or after ``since`` (bins start at multiples of
    ``bin_s`` since the epoch)."""
    epoch = datetime(1970, 1, 1, tzinfo=since.tzinfo)
    width_us = int(exact(bin_s) * US_PER_S)
    us = (since - epoch) // timedelta(microseconds=1)
    return epoch + timedelta(microseconds=-(-us // width_us) * width_us)
