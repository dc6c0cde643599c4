"""The ``sits_gpu_idle`` families on /metrics, from rows in a real DuckDB file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from sits_observe.collectors.exposition import Exposition, parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings

NOW = datetime(2026, 11, 1, 12, 0)
GB = 10**9


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


MODEL = "NVIDIA A100-SXM4-80GB"


def fill(store: Store, *, inventory: bool = True) -> None:
    """n1 has 2 GPUs: ``train-0`` keeps GPU-0 busy; ``nb-0`` holds half of GPU-1, idle, for
    the last hour (60 samples a minute apart); the free half of GPU-1 is stranded."""
    pods = [
        {
            "ts": NOW - timedelta(minutes=1),
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
    nodes = [
        {
            "ts": NOW - timedelta(minutes=1),
            "node": "n1",
            "gpu_allocatable": 2,
            "gpu_product": "NVIDIA A100",
            "cpu_allocatable_milli": 16000,
            "ready": True,
            "labels_json": json.dumps({}),
        }
    ]
    samples = [
        {
            "ts": NOW - timedelta(minutes=60 - i),
            "node": "n1",
            "gpu_uuid": f"GPU-{idx}",
            "gpu_index": idx,
            "model_name": MODEL,
            "namespace": "ml",
            "pod": pod,
            "gpu_util_ratio": util,
            "mem_copy_util_ratio": util / 2,
            "fb_used_bytes": 30 * GB,
            "fb_total_bytes": 80 * GB,
            "source": "sim",
        }
        for i in range(60)
        for idx, pod, util in ((0, "train-0", 0.8), (1, "nb-0", 0.0))
    ]
    tables = {"gpu_samples": pa.Table.from_pylist(samples)}
    if inventory:
        tables |= {"nodes": pa.Table.from_pylist(nodes), "pods": pa.Table.from_pylist(pods)}
    store.append_batch(tables)


def inline(job: Callable[[], None]) -> None:
    job()


def scrape(store: Store) -> Exposition:
    collector = DerivedSignals(
        store, ExporterSettings(), clock=lambda: NOW, monotonic=lambda: 100.0, spawn=inline
    )
    registry = CollectorRegistry()
    registry.register(collector)
    generate_latest(registry)  # the first scrape starts the slow pass (inline here)
    return parse_exposition(generate_latest(registry).decode())


def values(expo: Exposition, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels)): s.value for s in expo.samples if s.name == name}


def test_idle_and_stranded_gpus_and_their_gpu_hours(store: Store) -> None:
    fill(store)
    expo = scrape(store)
    assert values(expo, "sits_gpu_idle_gpus") == {
        (("kind", "idle"),): 0.5,
        (("kind", "oversized"),): 0.0,
        (("kind", "stranded"),): pytest.approx(0.25),
    }
    hours = values(expo, "sits_gpu_idle_wasted_gpu_hours")
    assert hours[(("kind", "idle"),)] == pytest.approx(0.5)  # half a GPU for 60 min
    assert hours[(("kind", "stranded"),)] == pytest.approx(0.25)  # 0.25 GPU for the 1 h window
    # dcgm-exporter's label names: Hostname, gpu (the index), UUID, modelName.
    gpu1 = (("Hostname", "n1"), ("UUID", "GPU-1"), ("gpu", "1"), ("modelName", MODEL))
    gpu0 = (("Hostname", "n1"), ("UUID", "GPU-0"), ("gpu", "0"), ("modelName", MODEL))
    assert values(expo, "sits_gpu_idle_ratio") == {
        (*gpu1, ("namespace", "ml"), ("workload", "nb")): 1.0,
        (*gpu0, ("namespace", "ml"), ("workload", "train")): 0.0,
    }
    errors = values(expo, "sits_exporter_errors_total")
    assert errors[(("signal", "gpu_idle"),)] == 0.0


def test_without_inventory_every_kind_is_still_exported(store: Store) -> None:
    """No pod snapshot: no holding is attributed to a workload and nothing is stranded, but
    each kind has its series (0), so a panel has data from the first pass."""
    fill(store, inventory=False)
    expo = scrape(store)
    assert values(expo, "sits_gpu_idle_gpus") == {
        (("kind", "idle"),): 1.0,  # a pod without a snapshot holds a whole GPU
        (("kind", "oversized"),): 0.0,
        (("kind", "stranded"),): 0.0,
    }
    assert all(v == 0 for v in values(expo, "sits_exporter_errors_total").values())


def test_the_service_registers_the_family_on_metrics(store: Store) -> None:
    """The real app's /metrics describes the families (the slow pass fills them later)."""
    settings = ServiceSettings.model_validate({"token": "t", "retention_interval_s": 0})
    app = create_app(settings, store, clock=lambda: NOW)
    exporter = app.state.exporter
    try:
        described = {f.name for f in exporter.describe()}
    finally:
        exporter.close()
    assert {
        "sits_gpu_idle_gpus",
        "sits_gpu_idle_wasted_gpu_hours",
        "sits_gpu_idle_ratio",
    } <= described
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 200
