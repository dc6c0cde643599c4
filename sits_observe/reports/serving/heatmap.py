"""Report ``heatmap``: how latency behaves as throughput grows, with the knee and the safe
maximum throughput at a P95 SLO.

Requests are grouped by completion time into bins of ``bin_s`` seconds (whole multiples of
``bin_s`` since the epoch; a bin's throughput is its requests / ``bin_s``); each request adds
one count to the cell (its latency bin, its time bin's throughput bin). The throughput bins
carry the EXACT P50 / P95 / P99 of all their requests: the evidence the knee (Kneedle) and
the safe maximum (the highest bin whose P95, and every lower bin's, meets ``slo_ms``) rest on
(docs/analytics/latency.md, :mod:`sits_observe.analytics.heatmap.grid`).

Tables: the one ``table`` names is the main one (``-o csv`` writes it): ``bins`` (per
throughput bin, the default), ``cells`` (requests per latency x throughput cell) or
``windows`` (per time bin). ``limits`` (knee and safe maximum per heatmap) is always there,
and so is ``bins`` when it is not the main table; the knee and the safe maximum are in
``facts.heatmaps`` too. The first time bin starts at the first bin boundary in the window,
so every bin read is whole and no request before the window is read.

From a PromQL store (``--promql-url``) the same tables come from vLLM's latency histograms,
one point per time bin, with estimated quantiles (:func:`build_promql`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import copy
from dataclasses import replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sits_observe.analytics.heatmap.bins import DataBins, data_bins
from sits_observe.analytics.heatmap.document import HeatmapJson, heatmap_json
from sits_observe.analytics.heatmap.grid import Heatmap, HeatmapGroup, compute_heatmaps
from sits_observe.analytics.heatmap.histograms import histogram_heatmaps
from sits_observe.analytics.heatmap.knee import SafeMax, Verdict, find_safe_max
from sits_observe.analytics.heatmap.settings import US_PER_S, HeatmapSettings, exact
from sits_observe.analytics.serving.latency import RequestSelection, explain_empty, known_values
from sits_observe.domain.units import Unit
from sits_observe.domain.validation import named_seconds
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.inventory.names import gpu_labels
from sits_observe.reports.result import Column, Report, ReportTable, col, table_of
from sits_observe.reports.serving.latency import GROUP_COLUMNS, LatencyGroup
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLServerSource

FILLED_BY = (
    "`sits-observe ingest requests`, the node agent following a request log or `sits-observe demo`"
)


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


def key_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    """The group columns of every table (none for one heatmap over all requests)."""
    if by is None:
        return ()
    if by is HeatmapBy.gpu:
        return (col("gpu", "GPU"), col("gpu_uuid", "GPU UUID", wide=True))
    return (col(by.value, by.value),)


def key_name(by: HeatmapBy | None) -> str | None:
    """The row key that tells the heatmaps apart (the UUID for GPUs)."""
    if by is None:
        return None
    return "gpu_uuid" if by is HeatmapBy.gpu else by.value


def _bins_columns(by: HeatmapBy | None, slo: bool, *, estimate: bool = False) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("throughput_lo_rps", "rps bin", Unit.rate),
        col("throughput_hi_rps", "rps to", Unit.rate, wide=True),
        col("windows", "time bins", Unit.integer, wide=True),
        col("requests", "requests", Unit.integer),
        col("p50_s", "P50", Unit.seconds),
        col("p95_s", "P95", Unit.seconds),
        *((col("p95_error_s", "P95 +-", Unit.seconds),) if estimate else ()),
        col("p99_s", "P99", Unit.seconds),
        col("used", "used", Unit.flag),
        *((col("within_slo", "in SLO", Unit.flag),) if slo else ()),
    )


def _cells_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("latency_lo_ms", "latency ms", Unit.number),
        col("throughput_lo_rps", "rps bin", Unit.rate),
        col("count", "requests", Unit.integer),
        col("throughput_bin", "rps bin no", Unit.integer, wide=True),
        col("latency_bin", "latency bin no", Unit.integer, wide=True),
    )


def _windows_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("start", "start", Unit.time),
        col("throughput_rps", "throughput", Unit.rate),
        col("count", "requests", Unit.integer),
        col("p50_s", "P50", Unit.seconds),
        col("p95_s", "P95", Unit.seconds),
        col("p99_s", "P99", Unit.seconds),
        col("throughput_bin", "rps bin no", Unit.integer, wide=True),
    )


def _limits_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("requests", "requests", Unit.integer),
        col("windows", "time bins", Unit.integer, wide=True),
        col("knee_rps", "knee", Unit.rate),
        col("knee_p95_s", "knee P95", Unit.seconds),
        col("depth_ratio", "knee depth", Unit.ratio, wide=True),
        col("slo_s", "SLO P95", Unit.seconds),
        col("safe_max_rps", "safe max", Unit.rate),
        col("safe_max_p95_s", "max P95", Unit.seconds),
        col("exceeded_from_rps", "over SLO at", Unit.rate),
        col("safe_max_hi_rps", "safe max to", Unit.rate, wide=True),
    )


def build(store: Store, window: Window, query: HeatmapQuery) -> Report:
    """The ``heatmap`` report over ``window``: bins left open are chosen from the requests
    (:mod:`sits_observe.analytics.heatmap.bins`), and each heatmap's safe maximum is at its
    model's SLO, when one is set."""
    require_rows(store, window, "requests", FILLED_BY)
    group = None if query.by is None else GROUP_COLUMNS[query.by]
    bins = _data_bins(store, window, query, group)
    query = query.with_bins(bins)
    selection = query.selection(window, last_bin_end(store, window.until, query.heatmap().window_s))
    maps = request_heatmaps(
        store,
        window,
        query.heatmap(),
        by=group,
        model=query.model,
        include_failed=query.include_failed,
    )
    if not maps:
        raise NoDataError(explain_empty(store, selection))
    models = _models(store, query, window)
    maps = [_at_slo(h, query, _model_of(query, h, models)) for h in maps]
    labels = gpu_labels(store, window) if query.by is HeatmapBy.gpu else {}
    keys = [_keys(query.by, h.group, labels) for h in maps]
    docs = [heatmap_json(h) for h in maps]
    main = _main_table(query, maps, keys, docs)
    others = () if query.table is HeatmapTable.bins else (_bins_table(query, keys, docs),)
    limits = _limits_table(query, maps, keys, docs)
    facts = {
        **_facts(query, selection, maps, keys, docs),
        "store": "duckdb",
        "bins_from_data": None if bins is None else bins.describe(),
    }
    notes = [
        *([] if bins is None else [bins.describe()]),
        *_model_notes(query, models),
        *_slo_notes(query, maps, keys, models),
        *_verdict_notes(query, maps, keys),
    ]
    return Report("heatmap", window, main, (*others, limits), tuple(notes), facts)


def _data_bins(
    store: Store, window: Window, query: HeatmapQuery, group: HeatmapGroup | None
) -> DataBins | None:
    """Bins from the requests for the ones ``query`` leaves open; None when it sets all."""
    if None not in (query.bin_s, query.latency_bin_ms, query.throughput_bin_rps):
        return None
    chosen = RequestSelection(
        model=query.model,
        since=window.since,
        until=window.until,
        include_failed=query.include_failed,
    )
    return data_bins(store, chosen, by=group, min_bin_requests=query.min_bin_requests)


def _models(store: Store, query: HeatmapQuery, window: Window) -> list[str]:
    """The models of the window's requests (only ``query.model`` when it names one)."""
    if query.model is not None:
        return [query.model]
    return known_values(store, "model", since=window.since, until=window.until)


def _model_of(query: HeatmapQuery, h: Heatmap, models: Sequence[str]) -> str | None:
    """The model whose SLO applies to ``h``: its group's, the one selected, or the only one."""
    if query.by is HeatmapBy.model:
        return h.group
    return models[0] if len(models) == 1 else None


def _at_slo(h: Heatmap, query: HeatmapQuery, model: str | None) -> Heatmap:
    """``h`` with its safe maximum at ``model``'s SLO (none without one)."""
    settings = query.heatmap(model)
    slo_s = query.slo_s_of(model)
    safe = None if slo_s is None else find_safe_max(h.bins, slo_s, settings.min_bin_requests)
    return replace(h, settings=settings, safe_max=safe)


def request_heatmaps(
    store: Store,
    window: Window,
    settings: HeatmapSettings,
    *,
    by: HeatmapGroup | None = "model",
    model: str | None = None,
    include_failed: bool = False,
) -> list[Heatmap]:
    """The heatmaps of the requests of ``window``'s whole time bins (bins of
    ``settings.window_s``: from the first whole one on, up to the end of the last,
    :func:`last_bin_end`), one per ``by`` group: the
    report's tables, knee and safe maximum come from them, and so do the exporter's
    ``sits_knee_requests_per_second`` and ``sits_safe_max_requests_per_second``. Empty when
    no request is selected."""
    since = None if window.since is None else first_bin_at(window.since, settings.window_s)
    until = last_bin_end(store, window.until, settings.window_s)
    chosen = RequestSelection(model=model, since=since, until=until, include_failed=include_failed)
    return compute_heatmaps(store, settings, selection=chosen, by=by)


def safe_max_at(heatmap: Heatmap, slo_s: float, settings: HeatmapSettings) -> Verdict[SafeMax]:
    """The safe maximum of ``heatmap``'s throughput bins at a P95 SLO of ``slo_s`` (the
    verdict the heatmap holds for ``settings.slo_ms``, for another SLO: one per model)."""
    return find_safe_max(heatmap.bins, slo_s, settings.min_bin_requests)


def build_promql(reader: PromQLReader, window: Window, query: HeatmapQuery) -> Report:
    """The ``heatmap`` from the vLLM latency histograms of a PromQL store: read one point per
    time bin, each bin's requests are the difference of two points, and every quantile is an
    ESTIMATE within its bucket (:mod:`sits_observe.analytics.heatmap.histograms`)."""
    if query.by is HeatmapBy.gpu:
        raise ConfigError(
            "latency histograms do not know the GPU: with --promql-url use --by model, pod or "
            "node (--by gpu needs the request log: --db)"
        )
    if query.bin_s is None and reader.step_s is not None:
        query = query.model_copy(update={"bin_s": reader.step_s})
    # Histograms hold no request rate to choose bins from: the fixed defaults.
    query = query.with_bins(None)
    assert query.bin_s is not None
    if reader.step_s is not None and reader.step_s != query.bin_s:
        raise ConfigError(
            f"heatmap reads one point per time bin: --promql-step-s {reader.step_s:g} differs "
            f"from --bin-s {query.bin_s:g}; leave --promql-step-s out"
        )
    assert window.since is not None  # run_promql_report requires --since
    selection = query.selection(window)
    assert selection.since is not None
    if selection.since >= window.until:
        raise NoDataError(f"no whole time bin of {query.bin_s:g} s in {window.describe()}")
    source = PromQLServerSource(reader.client, matchers=reader.matchers)
    snapshots = source.histogram_snapshots(selection.since, window.until, step_s=query.bin_s)
    if query.model is not None:
        snapshots = snapshots.filter(pc.equal(snapshots.column("model"), query.model))
    group = None if query.by is None else GROUP_COLUMNS[query.by]
    result = histogram_heatmaps(snapshots, query.heatmap(), by=group)
    if not result.maps:
        raise NoDataError(
            f"no vLLM latency histogram with requests in {window.describe()}"
            + ("" if query.model is None else f" for model {query.model}")
            + "; check --promql-url, --promql-matchers and --since"
        )
    models = (
        [query.model]
        if query.model is not None
        else sorted({m for m in snapshots.column("model").to_pylist() if m is not None})
    )
    maps = [_at_slo(h, query, _model_of(query, h, models)) for h in result.maps]
    keys = [_keys(query.by, h.group, {}) for h in maps]
    docs = [heatmap_json(h) for h in maps]
    errors = [{e.throughput_lo_rps: e.p95_error_s for e in per} for per in result.errors]
    bins = _bins_table(query, keys, docs, errors)
    main = bins if query.table is HeatmapTable.bins else _main_table(query, maps, keys, docs)
    others = () if query.table is HeatmapTable.bins else (bins,)
    limits = _limits_table(query, maps, keys, docs)
    facts = {**_facts(query, selection, maps, keys, docs), "store": "promql"}
    notes = [
        "ESTIMATES from histogram buckets: request counts and throughput are exact; each "
        "quantile lies within its bucket (P95 +- in the bins table; a P95 SLO on a bucket bound "
        "makes the safe maximum's verdict exact); the cells' latency axis is the histogram's "
        "buckets, not --latency-bin-ms",
        *(f"left out {n} time bin(s) of a series: {why}" for why, n in result.skipped.items()),
        *_slo_notes(query, maps, keys, models),
        *_verdict_notes(query, maps, keys),
    ]
    if not query.include_failed:
        notes.insert(1, "histograms count every finished request: failed ones are not set apart")
    return Report("heatmap", window, main, (*others, limits), tuple(notes), facts)


def _limits_table(
    query: HeatmapQuery,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
) -> ReportTable:
    return table_of(
        "limits",
        "knee, and safe maximum throughput at the P95 SLO",
        [_limits_row(k, h, d) for k, h, d in zip(keys, maps, docs, strict=True)],
        _limits_columns(query.by),
    )


def _bins_table(
    query: HeatmapQuery,
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
    errors: Sequence[Mapping[float, float]] | None = None,
) -> ReportTable:
    """Per throughput bin; with ``errors`` (per heatmap, P95 error bound by bin) estimates."""
    if errors is None:
        return table_of(
            "bins",
            "P95 per throughput bin (exact; the evidence for knee and safe max)",
            [{**k, **b} for k, d in zip(keys, docs, strict=True) for b in d["throughput_bins"]],
            _bins_columns(query.by, _any_slo(docs)),
        )
    return table_of(
        "bins",
        "P95 per throughput bin (ESTIMATES from histogram buckets; the evidence for knee and "
        "safe max)",
        [
            {**k, **b, "p95_error_s": e[b["throughput_lo_rps"]]}
            for k, d, e in zip(keys, docs, errors, strict=True)
            for b in d["throughput_bins"]
        ],
        _bins_columns(query.by, _any_slo(docs), estimate=True),
    )


def _any_slo(docs: Sequence[HeatmapJson]) -> bool:
    return any(d["slo_ms"] is not None for d in docs)


def _main_table(
    query: HeatmapQuery,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
) -> ReportTable:
    if query.table is HeatmapTable.bins:
        return _bins_table(query, keys, docs)
    pairs = zip(keys, maps, strict=True)
    if query.table is HeatmapTable.cells:
        return table_of(
            "cells",
            "requests per cell (latency bin x throughput bin of its time bin)",
            [{**k, **c} for k, h in pairs for c in h.cells.to_pylist()],
            _cells_columns(query.by),
        )
    return table_of(
        "windows",
        f"time bins of {query.bin_s:g} s (bins without requests do not appear)",
        [{**k, **w} for k, h in pairs for w in h.windows.to_pylist()],
        _windows_columns(query.by),
    )


def _keys(by: HeatmapBy | None, group: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    if by is None:
        return {}
    if by is HeatmapBy.gpu:
        return {"gpu": None if group is None else labels.get(group, group), "gpu_uuid": group}
    return {by.value: group}


def _limits_row(key: Mapping[str, Any], h: Heatmap, doc: Mapping[str, Any]) -> dict[str, Any]:
    knee, safe = doc["knee"] or {}, doc["safe_max"] or {}
    return {
        **key,
        "requests": h.requests,
        "windows": h.windows.num_rows,
        "knee_rps": knee.get("throughput_lo_rps"),
        "knee_p95_s": knee.get("p95_s"),
        "depth_ratio": knee.get("depth_ratio"),
        "slo_s": None if h.settings.slo_ms is None else h.settings.slo_ms / 1000,
        "safe_max_rps": safe.get("throughput_lo_rps"),
        "safe_max_hi_rps": safe.get("throughput_hi_rps"),
        "safe_max_p95_s": safe.get("p95_s"),
        "exceeded_from_rps": safe.get("exceeded_from_rps"),
    }


def _facts(
    query: HeatmapQuery,
    selection: RequestSelection,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    return {
        **query.model_dump(mode="json"),
        "first_bin_at": selection.since,
        "requests": sum(h.requests for h in maps),
        "heatmaps": [
            {
                **k,
                "requests": h.requests,
                "windows": h.windows.num_rows,
                "slo_ms": h.settings.slo_ms,
                "knee": d["knee"],
                "safe_max": d["safe_max"],
                "notes": d["notes"],
                # A histogram's uneven latency bins (PromQL), for the grid read back.
                **(
                    {}
                    if h.latency_edges_ms is None
                    else {"latency_edges_ms": list(h.latency_edges_ms)}
                ),
            }
            for k, h, d in zip(keys, maps, docs, strict=True)
        ],
    }


def _model_notes(query: HeatmapQuery, models: Sequence[str]) -> list[str]:
    if query.by is not None or query.model is not None or len(models) <= 1:
        return []
    return [
        f"one heatmap over {len(models)} models "
        f"({', '.join(models[:5])}{' ...' if len(models) > 5 else ''}); "
        "pick one with --model, or --by model for one each"
    ]


def _slo_notes(
    query: HeatmapQuery,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    models: Sequence[str],
) -> list[str]:
    """Say plainly which heatmaps have no SLO to find a safe maximum at, and how to set one."""
    if all(h.safe_max is not None for h in maps):
        return []
    if query.by is HeatmapBy.model or len(models) == 1:
        names = [m for h in maps if h.safe_max is None for m in [_model_of(query, h, models)]]
        unset = ", ".join(sorted({n or "(no model)" for n in names}))
        return [
            f"no P95 SLO set for {unset}, so no safe maximum: set one with "
            f"--slo {names[0] or 'MODEL'}=SECONDS (or --slo-ms for every model)"
        ]
    return [
        "no P95 SLO set for these requests of several models, so no safe maximum: set "
        "--slo-ms, or pick a model (--model, --by model) and set --slo MODEL=SECONDS"
    ]


def _verdict_notes(
    query: HeatmapQuery, maps: Sequence[Heatmap], keys: Sequence[Mapping[str, Any]]
) -> list[str]:
    notes: list[str] = []
    if query.by is not None and any(h.group is None for h in maps):
        notes.append(
            f"requests without a recorded {query.by.value} form one heatmap "
            f"(its {query.by.value} empty)"
        )
    for key, h in zip(keys, maps, strict=True):
        prefix = "" if query.by is None else f"{query.by.value} {next(iter(key.values()))}: "
        verdicts = [h.knee.note] + ([h.safe_max.note] if h.safe_max else [])
        notes.extend(prefix + v for v in verdicts)
    return notes


SPEC = ReportSpec(
    name="heatmap",
    summary="Latency-throughput heatmap: P95 per throughput bin, the knee and the safe maximum.",
    settings=HeatmapQuery,
    reads=("requests",),
    build=build,
    promql=build_promql,
)
