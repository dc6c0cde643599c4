"""The elastic rule's inputs: the per-sample definition on hand-made samples, shared GPUs,
missing counters and over-capacity rates, and the per-GPU view read from DuckDB."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.rightsizing.elastic import (
    ROW_COLUMNS,
    SAMPLE_COLUMNS,
    elastic_inputs,
    elastic_rows,
    load_elastic_samples,
    pod_elastic_inputs,
)
from sits_observe.analytics.settings import GIB
from sits_observe.errors import UnknownNameError
from sits_observe.store import Store

S = ClassSettings()
T0 = datetime(2026, 3, 1, 12, 0, 0)
H100 = "NVIDIA H100 80GB HBM3"  # NVLink 900 GB/s, PCIe 128 GB/s (both directions)


def sample(t: float, gpu: str, pod: str | None, **values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {c: None for c in SAMPLE_COLUMNS}
    base |= {"ts": T0 + timedelta(seconds=t), "gpu_uuid": gpu, "node": "n1", "model_name": H100}
    base |= {"namespace": None if pod is None else "ml", "pod": pod}
    return base | values


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    schema = {c: pl.Float64() for c in SAMPLE_COLUMNS} | {
        "ts": pl.Datetime("us"),
        "gpu_uuid": pl.String(),
        "node": pl.String(),
        "model_name": pl.String(),
        "namespace": pl.String(),
        "pod": pl.String(),
        "fb_used_bytes": pl.Int64(),
    }
    return pl.DataFrame(rows, schema=schema)


def nv(rate: float | None) -> dict[str, Any]:
    """NVLink traffic split evenly over tx and rx."""
    half = None if rate is None else rate / 2
    return {"nvlink_tx_bytes_per_s": half, "nvlink_rx_bytes_per_s": half}


def test_saturation_is_the_mean_of_per_sample_busiest_link_ratios() -> None:
    rows = [
        # G1 alternates between NVLink at 760 GB/s (0.844) and PCIe at 120 GB/s (0.9375): its
        # busiest link is over 75% at every sample, although neither link's mean is.
        sample(t, "G1", "a", gpu_util_ratio=0.95, **nv(760e9 if t % 2 else 0.0),
               pcie_tx_bytes_per_s=0.0 if t % 2 else 60e9,
               pcie_rx_bytes_per_s=0.0 if t % 2 else 60e9)
        for t in range(10)
    ] + [
        # G2: 1400 GB/s on a 900 GB/s link is a counter artefact; it counts as saturated (1).
        sample(t, "G2", "b", gpu_util_ratio=0.95, **nv(1400e9 if t % 2 else 200e9))
        for t in range(10)
    ] + [
        # G3: NVLink counters missing on every other sample: not measured, not zero.
        sample(t, "G3", "c", gpu_util_ratio=0.95, **nv(810e9 if t % 2 else None))
        for t in range(10)
    ]  # fmt: skip
    got = {r["gpu_uuid"]: r for r in elastic_inputs(frame(rows), S).iter_rows(named=True)}
    # The window (t_last - 5 s, t_last] holds t = 5..9: three odd samples, two even.
    assert got["G1"]["samples"] == 5
    assert got["G1"]["link_saturation_ratio"] == pytest.approx((3 * 760 / 900 + 2 * 120 / 128) / 5)
    assert got["G2"]["link_saturation_ratio"] == pytest.approx((3 * 1.0 + 2 * 200 / 900) / 5)
    assert got["G3"]["link_saturation_ratio"] == pytest.approx(810 / 900)
    assert got["G3"]["link_capacity_bytes_per_s"] == 900e9


def test_a_shared_gpu_counts_each_time_once_and_lists_its_pods() -> None:
    rows = [
        sample(t, "G1", pod, gpu_util_ratio=0.5 + t / 100, fb_used_bytes=int(GIB * t), **nv(450e9))
        for t in range(8)
        for pod in ("chat-1", "chat-2")
    ]
    [got] = elastic_inputs(frame(rows), S).iter_rows(named=True)
    assert got["samples"] == 5
    assert got["gpu_util_ratio"] == pytest.approx(0.55)
    assert got["link_saturation_ratio"] == pytest.approx(0.5)
    assert got["memory_growth_bytes_per_s"] == pytest.approx(GIB)
    assert got["link_bandwidth_variance"] == pytest.approx(0.0)
    assert got["fb_used_bytes"] == 7 * GIB
    assert [p["pod"] for p in got["pods"]] == ["chat-1", "chat-2"]
    per_pod = pod_elastic_inputs(elastic_inputs(frame(rows), S))
    assert per_pod.get_column("pod").to_list() == ["chat-1", "chat-2"]
    assert per_pod.get_column("link_saturation_ratio").to_list() == pytest.approx([0.5, 0.5])


def test_an_unknown_product_leaves_saturation_unmeasured() -> None:
    rows = [sample(t, "G1", "a", model_name="Mystery GPU", **nv(800e9)) for t in range(3)]
    [got] = elastic_inputs(frame(rows), S).iter_rows(named=True)
    assert got["link_saturation_ratio"] is None
    assert got["link_capacity_bytes_per_s"] is None


def test_empty_samples_give_empty_frames() -> None:
    assert elastic_inputs(frame([]), S).height == 0
    assert pod_elastic_inputs(elastic_inputs(frame([]), S)).height == 0


@pytest.fixture
def store() -> Iterator[Store]:
    rows = [
        sample(t, "G1", "a", gpu_util_ratio=0.95, fb_used_bytes=5 * GIB, **nv(810e9))
        for t in range(20)
    ] + [sample(t, "G2", "b", gpu_util_ratio=0.5, **nv(100e9)) for t in range(12)]
    with Store.open(":memory:") as s:
        s.append("gpu_samples", pa.Table.from_pylist(rows))
        yield s


def test_elastic_rows_apply_the_rule_per_gpu(store: Store) -> None:
    table = elastic_rows(store, None, None, S, tier="Gold")
    assert tuple(table.column_names) == ROW_COLUMNS
    rows = {r["gpu_uuid"]: r for r in table.to_pylist()}
    g1 = rows["G1"]
    assert (g1["tier"], g1["pods"], g1["samples"], g1["triggered"]) == ("gold", "a", 5, True)
    # max(8 GiB x 0.8, 5 GiB used) and min(32 GB/s x 1.2, 900 GB/s).
    assert g1["proposed_memory_quota_bytes"] == int(8 * GIB * 0.8)
    assert g1["proposed_bandwidth_quota_bytes_per_s"] == pytest.approx(38.4e9)
    assert g1["reason"] == "utilisation 0.95 > 0.9 and link saturation 0.9 > 0.75"
    assert not rows["G2"]["triggered"]
    assert rows["G2"]["proposed_memory_quota_bytes"] == 8 * GIB
    with pytest.raises(UnknownNameError, match="unknown QoS tier 'tin'"):
        elastic_rows(store, None, None, S, tier="tin")


def test_the_range_bounds_the_samples_read(store: Store) -> None:
    # until = t 10 s: G1's window is (4 s, 9 s]; since = t 15 s: only G1 has samples.
    early = load_elastic_samples(store, None, T0 + timedelta(seconds=10), S)
    assert early.get_column("ts").max() == T0 + timedelta(seconds=9)
    late = elastic_rows(store, T0 + timedelta(seconds=15), None, S)
    assert late.column("gpu_uuid").to_pylist() == ["G1"]
    assert late.column("samples").to_pylist() == [5]
