"""Idle, oversized and stranded GPUs: allocated capacity that does no work, and what it costs.

Three findings over a window, each with the GPU-hours it wastes:

- **idle** (per GPU and holding pod): a sample is idle when the GPU's utilisation
  (``gpu_util_ratio``, DCGM ``GPU_UTIL`` / 100) is under ``util_floor_ratio`` AND its memory
  activity (``mem_copy_util_ratio``, else ``dram_active_ratio``; framebuffer traffic) is under
  ``activity_floor_ratio`` (when no activity column is measured, utilisation alone decides).
  A holding is idle when idle samples are at least ``idle_share_ratio`` of its samples with a
  utilisation. Wasted: the allocated GPUs x the time its idle samples cover.
- **oversized** (a holding not idle): allocated far above use: the P``used_percentile`` of
  its used share (the larger of framebuffer used / framebuffer allocated and utilisation /
  share allocated) is under ``oversized_below_ratio``. Wasted: allocated GPUs x (1 - that
  share) x the time its samples cover.
- **stranded** (per node): idle capacity no typical pod can use, FGD's F_n(M) (Weng et al.,
  ATC'23; :mod:`.fgd`) of the latest inventory, in GPUs; wasted: that x the window.

A sample covers the time to the series' next sample, at most ``max_gap_s`` (a gap in the data
is not counted as held time); a series' last sample covers its median gap. The device's
utilisation is shared by every pod on a time-sliced GPU, so a pod there is idle only when the
whole GPU is. MIG instances are held in units of their compute slices (``3g.40gb`` = 3/7 GPU).

Money: with a :class:`~.settings.PriceTable`, a GPU-hour costs its node's pool price per hour
divided by the node's GPUs (the pool a node matches by product and labels, as
:mod:`.capacity` prices nodes); nodes in no pool have no price.

The rules' floors and shares are :class:`~.settings.IdleSettings`, kept in :mod:`.settings`
so that ``serve``, which reads them for its flags before its port is up, need not import this
module (docs/extender.md, cold start). polars is imported by the functions that use it, not
at the top, so that importing this module for its types costs no polars (about 0.15 s).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.analytics.fragmentation.fgd.workload import typical_pods
from sits_observe.analytics.fragmentation.fgd_live import LiveCluster
from sits_observe.analytics.fragmentation.settings import IdleSettings
from sits_observe.analytics.serving.settings import PriceTable
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

if TYPE_CHECKING:
    import polars as pl

Kind = Literal["idle", "oversized", "stranded"]
KINDS: tuple[Kind, ...] = ("idle", "oversized", "stranded")
HOLDING = ("node", "gpu_uuid", "namespace", "pod")


@dataclass(frozen=True)
class Finding:
    """One wasted holding (idle / oversized) or node (stranded); GPU-hours and USD."""

    kind: Kind
    node: str | None
    gpu_uuid: str | None
    namespace: str | None
    pod: str | None
    workload: str | None
    allocated_gpus: float
    samples: int
    held_hours: float
    idle_share_ratio: float | None
    used_share_ratio: float | None
    wasted_gpu_hours: float
    wasted_usd: float | None


@dataclass(frozen=True)
class IdleReport:
    """Every finding, the per-holding idle shares, and totals per kind."""

    findings: tuple[Finding, ...]
    holdings: pl.DataFrame
    gpus: dict[Kind, float]
    wasted_gpu_hours: dict[Kind, float]
    wasted_usd: dict[Kind, float] | None


def holdings(samples: pl.DataFrame, settings: IdleSettings) -> pl.DataFrame:
    """One row per holding (``node``, ``gpu_uuid``, ``namespace``, ``pod``) with ``workload``,
    ``allocated_gpus``, ``samples``, ``held_s``, ``idle_s``, ``idle_share_ratio`` and
    ``used_share_ratio``.

    ``samples``: ``ts_s``, the holding columns, ``workload``, ``allocated_gpus`` (share of the
    GPU held, 0-1), ``gpu_util_ratio``, ``activity_ratio``, ``fb_used_bytes``,
    ``fb_allocated_bytes`` (any may be NULL).
    """
    import polars as pl  # on first use: the module docstring

    s = settings
    ordered = samples.filter(pl.col("gpu_util_ratio").is_not_null()).sort([*HOLDING, "ts_s"])
    gap = (pl.col("ts_s").shift(-1).over(HOLDING) - pl.col("ts_s")).clip(upper_bound=s.max_gap_s)
    idle = (pl.col("gpu_util_ratio") < s.util_floor_ratio) & (
        pl.col("activity_ratio").is_null() | (pl.col("activity_ratio") < s.activity_floor_ratio)
    )
    share = pl.max_horizontal(
        pl.col("fb_used_bytes") / pl.col("fb_allocated_bytes"),
        pl.col("gpu_util_ratio") / pl.col("allocated_gpus"),
    ).clip(upper_bound=1.0)
    timed = ordered.with_columns(gap_s=gap, idle=idle, used=share).with_columns(
        gap_s=pl.col("gap_s").fill_null(pl.col("gap_s").median().over(HOLDING)).fill_null(0.0)
    )
    return (
        timed.group_by(HOLDING)
        .agg(
            pl.col("workload").drop_nulls().first(),
            pl.col("allocated_gpus").max().fill_null(1.0),
            pl.len().alias("samples"),
            pl.col("gap_s").sum().alias("held_s"),
            pl.col("gap_s").filter(pl.col("idle")).sum().alias("idle_s"),
            pl.col("idle").mean().alias("idle_share_ratio"),
            pl.col("used").quantile(s.used_percentile_ratio, "higher").alias("used_share_ratio"),
        )
        .sort(HOLDING, nulls_last=True)
    )


def find_waste(
    samples: pl.DataFrame,
    settings: IdleSettings,
    *,
    window_s: float,
    live: LiveCluster | None = None,
    gpu_hour_usd: Mapping[str, float] | None = None,
) -> IdleReport:
    """Idle and oversized holdings of ``samples`` (:func:`holdings`), stranded capacity of
    ``live`` over ``window_s``, priced by ``gpu_hour_usd`` (node -> USD per GPU-hour)."""
    import polars as pl  # on first use: the module docstring

    table = holdings(samples, settings)
    idle = pl.col("idle_share_ratio") >= settings.idle_share_ratio
    oversized = ~idle & (pl.col("used_share_ratio") < settings.oversized_below_ratio)
    wasted = (
        pl.when(idle)
        .then(pl.col("allocated_gpus") * pl.col("idle_s"))
        .when(oversized)
        .then(pl.col("allocated_gpus") * (1 - pl.col("used_share_ratio")) * pl.col("held_s"))
        .otherwise(0.0)
        / 3600
    )
    kinds = table.with_columns(
        kind=pl.when(idle).then(pl.lit("idle")).when(oversized).then(pl.lit("oversized")),
        wasted_gpu_hours=wasted,
    )
    prices = dict(gpu_hour_usd) if gpu_hour_usd is not None else None
    findings = [
        _finding(r, prices)
        for r in kinds.filter(pl.col("kind").is_not_null()).iter_rows(named=True)
    ]
    if live is not None:
        findings += _stranded(live, window_s, prices)
    findings.sort(key=lambda f: (-f.wasted_gpu_hours, f.kind, f.node or "", f.pod or ""))
    gpus = {k: sum(f.allocated_gpus for f in findings if f.kind == k) for k in KINDS}
    hours = {k: sum(f.wasted_gpu_hours for f in findings if f.kind == k) for k in KINDS}
    usd = None
    if prices is not None:
        usd = {k: sum(f.wasted_usd or 0.0 for f in findings if f.kind == k) for k in KINDS}
    return IdleReport(tuple(findings), table, gpus, hours, usd)


def _finding(row: dict[str, object], prices: dict[str, float] | None) -> Finding:
    hours = float(row["wasted_gpu_hours"])  # type: ignore[arg-type]
    node = None if row["node"] is None else str(row["node"])
    return Finding(
        kind=str(row["kind"]),  # type: ignore[arg-type]
        node=node,
        gpu_uuid=None if row["gpu_uuid"] is None else str(row["gpu_uuid"]),
        namespace=None if row["namespace"] is None else str(row["namespace"]),
        pod=None if row["pod"] is None else str(row["pod"]),
        workload=None if row["workload"] is None else str(row["workload"]),
        allocated_gpus=float(row["allocated_gpus"]),  # type: ignore[arg-type]
        samples=int(row["samples"]),  # type: ignore[call-overload]
        held_hours=float(row["held_s"]) / 3600,  # type: ignore[arg-type]
        idle_share_ratio=float(row["idle_share_ratio"]),  # type: ignore[arg-type]
        used_share_ratio=_float(row["used_share_ratio"]),
        wasted_gpu_hours=hours,
        wasted_usd=_usd(prices, node, hours),
    )


def _stranded(live: LiveCluster, window_s: float, prices: dict[str, float] | None) -> list[Finding]:
    report = fragmentation(live.state, typical_pods(live.shapes))
    out = []
    for node, milli in zip(live.state.node_names, report.node_frag_milli.tolist(), strict=True):
        if milli <= 0:
            continue
        gpus = milli / MILLI_PER_GPU
        hours = gpus * window_s / 3600
        out.append(
            Finding(
                "stranded",
                node,
                None,
                None,
                None,
                None,
                gpus,
                0,
                window_s / 3600,
                None,
                None,
                hours,
                _usd(prices, node, hours),
            )
        )
    return out


def _usd(prices: dict[str, float] | None, node: str | None, hours: float) -> float | None:
    if prices is None or node is None or node not in prices:
        return None
    return prices[node] * hours


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


# -- reading the store -------------------------------------------------------------------------

# One row per sample of a GPU (or MIG instance) held by a pod, with the pod's share of it: the
# share of a whole GPU (gpu_milli / 1000; NULL = whole), or a MIG instance's compute slices / 7.
_SAMPLES_SQL = """
WITH pods AS (
    SELECT namespace, pod, workload, gpu_milli FROM pods WHERE pod IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1
)
SELECT epoch_us(s.ts) / 1e6 AS ts_s, s.node, s.gpu_uuid, s.namespace, s.pod,
       coalesce(p.workload, s.pod) AS workload,
       CASE WHEN s.mig_profile IS NOT NULL
            THEN coalesce(TRY_CAST(regexp_extract(s.mig_profile, '^(\\d+)g', 1) AS DOUBLE) / 7, 1)
            ELSE coalesce(p.gpu_milli, 1000) / 1000.0 END AS allocated_gpus,
       s.gpu_util_ratio, coalesce(s.mem_copy_util_ratio, s.dram_active_ratio) AS activity_ratio,
       s.fb_used_bytes::DOUBLE AS fb_used_bytes,
       s.fb_total_bytes * CASE WHEN s.mig_profile IS NOT NULL THEN 1
                               ELSE coalesce(p.gpu_milli, 1000) / 1000.0 END AS fb_allocated_bytes
FROM gpu_samples s
LEFT JOIN pods p ON p.namespace IS NOT DISTINCT FROM s.namespace AND p.pod = s.pod
WHERE s.ts >= ? AND s.ts < ? AND s.pod IS NOT NULL
"""


def load_held_samples(store: Store, since: datetime, until: datetime) -> pl.DataFrame:
    """The samples :func:`holdings` reads: GPUs attributed to a pod in ``[since, until)``."""
    import polars as pl  # on first use: the module docstring

    table = store.query(_SAMPLES_SQL, [utc_naive(since), utc_naive(until)])
    return pl.DataFrame(table)


def gpu_hour_prices(store: Store, prices: PriceTable) -> dict[str, float]:
    """Node -> USD per GPU-hour: the node's pool price over its GPUs (latest inventory)."""
    rows = store.query(
        "SELECT node, gpu_product, labels_json, gpu_allocatable FROM nodes WHERE node IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1"
    ).to_pylist()
    out: dict[str, float] = {}
    for r in rows:
        gpus = int(r["gpu_allocatable"] or 0)
        pool = prices.pool_of(r["gpu_product"], _labels(r["labels_json"]))
        if pool is not None and gpus > 0:
            out[str(r["node"])] = prices.price_of(pool) / gpus
    return out


def _labels(raw: object) -> dict[str, str]:
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
