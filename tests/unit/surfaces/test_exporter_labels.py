"""The exporter's GPU and node labels are dcgm-exporter's, so ``DCGM_FI_*`` joins match.

A dcgm-exporter body (an inline one, and the real captures of ``../shared/data/dcgm`` when
present) goes through the DCGM parser into a real DuckDB store; the exporter's per-GPU
series must then carry exactly the (``Hostname``, ``gpu``, ``UUID``, ``modelName``) label
values of the body's own series for the same GPU, which is what
``... * on (Hostname, gpu, UUID) group_left () DCGM_FI_DEV_POWER_USAGE`` needs. A node
series carries ``Hostname``, never ``node``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.collectors.exposition import Exposition, parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.signals.labels import GPU_LABELS

NOW = datetime(2026, 11, 1, 12, 0)
#: Families computed from dcgm-exporter's rows alone (no cgroups, no inventory).
GPU_FAMILIES = (
    "sits_gpu_framebuffer_used_bytes",
    "sits_gpu_shared_pods",
    "sits_gpu_framebuffer_used_ratio",
)

#: Two GPUs of one node, labelled as dcgm-exporter 3.x / 4.x labels them (the GPU Operator's
#: default counters), the first one holding a pod.
_H100 = 'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="550.54.15"'
_GPU0 = f'gpu="0",UUID="GPU-7a1c",pci_bus_id="00000000:18:00.0",device="nvidia0",{_H100}'
_POD = 'container="main",namespace="ml",pod="train-0"'
_GPU3 = f'gpu="3",UUID="GPU-9f02",pci_bus_id="00000000:2A:00.0",device="nvidia3",{_H100}'
INLINE = "".join(
    f"# TYPE {family} gauge\n{family}{{{_GPU0},{_POD}}} {gpu0}\n{family}{{{_GPU3}}} {gpu3}\n"
    for family, gpu0, gpu3 in (
        ("DCGM_FI_DEV_FB_FREE", 40000, 81000),
        ("DCGM_FI_DEV_FB_USED", 41000, 0),
        ("DCGM_FI_DEV_FB_RESERVED", 559, 559),
    )
)

#: Real captures with dcgm-exporter's current labels (see ../shared/data/dcgm/SOURCES.md).
CAPTURES = (
    "h100-k8s-sampled.prom",
    "l4-kops-aws-default-counters.prom",
    "l40s-upcloud-default-counters.prom",
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def scrape(store: Store) -> Exposition:
    collector = DerivedSignals(
        store,
        ExporterSettings(),
        clock=lambda: NOW + timedelta(seconds=1),
        spawn=lambda job: job(),
    )
    registry = CollectorRegistry()
    registry.register(collector)
    return parse_exposition(generate_latest(registry).decode())


def gpus_of(expo: Exposition, prefix: str) -> set[tuple[str | None, ...]]:
    return {
        tuple(s.label(name) for name in GPU_LABELS)
        for s in expo.samples
        if s.name.startswith(prefix)
    }


def check_joins(store: Store, body: str) -> None:
    store.append("gpu_samples", parse_dcgm(body, now=NOW, node=None).tables["gpu_samples"])
    sits = scrape(store)
    dcgm = gpus_of(parse_exposition(body), "DCGM_FI_")
    assert dcgm and None not in {v for gpu in dcgm for v in gpu}
    joined = 0
    for family in GPU_FAMILIES:
        series = gpus_of(sits, family)
        assert series <= dcgm, (family, series - dcgm)
        joined += len(series)
    assert joined, "no per-GPU sits series to join"
    nodes = {s.label("Hostname") for s in sits.samples if s.name.startswith("sits_collector_")}
    assert nodes == {gpu[0] for gpu in dcgm}
    assert not [s for s in sits.samples if s.label("node") is not None]


def test_sits_gpu_series_join_dcgm_exporter_series(store: Store) -> None:
    check_joins(store, INLINE)
    used = {
        s.label("gpu"): (s.label("namespace"), s.label("pod"))
        for s in scrape(store).samples
        if s.name == "sits_gpu_framebuffer_used_bytes"
    }
    assert used == {"0": ("ml", "train-0"), "3": ("unknown", "unknown")}


@pytest.mark.shared_data
@pytest.mark.parametrize("capture", CAPTURES)
def test_real_captures_join(store: Store, shared_data: Path, capture: str) -> None:
    check_joins(store, (shared_data / "dcgm" / capture).read_text(encoding="utf-8"))
