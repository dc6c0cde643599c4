"""Report ``heatmap``: how latency behaves as throughput grows, with the knee and the safe
maximum throughput at a P95 SLO.

Each request adds one count to the cell (its latency bin, its time bin's throughput bin;
the time bins and the settings: :mod:`sits_observe.reports.serving.heatmap_query`). The
throughput bins carry the EXACT P50 / P95 / P99 of all their requests: the evidence the knee
(Kneedle) and the safe maximum (the highest bin whose P95, and every lower bin's, meets
``slo_ms``) rest on (docs/analytics/latency.md, :mod:`sits_observe.analytics.heatmap.grid`).
Each heatmap's safe maximum is at its model's SLO. The tables and facts:
:mod:`sits_observe.reports.serving.heatmap_tables`.

From a PromQL store (``--promql-url``) the same tables come from vLLM's latency histograms,
one point per time bin, with estimated quantiles (:func:`build_promql`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow.compute as pc

from sits_observe.analytics.heatmap.bins import DataBins, data_bins
from sits_observe.analytics.heatmap.document import heatmap_json
from sits_observe.analytics.heatmap.grid import Heatmap, HeatmapGroup, compute_heatmaps
from sits_observe.analytics.heatmap.histograms import histogram_heatmaps
from sits_observe.analytics.heatmap.knee import SafeMax, Verdict, find_safe_max
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.analytics.serving.latency import RequestSelection, explain_empty, known_values
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.inventory.names import gpu_labels
from sits_observe.reports.result import Report
from sits_observe.reports.serving.heatmap_query import (
    HeatmapBy,
    HeatmapQuery,
    HeatmapTable,
    first_bin_at,
    last_bin_end,
)
from sits_observe.reports.serving.heatmap_tables import (
    bins_table,
    limits_table,
    main_table,
    report_facts,
    row_keys,
)
from sits_observe.reports.serving.latency import GROUP_COLUMNS
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLServerSource

FILLED_BY = (
    "`sits-observe ingest requests`, the node agent following a request log or `sits-observe demo`"
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
    keys = [row_keys(query.by, h.group, labels) for h in maps]
    docs = [heatmap_json(h) for h in maps]
    main = main_table(query, maps, keys, docs)
    others = () if query.table is HeatmapTable.bins else (bins_table(query, keys, docs),)
    limits = limits_table(query, maps, keys, docs)
    facts = {
        **report_facts(query, selection, maps, keys, docs),
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
    keys = [row_keys(query.by, h.group, {}) for h in maps]
    docs = [heatmap_json(h) for h in maps]
    errors = [{e.throughput_lo_rps: e.p95_error_s for e in per} for per in result.errors]
    bins = bins_table(query, keys, docs, errors)
    main = bins if query.table is HeatmapTable.bins else main_table(query, maps, keys, docs)
    others = () if query.table is HeatmapTable.bins else (bins,)
    limits = limits_table(query, maps, keys, docs)
    facts = {**report_facts(query, selection, maps, keys, docs), "store": "promql"}
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
