"""Report ``batching``: per server and model, what a batching window or a batch-size cap would
do to P99, throughput and GPU use, and the setting to use.

Read from ``server_windows`` (per scrape window: throughput, running and waiting requests,
P99 estimates, mean latency) and, where present, ``requests`` (exact P99). Two kinds of row:

- ``max_num_seqs`` (a vLLM-style server that reports its running batch): each cap of
  ``--max-num-seqs`` through :func:`~sits_observe.analytics.serving.batching.estimate_max_seqs`;
- ``window`` (a server whose P99 is under ``--micro-latency-s``, sub-10 ms requests): each
  window of ``--windows-s`` with each cap of ``--max-batches`` through
  :func:`~sits_observe.analytics.serving.batching.estimate_window`, the step at batch 1 taken as the
  observed mean latency (ASSUMPTION: the server runs unbatched today, and its mean latency is
  one step; queueing makes it larger, so the estimate errs towards a slower step).

The recommended setting (:func:`~sits_observe.analytics.serving.batching.recommend`): among those
whose estimated P99 stays within ``--p99-limit-s`` (default: the observed P99 x (1 +
``--p99-slack-ratio``)) and whose capacity is ``--headroom-ratio`` above the load, the
lowest P99, ties to the smaller batch and window; without such headroom, the most capacity.
A server without the series a kind needs gets a "not enough data" row. The model and its
check against the simulator are in docs/analytics/batching.md. Times in seconds, rates per
second.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.serving.batching import (
    BatchingEstimate,
    BatchingSetting,
    ObservedBatching,
    StepTime,
    estimate_max_seqs,
    estimate_window,
    recommend,
)
from sits_observe.analytics.serving.step_profiles import PROFILES
from sits_observe.domain.times import utc_naive
from sits_observe.domain.units import Unit
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

FILLED_BY = "`sits-observe ingest <engine>`, the node agent or `sits-observe demo`"
NOT_ENOUGH = "not enough data"


class BatchingQuery(BaseModel):
    """Settings of the ``batching`` report."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(None, description="only this model")
    windows_s: tuple[float, ...] = Field(
        (0.0, 0.0005, 0.001, 0.002),
        description="candidate batching windows, seconds (sub-10 ms servers)",
    )
    max_batches: tuple[int, ...] = Field(
        (1, 8, 16), description="candidate largest batches for sub-10 ms servers"
    )
    max_num_seqs: tuple[int, ...] = Field(
        (64, 128, 256, 512), description="candidate vLLM max_num_seqs (running-batch caps)"
    )
    micro_latency_s: float = Field(
        0.01, gt=0, le=1.0, description="P99 under which a server counts as sub-10 ms, seconds"
    )
    p99_limit_s: float | None = Field(
        None, gt=0, description="largest P99 a recommendation may reach, seconds (None: slack)"
    )
    p99_slack_ratio: float = Field(
        0.1, ge=0, le=10, description="P99 growth allowed over the observed P99, ratio"
    )
    headroom_ratio: float = Field(
        0.3, ge=0, le=10, description="capacity wanted above the observed load, ratio"
    )
    gpu: Literal["h100", "a100"] = Field("h100", description="calibrated step-time shape")


_MAIN_COLUMNS = (
    col("server", "server", wide=True),
    col("model", "model"),
    col("gpu", "GPU"),
    col("pods", "pods", Unit.integer, wide=True),
    col("kind", "kind", wide=True),
    col("windows", "windows", Unit.integer, wide=True),
    col("running", "batch", Unit.number),
    col("cap_now", "cap now", Unit.number, wide=True),
    col("waiting", "waiting", Unit.number, wide=True),
    col("throughput_rps", "served", Unit.rate),
    col("p99_s", "P99", Unit.seconds),
    col("p99_source", "P99 from", wide=True),
    col("est_p99_now_s", "est P99 now", Unit.seconds, wide=True),
    col("recommended", "recommended"),
    col("est_p99_s", "est P99", Unit.seconds),
    col("est_capacity_rps", "capacity", Unit.rate),
    col("est_gpu_busy_ratio", "est GPU busy", Unit.ratio, wide=True),
    col("status", "status", wrap=True),
    col("why", "why", wide=True),
    col("step_shape", "step shape", wide=True),
)
_CANDIDATE_COLUMNS = (
    col("server", "server", wide=True),
    col("model", "model"),
    col("gpu", "GPU"),
    col("setting", "setting"),
    col("batch_size", "batch", Unit.number),
    col("capacity_rps", "capacity", Unit.rate),
    col("p99_s", "est P99", Unit.seconds),
    col("gpu_busy_ratio", "GPU busy", Unit.ratio),
    col("saturated", "saturated", Unit.flag),
    col("recommended", "chosen", Unit.flag),
)

#: The GPU a server group runs on, as its pods' inventory names it (``H100``, ``A100``, ...).
_GPU_NAME = re.compile(r"(?<![A-Z0-9])([ABHL]\d{2,3}[A-Z]?)(?![0-9])")


def gpu_label(types: str | None) -> str | None:
    """``NVIDIA-H100-80GB-HBM3`` -> ``H100``; None when no GPU name is found."""
    found = _GPU_NAME.search((types or "").upper())
    return None if found is None else found.group(1)


def _observed(store: Store, window: Window, query: BatchingQuery) -> list[dict[str, Any]]:
    """Per server, model and GPU (the server group: replicas of one model on one GPU kind are
    alike, different GPUs are not): windows, pods, per-replica means of running / waiting /
    throughput / mean latency, the median window P99 estimate, and the exact P99 from
    ``requests`` where there is one."""
    where = "w.completed > 0 AND w.ts < ?"
    params: list[object] = [utc_naive(window.until)]
    if window.since is not None:
        where += " AND w.ts >= ?"
        params.append(utc_naive(window.since))
    if query.model is not None:
        where += " AND w.model = ?"
        params.append(query.model)
    # The GPU of each pod: its newest inventory row that names one.
    gpus = (
        "WITH g AS (SELECT pod, arg_max(gpu_types, ts) AS gpu_types FROM pods"
        " WHERE pod IS NOT NULL AND gpu_types IS NOT NULL GROUP BY pod)"
    )
    rows = store.query(
        f"{gpus} SELECT w.server, w.model, g.gpu_types, count(*) AS windows,"
        " count(DISTINCT w.pod) AS pods, avg(w.requests_running) AS running,"
        " avg(w.requests_waiting) AS waiting, sum(w.completed) / sum(w.window_s) AS throughput_rps,"
        # Windows where requests wait: the running batch is at the cap in force, and what the
        # server serves then is its capacity under it.
        " max(w.requests_running) FILTER (WHERE w.requests_waiting > 0) AS cap_now,"
        " sum(w.completed) FILTER (WHERE w.requests_waiting > 0)"
        "   / sum(w.window_s) FILTER (WHERE w.requests_waiting > 0) AS saturated_rps,"
        " sum(w.latency_mean_s * w.completed) / sum(w.completed) AS latency_mean_s,"
        " median(w.latency_p99_s) AS p99_estimate_s"
        f" FROM server_windows w LEFT JOIN g USING (pod) WHERE {where}"
        " GROUP BY ALL ORDER BY w.server, w.model, g.gpu_types",
        params,
    ).to_pylist()
    exact_where = where.replace(
        "w.completed > 0", "w.ok IS DISTINCT FROM false AND isfinite(w.latency_s)"
    )
    exact = {
        (r["model"], r["gpu_types"]): r["p99_s"]
        for r in store.query(
            f"{gpus} SELECT w.model, g.gpu_types, quantile_cont(w.latency_s, 0.99) AS p99_s"
            f" FROM requests w LEFT JOIN g USING (pod) WHERE {exact_where} GROUP BY ALL",
            params,
        ).to_pylist()
    }
    observed: list[dict[str, Any]] = []
    for row in rows:
        p99 = exact.get((row["model"], row["gpu_types"]))
        observed.append({**row, "gpu": gpu_label(row["gpu_types"]), "p99_exact_s": p99})
    return observed


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _label(estimate: BatchingEstimate, kind: str) -> str:
    if kind == "max_num_seqs":
        return f"max_num_seqs={estimate.setting.max_batch}"
    window_ms = estimate.setting.window_s * 1000
    return f"window={window_ms:g}ms max_batch={estimate.setting.max_batch}"


def _estimates(
    row: dict[str, Any], query: BatchingQuery
) -> tuple[str, list[BatchingEstimate], float]:
    """The kind of row, its candidates' estimates and the estimated P99 of the setting now
    (unbatched for window rows; the observed P99 for max_num_seqs rows); raises ValueError
    (the caller's "not enough data") when a series the kind needs is missing."""
    profile = PROFILES[step_shape(row, query)]
    running, p99 = _finite(row["running"]), row["p99_s"]
    throughput = _finite(row["throughput_rps"])
    if throughput is None or throughput <= 0:
        raise ValueError("no throughput")
    if running is not None and running >= 1 and (p99 is None or p99 >= query.micro_latency_s):
        if p99 is None:
            raise ValueError("no P99 (latency histogram or requests)")
        observed = ObservedBatching(running, throughput, p99)
        cap_now, saturated = _finite(row.get("cap_now")), _finite(row.get("saturated_rps"))
        if cap_now is not None and cap_now >= 1 and saturated is not None and saturated > 0:
            # A server that queues shows its capacity at the cap in force: the model starts
            # from there, so that cap's estimate is what the server did, not more.
            observed = ObservedBatching(cap_now, saturated, p99)
        settings = [BatchingSetting(max_batch=m) for m in query.max_num_seqs]
        estimates = [estimate_max_seqs(observed, s, profile) for s in settings]
        return "max_num_seqs", estimates, p99
    mean = _finite(row["latency_mean_s"])
    if p99 is None or mean is None or mean <= 0:
        raise ValueError("no P99 or mean latency")
    if p99 >= query.micro_latency_s:
        raise ValueError(
            f"P99 {p99:.3g} s is not under {query.micro_latency_s:g} s and no running batch"
        )
    step = StepTime(mean, profile)
    now = estimate_window(throughput, BatchingSetting(), step).p99_s
    settings = [
        BatchingSetting(window_s=w, max_batch=m) for m in query.max_batches for w in query.windows_s
    ]
    return "window", [estimate_window(throughput, s, step) for s in settings], now


def step_shape(row: dict[str, Any], query: BatchingQuery) -> str:
    """The calibrated step-time shape of a server group: its GPU's, where one is calibrated,
    else ``query.gpu``."""
    gpu = (row.get("gpu") or "").lower()
    return gpu if gpu in PROFILES else query.gpu


def _why(chosen: BatchingEstimate, estimates: list[BatchingEstimate], queueing: bool) -> str:
    most = max(e.capacity_rps for e in estimates if not e.saturated)
    if queueing:
        return (
            "the most capacity within the P99 limit: the server queues, so its load is above "
            "what it serves"
        )
    if chosen.capacity_rps < most:
        return (
            "the least change with the headroom at the lowest P99; larger caps add capacity "
            "the load does not use"
        )
    return "the most capacity within the P99 limit"


def build(store: Store, window: Window, query: BatchingQuery) -> Report:
    """The ``batching`` report over ``window``."""
    require_rows(store, window, "server_windows", FILLED_BY)
    main: list[dict[str, Any]] = []
    candidates: list[dict[str, Any]] = []
    for row in _observed(store, window, query):
        exact = _finite(row["p99_exact_s"])
        row["p99_s"] = exact if exact is not None else _finite(row["p99_estimate_s"])
        row["p99_source"] = "exact" if exact is not None else "estimate"
        keys = ("server", "model", "gpu", "pods", "windows", "running", "cap_now", "waiting")
        out = {k: row[k] for k in keys} | {"step_shape": step_shape(row, query), "why": None}
        out |= {"throughput_rps": row["throughput_rps"], "p99_s": row["p99_s"]}
        out |= {"p99_source": row["p99_source"] if row["p99_s"] is not None else None}
        try:
            kind, estimates, now_p99_s = _estimates(row, query)
        except ValueError as missing:
            main.append(out | _empty(f"{NOT_ENOUGH}: {missing}"))
            continue
        out |= {"kind": kind, "est_p99_now_s": now_p99_s}
        limit = query.p99_limit_s or row["p99_s"] * (1 + query.p99_slack_ratio)
        queueing = (row["waiting"] or 0) > 0
        chosen = recommend(
            estimates, p99_limit_s=limit, headroom_ratio=query.headroom_ratio, queueing=queueing
        )
        candidates.extend(_candidate(row, kind, e, e is chosen) for e in estimates)
        if chosen is None:
            main.append(_empty(f"no candidate keeps P99 <= {limit:.3g} s") | out)
            continue
        main.append(
            out
            | {
                "recommended": _label(chosen, kind),
                "est_p99_s": chosen.p99_s,
                "est_capacity_rps": chosen.capacity_rps,
                "est_gpu_busy_ratio": _busy(chosen, kind),
                "status": "queues" if queueing else "ok",
                "why": _why(chosen, estimates, queueing),
            }
        )
    shapes = sorted({r["step_shape"] for r in main})
    notes = [
        "estimates from the queueing model of docs/analytics/batching.md over the calibrated "
        f"step-time shape of each group's GPU ({', '.join(shapes) or query.gpu}; --gpu where "
        "none is calibrated); load = the observed throughput per replica",
    ]
    if any(r["kind"] == "window" for r in main):
        notes.append(
            "window rows assume the server runs unbatched now (its mean latency = one step)"
        )
    if any(r["status"] == "queues" for r in main):
        notes.append(
            "queues: requests wait, so the load is above what the server serves; its advice "
            "is the most capacity within the P99 limit"
        )
    if any(r["kind"] == "max_num_seqs" for r in main):
        notes.append(
            "GPU busy is left out for max_num_seqs rows: a continuously batching server with "
            "a request running is busy all the time, whatever its cap"
        )
    tables = (table_of("candidates", "Every candidate setting", candidates, _CANDIDATE_COLUMNS),)
    main_table = table_of(
        "batching", "Batching advice per model and GPU (per replica)", main, _MAIN_COLUMNS
    )
    return Report(
        "batching", window, main_table, tables, tuple(notes), query.model_dump(mode="json")
    )


def _busy(e: BatchingEstimate, kind: str) -> float | None:
    """The estimated GPU busy ratio where the model says something: window rows only."""
    return None if kind == "max_num_seqs" else e.gpu_busy_ratio


def _candidate(row: dict[str, Any], kind: str, e: BatchingEstimate, chosen: bool) -> dict[str, Any]:
    return {
        "server": row["server"],
        "model": row["model"],
        "gpu": row["gpu"],
        "setting": _label(e, kind),
        "batch_size": e.batch_size,
        "capacity_rps": e.capacity_rps,
        "p99_s": e.p99_s,
        "gpu_busy_ratio": _busy(e, kind),
        "saturated": e.saturated,
        "recommended": chosen,
    }


def _empty(status: str) -> dict[str, Any]:
    return {
        "kind": None,
        "est_p99_now_s": None,
        "recommended": None,
        "est_p99_s": None,
        "est_capacity_rps": None,
        "est_gpu_busy_ratio": None,
        "status": status,
        "why": None,
    }


SPEC = ReportSpec(
    name="batching",
    summary="Batching advice: a batching window or max_num_seqs, its P99, throughput and GPU use.",
    settings=BatchingQuery,
    reads=("server_windows", "requests"),
    build=build,
)
