"""The store adapter: a signal family that fails for a reason other than missing data is
counted and does not stop the others, and the elastic inputs it hands the controller are the
numbers ``classes --view elastic`` shows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from sits_observe.analytics.rightsizing.elastic import elastic_rows
from sits_observe.analytics.settings import GIB
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.store import SignalMetrics, signals_from_store
from sits_observe.store import Store

S = ControllerSettings(
    sla=("finance=0.015", "medical=0.12", "government=0.3")
)  # the SPEC's example SLAs
T0 = datetime(2026, 3, 1, 12, 0, 0)
AT = T0 + timedelta(seconds=30)
H100 = "NVIDIA H100 80GB HBM3"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def gpu_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(30):
        common = {"ts": at(i), "node": "n1", "model_name": H100, "source": "sim"}
        for pod, gpu, rate in (("chat-1", "G1", 810e9), ("train-0", "G2", 300e9)):
            busy = rate if i % 2 else rate / 3
            rows.append(
                common
                | {
                    "gpu_uuid": gpu,
                    "namespace": "finance",
                    "pod": pod,
                    "gpu_util_ratio": 0.95,
                    "dram_active_ratio": 0.7,
                    "fb_used_bytes": 3 * GIB,
                    "nvlink_tx_bytes_per_s": busy / 2,
                    "nvlink_rx_bytes_per_s": busy / 2 if i % 3 else None,
                }
            )
    return rows


def inventory(with_pods: bool = True) -> dict[str, pa.Table]:
    nodes = [
        {"ts": at(30), "node": "n1", "gpu_allocatable": 8, "gpu_product": H100,
         "cpu_allocatable_milli": 64000, "ready": True, "gpu_memory_bytes": 80 * GIB}
    ]  # fmt: skip
    pods = [
        {"ts": at(30), "pod_uid": f"u{i}", "namespace": "finance", "pod": pod, "workload": pod,
         "node": "n1", "phase": "Running", "gpu_request": 1, "cpu_request_milli": 1000,
         "priority_class": "best-effort"}
        for i, pod in enumerate(("chat-1", "train-0"))
    ]  # fmt: skip
    requests = [
        {"ts": at(i / 2), "model": "m", "namespace": "finance", "pod": "chat-1",
         "latency_s": 0.010 if i % 4 else 0.030, "ok": i % 10 != 0}
        for i in range(40)
    ] + [{"ts": at(1), "model": "m", "namespace": "finance", "pod": "chat-1", "latency_s": None,
          "ok": True}]  # fmt: skip
    tables = {
        "nodes": pa.Table.from_pylist(nodes),
        "gpu_samples": pa.Table.from_pylist(gpu_rows()),
        "requests": pa.Table.from_pylist(requests),
    }
    if with_pods:
        tables["pods"] = pa.Table.from_pylist(pods)
    return tables


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        s.append_batch(inventory())
        yield s


class BrokenInterference:
    """A store whose interference samples cannot be read (a stand-in for a bug there)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        if "dram_active_ratio" in sql:
            raise RuntimeError("interference samples are corrupt")
        return self.store.query(sql, params)

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        return self.store.scalar(sql, params)


def errors(registry: CollectorRegistry, signal: str) -> float:
    value = registry.get_sample_value("sits_controller_signal_errors_total", {"signal": signal})
    return value or 0.0


def test_every_signal_family_is_measured_from_a_full_store(store: Store) -> None:
    registry = CollectorRegistry()
    signals = signals_from_store(store, AT, S, metrics=SignalMetrics(registry))
    [node] = signals.nodes.to_dicts()
    assert node["fragmentation_ratio"] is not None
    assert node["interference_score"] is not None
    assert errors(registry, "interference") == errors(registry, "fragmentation") == 0


def test_a_failing_signal_is_counted_and_the_others_still_measured(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    broken = BrokenInterference(store)
    signals = signals_from_store(broken, AT, S, metrics=SignalMetrics(registry))  # type: ignore[arg-type]
    [node] = signals.nodes.to_dicts()
    assert node["interference_score"] is None
    assert node["fragmentation_ratio"] is not None
    assert signals.pods.get_column("link_saturation_ratio").null_count() == 0
    assert errors(registry, "interference") == 1
    assert errors(registry, "fragmentation") == 0
    assert "computing the interference signal failed" in caplog.text
    assert "interference samples are corrupt" in caplog.text  # the traceback is logged


def test_missing_data_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    with Store.open(":memory:") as s, caplog.at_level("INFO"):
        s.append_batch(inventory(with_pods=False))
        signals = signals_from_store(s, AT, S, metrics=SignalMetrics(registry))
    [node] = signals.nodes.to_dicts()
    assert node["fragmentation_ratio"] is None  # no pod to build the FGD workload from
    assert node["interference_score"] is not None
    assert errors(registry, "fragmentation") == 0
    assert "no fragmentation signal" in caplog.text


def test_the_controller_sees_the_elastic_numbers_the_elastic_view_shows(store: Store) -> None:
    pods = {r["pod"]: r for r in signals_from_store(store, AT, S).pods.iter_rows(named=True)}
    view = elastic_rows(store, AT - timedelta(seconds=300), AT, S.classes).to_pylist()
    assert {r["pods"] for r in view} == set(pods)
    for row in view:
        pod = pods[row["pods"]]
        assert pod["gpu_util_ratio"] == pytest.approx(row["gpu_util_ratio"])
        assert pod["link_saturation_ratio"] == pytest.approx(row["link_saturation_ratio"])
    # G1: NVLink 810 GB/s on odd seconds, 270 GB/s on even ones, the rx counter missing
    # every third: per sample ratios over t = 25..29, averaged.
    per_sample = []
    for i in range(25, 30):
        busy = 810e9 if i % 2 else 270e9
        per_sample.append((busy / 2 + (busy / 2 if i % 3 else 0.0)) / 900e9)
    assert pods["chat-1"]["link_saturation_ratio"] == pytest.approx(sum(per_sample) / 5)


def test_sla_violation_counts_slow_and_failed_requests_and_skips_unmeasured_ones(
    store: Store,
) -> None:
    [chat] = signals_from_store(store, AT, S).pods.filter(pod="chat-1").to_dicts()
    # 40 requests: 4 failed (i % 10 == 0), of the 36 others 6 took 30 ms > finance's 15 ms; the
    # one with no latency is not counted.
    slow = sum(1 for i in range(40) if i % 10 and not i % 4)
    assert chat["sla_violation_ratio"] == pytest.approx((slow + 4) / 40)
