"""The GPU attribution signal (framebuffer bytes per GPU instance and pod, pods per GPU),
against rows written to a real DuckDB store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sits_observe.collectors.exposition import Exposition, parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings

NOW = datetime(2026, 11, 1, 12, 0)
GIB = 1024**3
USED = "sits_gpu_framebuffer_used_bytes"
SHARED = "sits_gpu_shared_pods"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def scrape(store: Store, **kw: object) -> Exposition:
    collector = DerivedSignals(
        store, ExporterSettings.model_validate(kw), clock=lambda: NOW, spawn=lambda job: job()
    )
    registry = CollectorRegistry()
    registry.register(collector)
    return parse_exposition(generate_latest(registry).decode())


def series(expo: Exposition, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels)): s.value for s in expo.samples if s.name == name}


def key(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


#: Each test GPU's index on its node and product name, stored as the DCGM collector stores
#: them; the exporter labels its series with dcgm-exporter's names for them.
GPUS = {
    "GPU-M": (3, "NVIDIA A100-SXM4-80GB"),
    "GPU-W": (0, "NVIDIA L4"),
    "GPU-OLD": (1, "NVIDIA L4"),
    "GPU-T": (5, "NVIDIA H100 80GB HBM3"),
    "GPU-A": (0, "NVIDIA A100-SXM4-80GB"),
    "GPU-B": (1, "NVIDIA A100-SXM4-80GB"),
}


def gpu(node: str, uuid: str) -> dict[str, str]:
    """dcgm-exporter's labels of one GPU: Hostname, gpu (index), UUID, modelName."""
    index, model = GPUS[uuid]
    return {"Hostname": node, "gpu": str(index), "UUID": uuid, "modelName": model}


def add_gpu_rows(store: Store, rows: list[tuple[object, ...]]) -> None:
    """Rows of (seconds ago, node, gpu_uuid, mig_profile, mig_instance_id, namespace, pod,
    fb_used_bytes)."""
    columns = list(zip(*rows, strict=True))
    types = (pa.string(), pa.string(), pa.string(), pa.int32(), pa.string(), pa.string())
    names = ("node", "gpu_uuid", "mig_profile", "mig_instance_id", "namespace", "pod")
    table = pa.table(
        {
            "ts": pa.array([ago(float(str(s))) for s in columns[0]], pa.timestamp("us")),
            **{n: pa.array(c, t) for n, c, t in zip(names, columns[1:7], types, strict=True)},
            "gpu_index": pa.array([GPUS[str(u)][0] for u in columns[2]], pa.int16()),
            "model_name": [GPUS[str(u)][1] for u in columns[2]],
            "fb_used_bytes": pa.array(columns[7], pa.int64()),
            "source": ["dcgm"] * len(rows),
        }
    )
    store.append("gpu_samples", table)


def test_a_mig_gpu_with_two_pods_and_an_unattributed_whole_gpu(store: Store) -> None:
    add_gpu_rows(
        store,
        [
            # n1/GPU-M: two 3g.40gb instances, pod a on instance 1, pod b on instance 2; the
            # older samples of each instance are superseded by the newest.
            (60, "n1", "GPU-M", "3g.40gb", 1, "ns1", "a", 1 * GIB),
            (10, "n1", "GPU-M", "3g.40gb", 1, "ns1", "a", 5 * GIB),
            (60, "n1", "GPU-M", "3g.40gb", 2, "ns2", "b", 7 * GIB),
            (10, "n1", "GPU-M", "3g.40gb", 2, "ns2", "b", 9 * GIB),
            # n2/GPU-W: a whole GPU nobody is attributed to.
            (10, "n2", "GPU-W", None, None, None, None, 2 * GIB),
            # Outside the 300 s window: never exported.
            (900, "n3", "GPU-OLD", None, None, "ns3", "old", 3 * GIB),
        ],
    )
    expo = scrape(store)
    mig = {**gpu("n1", "GPU-M"), "mig_profile": "3g.40gb"}
    assert series(expo, USED) == {
        key(**mig, namespace="ns1", pod="a"): 5 * GIB,
        key(**mig, namespace="ns2", pod="b"): 9 * GIB,
        key(**gpu("n2", "GPU-W"), mig_profile="none", namespace="unknown", pod="unknown"): (
            2 * GIB
        ),
    }
    assert series(expo, SHARED) == {
        key(**gpu("n1", "GPU-M")): 2.0,
        key(**gpu("n2", "GPU-W")): 0.0,
    }
    assert expo.types[USED] == "gauge"
    assert all(v == 0 for v in series(expo, "sits_exporter_errors_total").values())


def test_time_slicing_counts_pods_but_not_bytes_twice(store: Store) -> None:
    """dcgm-exporter repeats a time-sliced GPU's values once per pod: the bytes are kept once
    (the attributed row first by name), the pods are all counted."""
    add_gpu_rows(
        store,
        [
            (10, "n1", "GPU-T", None, None, "ns", "q", 4 * GIB),
            (10, "n1", "GPU-T", None, None, "ns", "p", 4 * GIB),
            (10, "n1", "GPU-T", None, None, None, None, 4 * GIB),
            (100, "n1", "GPU-T", None, None, "ns", "r", 1 * GIB),
        ],
    )
    expo = scrape(store)
    assert series(expo, USED) == {
        key(**gpu("n1", "GPU-T"), mig_profile="none", namespace="ns", pod="p"): 4 * GIB
    }
    assert series(expo, SHARED) == {key(**gpu("n1", "GPU-T")): 3.0}


def test_caps_keep_whole_gpus_by_bytes_and_the_most_shared(store: Store) -> None:
    add_gpu_rows(
        store,
        [
            (10, "n1", "GPU-A", "1g.10gb", 1, "ns", "a1", 1 * GIB),
            (10, "n1", "GPU-A", "1g.10gb", 2, "ns", "a2", 1 * GIB),
            (10, "n1", "GPU-B", None, None, "ns", "b", 3 * GIB),
        ],
    )
    expo = scrape(store, max_gpus=1)
    # GPU-B holds more bytes (3 GiB against 2 GiB): all of its instances are kept, none of A's.
    assert {dict(k)["UUID"] for k in series(expo, USED)} == {"GPU-B"}
    assert series(expo, SHARED) == {key(**gpu("n1", "GPU-A")): 2.0}
