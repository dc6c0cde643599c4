"""The request-latency reads of the ``latency`` report, one window each.

The ``latency`` report (:mod:`.latency`) builds its tables from these reads, and the
exporter's request families (``sits_latency_seconds``, ``sits_requests_per_second``,
``sits_latency_estimate_seconds``, ``sits_request_latency_window_seconds``) read the same
functions for their window, so ``/metrics`` and ``sits-observe latency`` cannot answer
differently for one window. The selection rule is the report's: requests completed in
``since <= ts < until``, successful ones only unless ``include_failed``.

This module stays small on purpose: the service imports it at start (the exporter's fast
signals), while the full report (PromQL sources, GPU labels) loads on first use.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sits_observe.analytics.serving.latency import (
    DEFAULT_QUANTILES,
    GroupBy,
    Metric,
    RequestSelection,
    estimate_windows,
    exact_quantiles,
    latency_buckets,
    quantile_column,
)
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The quantiles the ``latency`` report gives (and the exporter exports).
QUANTILES: tuple[float, ...] = DEFAULT_QUANTILES


def selection(
    window: Window, *, model: str | None = None, include_failed: bool = False
) -> RequestSelection:
    """The requests (or histogram windows) of ``window``: one model or all, failed or not."""
    return RequestSelection(
        model=model, since=window.since, until=window.until, include_failed=include_failed
    )


def exact_latency(
    store: Store,
    window: Window,
    *,
    by: GroupBy = "model",
    model: str | None = None,
    include_failed: bool = False,
    metric: Metric = "latency_s",
    quantiles: Sequence[float] = QUANTILES,
) -> pa.Table:
    """EXACT quantiles of ``metric`` per ``by`` group over ``window``: the group column,
    ``count`` and one :func:`column_of` column per quantile, sorted by group (empty when
    nothing was selected)."""
    chosen = selection(window, model=model, include_failed=include_failed)
    return exact_quantiles(store, by=by, selection=chosen, metric=metric, quantiles=quantiles)


def latency_estimates(
    store: Store,
    window: Window,
    *,
    by: GroupBy = "model",
    model: str | None = None,
    include_failed: bool = False,
) -> pa.Table:
    """Latency ESTIMATES per ``by`` group and inference-server histogram window in
    ``window`` (:func:`~sits_observe.analytics.serving.latency.estimate_windows`' columns, sorted by
    group, then window end)."""
    chosen = selection(window, model=model, include_failed=include_failed)
    return estimate_windows(store, by=by, selection=chosen)


def latency_histogram(store: Store, window: Window, bounds_s: Sequence[float]) -> pa.Table:
    """Per model, the successful requests of ``window`` as a cumulative histogram over
    ``bounds_s``: ``model``, ``n``, ``total`` (s) and ``b0`` ... ``b<k>``; in no set order."""
    return latency_buckets(store, selection(window), bounds_s)


def column_of(quantile: float) -> str:
    """The column of ``quantile`` in :func:`exact_latency` / :func:`latency_estimates`
    (0.95 -> ``p95_s``)."""
    return quantile_column(quantile)
