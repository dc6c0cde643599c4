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
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sits_observe.analytics.heatmap.document import HeatmapJson, heatmap_json
from sits_observe.analytics.heatmap.grid import Heatmap, HeatmapGroup, compute_heatmaps
from sits_observe.analytics.heatmap.histograms import histogram_heatmaps
from sits_observe.analytics.heatmap.knee import SafeMax, Verdict, find_safe_max
from sits_observe.analytics.heatmap.settings import US_PER_S, HeatmapSettings, exact
from sits_observe.analytics.serving.latency import RequestSelection, explain_empty, known_values
from sits_observe.domain.units import Unit
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

    bin_s: float = Field(
        1.0,
        gt=0,
        le=86_400,
        description="time bin: requests are grouped by completion time into bins this long, "
        "a bin's throughput is its requests / bin_s (whole microseconds)",
    )
    latency_bin_ms: float = _as_in_analytics("latency_bin_ms")
    throughput_bin_rps: float = _as_in_analytics("throughput_bin_rps")
    slo_ms: float | None = _as_in_analytics("slo_ms")
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
    def _whole_microseconds(cls, value: float) -> float:
        if (exact(value) * US_PER_S).denominator != 1:
            raise ValueError(f"{value!r} s is not a whole number of microseconds")
        return value

    @field_validator("latency_bin_ms", "throughput_bin_rps")
    @classmethod
    def _as_the_heatmap_allows(cls, value: float, info: ValidationInfo) -> float:
        try:
            HeatmapSettings.model_validate({info.field_name: value})
        except ValidationError as exc:
            raise ValueError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
        return value

    def heatmap(self) -> HeatmapSettings:
        """The analytics' settings."""
        return HeatmapSettings(
            window_s=self.bin_s,
            latency_bin_ms=self.latency_bin_ms,
            throughput_bin_rps=self.throughput_bin_rps,
            slo_ms=self.slo_ms,
            min_bin_requests=self.min_bin_requests,
        )

    def selection(self, window: Window) -> RequestSelection:
        """The requests of ``window``, from its first whole time bin on."""
        since = None if window.since is None else first_bin_at(window.since, self.bin_s)
        return RequestSelection(
            model=self.model, since=since, until=window.until, include_failed=self.include_failed
        )


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
        col("knee_p95_s", "P95 at knee", Unit.seconds),
        col("depth_ratio", "knee depth", Unit.ratio, wide=True),
        col("safe_max_rps", "safe max", Unit.rate),
        col("safe_max_p95_s", "P95 at max", Unit.seconds),
        col("exceeded_from_rps", "SLO broken from", Unit.rate),
        col("safe_max_hi_rps", "safe max to", Unit.rate, wide=True),
    )


def build(store: Store, window: Window, query: HeatmapQuery) -> Report:
    """The ``heatmap`` report over ``window``."""
    require_rows(store, window, "requests", FILLED_BY)
    selection = query.selection(window)
    group = None if query.by is None else GROUP_COLUMNS[query.by]
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
    labels = gpu_labels(store, window) if query.by is HeatmapBy.gpu else {}
    keys = [_keys(query.by, h.group, labels) for h in maps]
    docs = [heatmap_json(h) for h in maps]
    main = _main_table(query, maps, keys, docs)
    others = () if query.table is HeatmapTable.bins else (_bins_table(query, keys, docs),)
    limits = _limits_table(query, maps, keys, docs)
    facts = {**_facts(query, selection, maps, keys, docs), "store": "duckdb"}
    notes = [*_model_notes(store, query, window), *_verdict_notes(query, maps, keys)]
    return Report("heatmap", window, main, (*others, limits), tuple(notes), facts)


def request_heatmaps(
    store: Store,
    window: Window,
    settings: HeatmapSettings,
    *,
    by: HeatmapGroup | None = "model",
    model: str | None = None,
    include_failed: bool = False,
) -> list[Heatmap]:
    """The heatmaps of the requests of ``window`` from its first whole time bin on (bins of
    ``settings.window_s``), one per ``by`` group: the report's tables, knee and safe maximum
    come from them, and so do the exporter's ``sits_knee_requests_per_second`` and
    ``sits_safe_max_requests_per_second``. Empty when no request is selected."""
    since = None if window.since is None else first_bin_at(window.since, settings.window_s)
    chosen = RequestSelection(
        model=model, since=since, until=window.until, include_failed=include_failed
    )
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
    maps = result.maps
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
        "knee and safe maximum throughput"
        + ("" if query.slo_ms is None else f" at P95 <= {query.slo_ms:g} ms"),
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
            _bins_columns(query.by, query.slo_ms is not None),
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
        _bins_columns(query.by, query.slo_ms is not None, estimate=True),
    )


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


def _model_notes(store: Store, query: HeatmapQuery, window: Window) -> list[str]:
    if query.by is not None or query.model is not None:
        return []
    models = known_values(store, "model", since=window.since, until=window.until)
    if len(models) <= 1:
        return []
    return [
        f"one heatmap over {len(models)} models "
        f"({', '.join(models[:5])}{' ...' if len(models) > 5 else ''}); "
        "pick one with --model, or --by model for one each"
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
