"""Idle, oversized and stranded GPUs with their GPU-hours and money."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.analytics.fragmentation.idle_gpus import (
    IdleSettings,
    find_waste,
    gpu_hour_prices,
    holdings,
    load_held_samples,
)
from sits_observe.analytics.serving.settings import NodePoolPrice, PriceTable
from sits_observe.store import Store

SETTINGS = IdleSettings()
GB = 10**9


def series(
    pod: str,
    util: list[float | None],
    *,
    ts: list[float] | None = None,
    activity: float | None = None,
    used_bytes: float = 1 * GB,
    allocated: float = 1.0,
) -> list[dict[str, object]]:
    times = ts if ts is not None else [60.0 * i for i in range(len(util))]
    return [
        {
            "ts_s": t,
            "node": "n1",
            "gpu_uuid": f"GPU-{pod}",
            "namespace": "ml",
            "pod": pod,
            "workload": f"w-{pod}",
            "allocated_gpus": allocated,
            "gpu_util_ratio": u,
            "activity_ratio": activity,
            "fb_used_bytes": used_bytes,
            "fb_allocated_bytes": 80 * GB * allocated,
        }
        for t, u in zip(times, util, strict=True)
    ]


def frame(*rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame([r for part in rows for r in part])


def test_an_idle_holding_wastes_the_time_its_idle_samples_cover() -> None:
    """Ten samples a minute apart at 0 % utilisation: nine gaps of 60 s, the last sample
    covers the median gap (60 s): 600 s = 1/6 GPU-hour."""
    report = find_waste(frame(series("nb", [0.0] * 10)), SETTINGS, window_s=600)
    (found,) = report.findings
    assert (found.kind, found.pod, found.workload, found.samples) == ("idle", "nb", "w-nb", 10)
    assert found.idle_share_ratio == 1.0
    assert found.wasted_gpu_hours == pytest.approx(600 / 3600)
    assert report.gpus["idle"] == 1.0 and report.wasted_gpu_hours["stranded"] == 0.0


def test_memory_activity_or_a_busy_share_keeps_a_gpu_from_idle() -> None:
    copying = series("copy", [0.0] * 10, activity=0.3)  # framebuffer traffic: not idle
    mostly = series("mostly", [0.0] * 8 + [0.9, 0.9])  # 80 % idle < 90 %
    table = holdings(frame(copying, mostly), SETTINGS)
    shares = dict(zip(table["pod"], table["idle_share_ratio"], strict=True))
    assert shares == {"copy": 0.0, "mostly": 0.8}
    found = find_waste(frame(copying, mostly), SETTINGS, window_s=600).findings
    # Not idle; 1 GB of 80 GB at 0 % utilisation is still far above use: oversized.
    assert {f.pod: f.kind for f in found} == {"copy": "oversized"}


def test_a_gap_in_the_data_is_not_held_time() -> None:
    """Samples at 0, 60 and 1000 s: gaps 60 and min(940, 300) = 300; the last covers the
    median gap 180 s: 540 s held."""
    table = holdings(frame(series("g", [0.0, 0.0, 0.0], ts=[0.0, 60.0, 1000.0])), SETTINGS)
    assert table["held_s"].to_list() == [540.0] and table["idle_s"].to_list() == [540.0]


def test_allocated_far_above_use_is_oversized() -> None:
    """20 % utilisation and 10 GB of an 80 GB GPU: used share 0.2 < 0.5; wasted 0.8 of the
    held time. A half-GPU share at 30 % utilisation uses 0.6 of its share: not oversized."""
    big = series("big", [0.2] * 11, used_bytes=10 * GB)
    half = series("half", [0.3] * 11, used_bytes=10 * GB, allocated=0.5)
    report = find_waste(frame(big, half), SETTINGS, window_s=660)
    (found,) = report.findings
    assert (found.kind, found.pod, found.used_share_ratio) == (
        "oversized",
        "big",
        pytest.approx(0.2),
    )
    assert found.wasted_gpu_hours == pytest.approx(0.8 * 660 / 3600)


T1 = datetime(2026, 3, 1, 12, 0)


def fill(store: Store) -> None:
    """Node n1 (2 GPUs): ``train`` holds GPU 0 busy, ``nb`` half of GPU 1 and sits idle; so
    half of GPU 1 is free but no whole-GPU pod can use it (stranded)."""
    labels = json.dumps({"pool": "a100"})
    nodes = [
        {
            "ts": T1,
            "node": "n1",
            "gpu_allocatable": 2,
            "gpu_product": "NVIDIA A100",
            "cpu_allocatable_milli": 16000,
            "ready": True,
            "labels_json": labels,
        }
    ]
    pods = [
        {
            "ts": T1,
            "pod_uid": uid,
            "namespace": "ml",
            "pod": name,
            "node": "n1",
            "phase": "Running",
            "workload": workload,
            "gpu_request": 1,
            "gpu_milli": milli,
            "cpu_request_milli": 1000,
        }
        for uid, name, workload, milli in (
            ("u1", "train-0", "train", 1000),
            ("u2", "nb-0", "nb", 500),
        )
    ]
    samples = []
    for i in range(60):
        at = T1 - timedelta(minutes=60 - i)
        for idx, pod, util in ((0, "train-0", 0.8), (1, "nb-0", 0.0)):
            samples.append(
                {
                    "ts": at,
                    "node": "n1",
                    "gpu_uuid": f"GPU-{idx}",
                    "gpu_index": idx,
                    "namespace": "ml",
                    "pod": pod,
                    "gpu_util_ratio": util,
                    "mem_copy_util_ratio": util / 2,
                    "fb_used_bytes": 30 * GB,
                    "fb_total_bytes": 80 * GB,
                    "source": "sim",
                }
            )
    store.append_batch(
        {
            "nodes": pa.Table.from_pylist(nodes),
            "pods": pa.Table.from_pylist(pods),
            "gpu_samples": pa.Table.from_pylist(samples),
        }
    )


def test_from_the_store_idle_stranded_and_money(tmp_path: Path) -> None:
    with Store.open(tmp_path / "idle.duckdb") as store:
        fill(store)
        samples = load_held_samples(store, T1 - timedelta(hours=1), T1)
        prices = PriceTable(
            pools=(
                NodePoolPrice(pool="a100", price_usd_per_hour=8.0, node_labels={"pool": "a100"}),
            )
        )
        per_gpu = gpu_hour_prices(store, prices)
        report = find_waste(
            samples, SETTINGS, window_s=3600, live=live_cluster(store), gpu_hour_usd=per_gpu
        )
    assert per_gpu == {"n1": 4.0}
    by_kind = {f.kind: f for f in report.findings}
    assert set(by_kind) == {"idle", "stranded"}
    idle = by_kind["idle"]
    assert (idle.pod, idle.workload, idle.allocated_gpus) == ("nb-0", "nb", 0.5)
    # 60 samples a minute apart: 60 min held; half a GPU idle for an hour = 0.5 GPU-hour.
    assert idle.wasted_gpu_hours == pytest.approx(0.5)
    assert idle.wasted_usd == pytest.approx(2.0)
    # M = {whole GPU, half GPU} at 1/2 each: the whole-GPU pod cannot use GPU 1's free half:
    # F_n = 0.5 x 500 milli = 0.25 GPU, stranded for the 1 h window.
    stranded = by_kind["stranded"]
    assert (stranded.node, stranded.allocated_gpus) == ("n1", pytest.approx(0.25))
    assert stranded.wasted_gpu_hours == pytest.approx(0.25)
    assert report.wasted_usd == {"idle": 2.0, "oversized": 0.0, "stranded": 1.0}
