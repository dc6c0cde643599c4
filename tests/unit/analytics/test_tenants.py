"""Tenant interference on a real DuckDB file, with every figure computed by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from sits_observe.analytics.serving.settings import TenantSettings
from sits_observe.analytics.serving.tenants import detect, load_bins, p99_bins, tenant_report
from sits_observe.store import Store

T0 = datetime(2026, 11, 2, 10, 0)  # a multiple of 60 s since the epoch: bins start on it
SLAS = {"finance": 0.015, "medical": 0.120}
S = TenantSettings()


def _requests(ns: str, node: str, minute: int, latencies: list[float]) -> list[dict[str, Any]]:
    start = T0 + timedelta(minutes=minute)
    return [
        {
            "ts": start + timedelta(seconds=1 + i),
            "model": "m",
            "latency_s": v,
            "ok": True,
            "namespace": ns,
            "pod": f"{ns}-0",
            "node": node,
        }
        for i, v in enumerate(latencies)
    ]


def _gpu(ns: str, node: str, gpu: str, minute: int, util: float) -> list[dict[str, Any]]:
    start = T0 + timedelta(minutes=minute)
    return [
        {"ts": start + timedelta(seconds=s), "node": node, "gpu_uuid": gpu, "namespace": ns,
         "pod": f"{ns}-{gpu}", "gpu_util_ratio": util}
        for s in (10, 40)
    ]  # fmt: skip


FAST = [0.005 + i * 0.0001 for i in range(20)]  # P99: 0.0068 + 0.81 x 0.0001 = 0.006881
SLOW = [0.020 + i * 0.001 for i in range(20)]  # P99: 0.038 + 0.81 x 0.001 = 0.03881


def fill(store: Store) -> None:
    """finance on n1 for ten minutes: fast while batch's n1 GPU runs at 0.1, slow while it
    runs at 0.9 (minutes 5-9); batch's n3 GPU (not finance's node) is busy when n1 is quiet.
    medical on n2 stays within its SLA while lab's load there swings."""
    requests, gpus = [], []
    for minute in range(10):
        high = minute >= 5
        requests += _requests("finance", "n1", minute, SLOW if high else FAST)
        requests += _requests("medical", "n2", minute, FAST)
        gpus += _gpu("batch", "n1", "g1", minute, 0.9 if high else 0.1)
        gpus += _gpu("batch", "n3", "g3", minute, 0.0 if high else 1.0)
        gpus += _gpu("lab", "n2", "g2", minute, 0.9 if minute % 2 else 0.1)
    # One bin with 19 requests (below min_requests_per_bin): no P99 of its own.
    requests += _requests("finance", "n1", 10, SLOW[:19])
    store.append_batch(
        {"requests": pa.Table.from_pylist(requests), "gpu_samples": pa.Table.from_pylist(gpus)}
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(str(tmp_path / "sits.duckdb"))
    try:
        fill(s)
        yield s
    finally:
        s.close()


UNTIL = T0 + timedelta(minutes=11)


def test_p99_per_bin_is_exact(store: Store) -> None:
    bins = p99_bins(store, T0, UNTIL, SLAS, S).filter(pl.col("namespace") == "finance")
    assert bins.get_column("requests").to_list() == [20] * 10 + [19]
    p99 = bins.get_column("p99_s").to_list()
    assert p99[:5] == pytest.approx([0.006881] * 5, abs=1e-12)
    assert p99[5:10] == pytest.approx([0.03881] * 5, abs=1e-12)


def test_load_counts_only_the_victims_nodes(store: Store) -> None:
    load = load_bins(store, T0, UNTIL, SLAS, S)
    finance = load.filter(pl.col("victim") == "finance")
    # Only batch's n1 GPU: the n3 GPU (1.0 while n1 is at 0.1) is on no finance node.
    assert set(finance.get_column("aggressor")) == {"batch"}
    assert finance.get_column("load").to_list() == pytest.approx([0.1] * 5 + [0.9] * 5)
    medical = load.filter(pl.col("victim") == "medical")
    assert set(medical.get_column("aggressor")) == {"lab"}


def test_the_report_finds_batch_pushing_finance_out_of_its_sla(store: Store) -> None:
    report = tenant_report(store, T0, UNTIL, SLAS, S)
    assert len(report.findings) == 1
    f = report.findings[0]
    assert (f.victim, f.aggressor, f.sla_p99_s) == ("finance", "batch", 0.015)
    # Two load levels and two P99 levels that move together: correlation 1.
    assert f.correlation == pytest.approx(1.0)
    assert (f.bins_high, f.bins_low) == (5, 5)
    assert f.load_high == pytest.approx(0.9) and f.load_low == pytest.approx(0.1)
    assert (f.breach_high_ratio, f.breach_low_ratio) == (1.0, 0.0)
    # Pooled over 100 requests (each SLOW value 5 times): h = 99 x 0.99 = 98.01 lies between
    # two copies of 0.039; FAST pooled: two copies of 0.0069.
    assert f.victim_p99_high_s == pytest.approx(0.039, abs=1e-12)
    assert f.victim_p99_low_s == pytest.approx(0.0069, abs=1e-12)
    assert f.first_high_at == T0 + timedelta(minutes=5)
    assert f.last_high_at == T0 + timedelta(minutes=9)
    tenants = {t.tenant: t for t in report.tenants}
    assert tenants["finance"].requests == 219 and tenants["finance"].bins == 10
    assert tenants["finance"].bins_out_of_sla == 5
    assert tenants["medical"].bins_out_of_sla == 0


def test_no_finding_when_the_victim_stays_within_its_sla(store: Store) -> None:
    # lab's load swings on medical's node but medical never leaves its 120 ms SLA.
    report = tenant_report(store, T0, UNTIL, {"medical": 0.120}, S)
    assert report.findings == ()


def test_thresholds_decide() -> None:
    """Hand-made bins: P99 rises with load in 3 of 4 high bins."""
    p99 = pl.DataFrame(
        {
            "namespace": ["v"] * 8,
            "bin": list(range(8)),
            "requests": [50] * 8,
            "p99_s": [0.010, 0.011, 0.009, 0.010, 0.030, 0.040, 0.012, 0.035],
        }
    )
    load = pl.DataFrame(
        {
            "victim": ["v"] * 6,
            "aggressor": ["x"] * 6,
            "bin": [1, 2, 4, 5, 6, 7],
            "load": [1.0, 1.0, 4.0, 5.0, 4.0, 5.0],
        }
    )  # fmt: skip  (bins 0 and 3: no row, load 0; midpoint 2.5)
    found = detect(p99, load, {"v": 0.015}, S)
    assert found.height == 1
    row = found.row(0, named=True)
    assert (row["bins_high"], row["bins_low"]) == (4, 4)
    assert row["high_bins"] == [4, 5, 6, 7] and row["breach_high_ratio"] == 0.75
    assert row["load_low"] == pytest.approx(0.5)
    # Pearson over the eight bins, missing load as 0 (numpy as the independent reference).
    loads = [0.0, 1.0, 1.0, 0.0, 4.0, 5.0, 4.0, 5.0]
    expected = np.corrcoef(loads, p99.get_column("p99_s").to_numpy())[0, 1]
    assert row["correlation"] == pytest.approx(expected)
    # Demanding 4 of 4 high bins out of SLA, or 5 bins a side, removes it.
    assert detect(p99, load, {"v": 0.015}, TenantSettings(min_breach_ratio=0.8)).height == 0
    assert detect(p99, load, {"v": 0.015}, TenantSettings(min_bins_per_side=5)).height == 0
    # A bin with too few requests does not count: with 100 required, no bin is left.
    assert detect(p99, load, {"v": 0.015}, TenantSettings(min_requests_per_bin=100)).height == 0
