"""Latency quantiles per model, pod, node or GPU: EXACT from requests, ESTIMATES kept apart.

Exact quantiles come from the ``requests`` table (one row per request with its measured
latency) and are computed inside DuckDB with ``quantile_cont``: for ``n`` sorted values
``x[0..n-1]`` and a quantile ``q`` the position is ``h = (n - 1) * q`` and the result is
``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``, linear interpolation
between order statistics, the rule of numpy's default ``method="linear"`` (Hyndman & Fan
type 7): the same order statistics and the same weight as numpy. DuckDB evaluates the
interpolation as ``x[lo] * (1 - w) + x[hi] * w`` where numpy evaluates ``x[lo] + w * (x[hi] -
x[lo])`` (from the upper neighbour when ``w >= 0.5``), so the two can differ by a few units in
the last place; the published llmperf summaries, computed with numpy, are reproduced within
one unit in the last place, most of them bit for bit
(``tests/unit/analytics/test_latency_llmperf.py``).

Which rows count: failed requests (``ok = false``) are left out unless
``include_failed``; rows whose value is NULL, NaN, infinite or negative never count (the
importers reject them, so this only guards hand-written tables); ``since`` keeps requests that
completed at or after that time.

Estimates come from the ``server_windows`` table: per scrape window, quantiles interpolated
inside histogram buckets (vLLM's ``e2e_request_latency_seconds``) with the window's error bound.
Quantiles of different windows cannot be merged into one quantile, so estimates are reported
per window, labelled ``estimate``, and never folded into an exact figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

import pyarrow as pa

from sits_observe.domain.times import utc_naive
from sits_observe.errors import ConfigError, UnknownNameError
from sits_observe.store import Store

GroupBy = Literal["model", "pod", "node", "gpu_uuid"]
Metric = Literal["latency_s", "ttft_s", "inter_token_s"]

#: The quantiles the ``latency`` command reports.
DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
#: Group columns ``server_windows`` has (it knows no GPU).
ESTIMATE_GROUPS: tuple[GroupBy, ...] = ("model", "pod", "node")


@dataclass(frozen=True)
class RequestSelection:
    """Which requests an analysis reads.

    ``model`` keeps one model; ``since`` (UTC; naive means UTC) keeps requests completed at or
    after it, ``until`` those completed before it; ``include_failed`` keeps ``ok = false``
    rows too.
    """

    model: str | None = None
    since: datetime | None = None
    include_failed: bool = False
    until: datetime | None = None

    def where(self, value_column: str = "latency_s") -> tuple[str, list[Any]]:
        """The SQL ``WHERE`` condition (``?`` parameters) and its values for ``requests``."""
        sql, named = self.where_named(value_column)
        for name in named:
            sql = sql.replace(f"${name}", "?")
        return sql, list(named.values())

    def where_named(self, value_column: str = "latency_s") -> tuple[str, dict[str, Any]]:
        """As :meth:`where`, with named parameters (``$sel_model``, ``$sel_since``)."""
        parts = [f"isfinite({value_column})", f"{value_column} >= 0"]
        params: dict[str, Any] = {}
        if not self.include_failed:
            parts.append("ok IS DISTINCT FROM false")
        if self.model is not None:
            parts.append("model = $sel_model")
            params["sel_model"] = self.model
        if self.since is not None:
            parts.append("ts >= $sel_since")
            params["sel_since"] = utc_naive(self.since)
        if self.until is not None:
            parts.append("ts < $sel_until")
            params["sel_until"] = utc_naive(self.until)
        return " AND ".join(parts), params


def quantile_column(q: float) -> str:
    """Output column of quantile ``q``: 0.5 -> ``p50_s``, 0.999 -> ``p99.9_s``."""
    return f"p{round(q * 100, 6):g}_s"


def check_group(by: str, allowed: Sequence[str] = get_args(GroupBy)) -> GroupBy:
    """``by`` as a :data:`GroupBy`; :class:`UnknownNameError` listing the valid names otherwise."""
    if by not in allowed:
        raise UnknownNameError(f"cannot group by {by!r}; valid: {', '.join(allowed)}")
    return by  # type: ignore[return-value]


def _check_quantiles(quantiles: Sequence[float]) -> None:
    if not quantiles:
        raise ConfigError("no quantiles asked for")
    bad = [q for q in quantiles if not 0.0 <= q <= 1.0]
    if bad:
        raise ConfigError(f"quantiles must be within [0, 1], got {bad}")


def exact_quantiles(
    store: Store,
    *,
    by: GroupBy = "model",
    selection: RequestSelection | None = None,
    metric: Metric = "latency_s",
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
) -> pa.Table:
    """Exact quantiles of ``metric`` per ``by`` group from the ``requests`` table.

    Columns: the group column (NULL = not recorded), ``count`` (rows that counted) and one
    ``p<q>_s`` column per quantile (:func:`quantile_column`), sorted by group. An empty
    selection gives an empty table; callers decide how to say so.
    """
    check_group(by)
    if metric not in get_args(Metric):
        raise UnknownNameError(f"unknown metric {metric!r}; valid: {', '.join(get_args(Metric))}")
    _check_quantiles(quantiles)
    where, params = (selection or RequestSelection()).where(metric)
    picks = ", ".join(f'q[{i + 1}] AS "{quantile_column(q)}"' for i, q in enumerate(quantiles))
    qlist = ", ".join("?" for _ in quantiles)
    sql = (
        f"SELECT {by}, count, {picks} FROM ("
        f"  SELECT {by}, count(*) AS count,"
        f"         quantile_cont({metric}, [{qlist}]::DOUBLE[]) AS q"
        f"  FROM requests WHERE {where} GROUP BY {by}"
        f") ORDER BY {by} NULLS LAST"
    )
    return store.query(sql, [*map(float, quantiles), *params])


def estimate_windows(
    store: Store,
    *,
    by: GroupBy = "model",
    selection: RequestSelection | None = None,
) -> pa.Table:
    """Per-window latency ESTIMATES from ``server_windows``, one row per group and window.

    Columns: the group column, ``window_end``, ``window_s``, ``count`` (requests completed in
    the window), ``p50_s``, ``p95_s``, ``p99_s`` (estimates), ``error_bound_s`` (the true
    window quantiles are within this distance; infinite when a rank fell in the ``+Inf``
    bucket) and ``estimate`` (always true). Windows in which nothing completed are left out
    (they have no latency). ``include_failed`` has no meaning here: the server's histogram
    holds what the server counted.
    """
    check_group(by, ESTIMATE_GROUPS)
    chosen = selection or RequestSelection()
    parts = ["completed > 0"]
    params: list[Any] = []
    if chosen.model is not None:
        parts.append("model = ?")
        params.append(chosen.model)
    if chosen.since is not None:
        parts.append("ts >= ?")
        params.append(utc_naive(chosen.since))
    if chosen.until is not None:
        parts.append("ts < ?")
        params.append(utc_naive(chosen.until))
    sql = (
        f"SELECT {by}, ts AS window_end, window_s, completed AS count,"
        " latency_p50_s AS p50_s, latency_p95_s AS p95_s, latency_p99_s AS p99_s,"
        " latency_error_bound_s AS error_bound_s, true AS estimate"
        f" FROM server_windows WHERE {' AND '.join(parts)}"
        f" ORDER BY {by} NULLS LAST, ts"
    )
    return store.query(sql, params)


def groups_with_only_estimates(
    store: Store,
    *,
    by: GroupBy,
    selection: RequestSelection | None,
    exact_groups: Sequence[str | None],
) -> list[str]:
    """Groups that have histogram estimates but no exact request in the selection.

    Empty for ``gpu_uuid`` (the estimates do not know the GPU).
    """
    if by not in ESTIMATE_GROUPS:
        return []
    windows = estimate_windows(store, by=by, selection=selection)
    present = {g for g in windows.column(by).to_pylist() if g is not None}
    return sorted(present - {g for g in exact_groups if g is not None})


def known_values(
    store: Store,
    column: GroupBy,
    table: Literal["requests", "server_windows"] = "requests",
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[str]:
    """Distinct non-NULL values of ``column`` in ``table`` (for messages), sorted; only rows
    with ``since <= ts < until`` where those are given."""
    check_group(column)
    rows = store.query(
        f"SELECT DISTINCT {column} AS v FROM {table} WHERE {column} IS NOT NULL"
        " AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?) ORDER BY v",
        [since, since, until, until],
    )
    return [str(v) for v in rows.column("v").to_pylist()]


def explain_empty(
    store: Store, selection: RequestSelection | None, metric: Metric = "latency_s"
) -> str:
    """Why ``selection`` holds no usable request, in words, with what to try next."""
    chosen = selection or RequestSelection()
    total = store.count("requests")
    if total == 0:
        reason = (
            "the database has no requests; import a request log with "
            "`sits-observe ingest requests`, or let the agent follow one"
        )
    elif chosen.model is not None and not store.scalar(
        "SELECT count(*) FROM requests WHERE model = ?", [chosen.model]
    ):
        models = known_values(store, "model")
        shown = ", ".join(models[:20]) + (" ..." if len(models) > 20 else "")
        reason = f"no requests for model {chosen.model!r}; models with requests: {shown}"
    elif chosen.since is not None and not store.scalar(
        "SELECT count(*) FROM requests WHERE ts >= ?", [utc_naive(chosen.since)]
    ):
        newest = store.scalar("SELECT max(ts) FROM requests")
        reason = (
            f"no request completed since {utc_naive(chosen.since).isoformat()}Z "
            f"(the newest is from {newest}); widen --since"
        )
    elif not chosen.include_failed and not store.scalar(
        "SELECT count(*) FROM requests WHERE ok IS DISTINCT FROM false"
        + (" AND model = ?" if chosen.model is not None else "")
        + " AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)",
        [
            *([chosen.model] if chosen.model is not None else []),
            *[None if chosen.since is None else utc_naive(chosen.since)] * 2,
            *[None if chosen.until is None else utc_naive(chosen.until)] * 2,
        ],
    ):
        reason = "every selected request failed (ok = false); --include-failed counts them"
    else:
        reason = (
            f"no selected request has a valid {metric} (NULL, NaN, infinite or negative values "
            "never count)"
        )
    where = "model = ?" if chosen.model is not None else "true"
    params = [chosen.model] if chosen.model is not None else []
    if store.scalar(f"SELECT count(*) FROM server_windows WHERE {where}", params):
        reason += "; histogram ESTIMATES exist for it: try --source estimate"
    return reason


def latency_buckets(
    store: Store, selection: RequestSelection, bounds_s: Sequence[float]
) -> pa.Table:
    """Per model, the selected requests as a cumulative histogram over ``bounds_s``: columns
    ``model``, ``n`` (requests), ``total`` (sum of latency_s, s) and ``b0`` ... ``b<k>``
    (requests with latency_s <= ``bounds_s[i]``); one row per model, in no set order."""
    where, params = selection.where("latency_s")
    columns = ["model", "count(*) AS n", "sum(latency_s) AS total"]
    columns += [f"count(*) FILTER (WHERE latency_s <= ?) AS b{i}" for i in range(len(bounds_s))]
    return store.query(
        f"SELECT {', '.join(columns)} FROM requests WHERE {where} GROUP BY model",
        [*bounds_s, *params],
    )
