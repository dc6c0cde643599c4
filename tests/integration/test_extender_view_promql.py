"""The extender's view from kube-state-metrics and dcgm-exporter series in a real
VictoriaMetrics answers as the view from DuckDB, and ``serve``'s extender runs on it alone.

One cluster (6 nodes: H100 / A100 / L4 GPU nodes, one with the ``sits.io/gpu-interconnect``
and one with the ``sits.io/gpus-per-numa`` label, one GPU node never sampled, one CPU-only
node; Deployment replicas, Jobs, HAMi shares, a Pending pod that gets bound, a Succeeded
pod) changes over 3 inventory snapshots 30 s apart. The same Node / Pod objects go into
DuckDB through the inventory collector's parsers and into VictoriaMetrics as KSM scrapes
(tests/integration/ksm_support.py); 20 dcgm-exporter scrapes 15 s apart (frame buffer,
DRAM / copy / NVLink activity; pod labels that move as pods end and start) go into DuckDB
through the dcgm collector and into VictoriaMetrics as the same text with the same times.

Expected (docs/extender.md, "Without the DuckDB file"): with no NUMA or topology samples in
DuckDB (the PromQL store cannot carry them) and no assigned-GPU annotations, every array of
the view is the same (interference to 1e-9), and filter / prioritize answer the same bytes.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.collectors.kube.inventory import node_row
from sits_observe.collectors.kube.pods import pod_row
from sits_observe.control.extender.clusterview.source_promql import PromQLViewSource
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.handler import ExtenderHandler
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.domain.tables import conform
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.extender import ExtenderSettings
from tests.integration.ksm_support import ksm_text
from tests.integration.promql_support import VictoriaMetrics, stamped
from tests.integration.test_extender_http import ServedApp

KSM_STEP_S = 30
DCGM_STEP_S = 15
DCGM_SCRAPES = 20
PRODUCTS = {"h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100-SXM4-80GB", "l4": "NVIDIA L4"}
TOTAL_MIB = {"h100": 81559, "a100": 81920, "l4": 23034}
TOKEN = "view-promql-token"


def _node(name: str, kind: str | None, gpus: int, cpu: str, **extra: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **extra}
    allocatable = {"cpu": cpu, "memory": "503Gi", "pods": "110"}
    if kind is not None:
        labels |= {"nvidia.com/gpu.product": PRODUCTS[kind]}
        labels["nvidia.com/gpu.memory"] = str(TOTAL_MIB[kind])
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


NODES = [
    _node("gpu-a", "h100", 8, "96", **{"sits.io/gpu-interconnect": "pcie"}),
    _node("gpu-b", "a100", 8, "64", **{"sits.io/gpus-per-numa": "2"}),
    _node("gpu-c", "l4", 4, "32"),
    _node("gpu-d", "h100", 8, "96"),
    _node("gpu-e", "a100", 4, "32"),  # never sampled: memory from its label
    _node("cpu-1", None, 0, "16"),
]
KIND = {"gpu-a": "h100", "gpu-b": "a100", "gpu-c": "l4", "gpu-d": "h100"}
GPUS = {"gpu-a": 8, "gpu-b": 8, "gpu-c": 4, "gpu-d": 8}


def _pod(
    name: str,
    node: str | None,
    *,
    gpus: int = 0,
    owner: tuple[str, str] | None = None,
    share: int | None = None,
    phase: str = "Running",
    namespace: str = "serve",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": "2", "memory": "16Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if share is not None:
        requests["nvidia.com/gpucores"] = str(share)
        requests["nvidia.com/gpumem-percentage"] = str(share)
    kind, owner_name = owner or ("Job", name)
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": labels or {},
            "ownerReferences": [{"kind": kind, "name": owner_name, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": phase},
    }


_LLM = ("ReplicaSet", "llm-5d8f7c9b4")
_HASH = {"pod-template-hash": "5d8f7c9b4"}


def _snapshots() -> list[list[dict[str, Any]]]:
    """Three inventory snapshots: a replica ends, a Job arrives, the Pending pod is bound."""
    llm = [_pod(f"llm-5d8f7c9b4-{s}", n, gpus=1, owner=_LLM, labels=_HASH)
           for s, n in (("q2x7v", "gpu-a"), ("m9k4z", "gpu-a"), ("t5w8r", "gpu-b"))]  # fmt: skip
    base = [
        *llm,
        _pod("train-1", "gpu-b", gpus=4, namespace="train"),
        _pod("share-1", "gpu-c", gpus=1, share=30),
        _pod("share-2", "gpu-c", gpus=1, share=60),
        _pod("web-1", "cpu-1"),
        _pod("web-2", "gpu-d"),
        _pod("done-1", "gpu-d", gpus=1, phase="Succeeded", namespace="train"),
        _pod("wait-1", None, gpus=2, phase="Pending", namespace="train"),
    ]
    second = [p for p in base if p["metadata"]["name"] != "llm-5d8f7c9b4-m9k4z"]
    second.append(_pod("train-2", "gpu-d", gpus=2, namespace="train"))
    third = [p for p in second if p["metadata"]["name"] != "wait-1"]
    third.append(_pod("wait-1", "gpu-d", gpus=2, namespace="train"))
    return [base, second, third]


def write_inventory(
    store: Store, body: list[str], snapshots: Iterable[tuple[datetime, list[dict[str, Any]]]]
) -> None:
    """Each (time, pods) snapshot of :data:`NODES` into ``store`` through the inventory
    collector's row rules, and as kube-state-metrics text stamped with its time into ``body``
    (for VictoriaMetrics' import)."""
    dropped: Counter[str] = Counter()
    for at, pods in snapshots:
        nodes = [{"ts": at, **node_row(n, dropped)} for n in NODES]
        rows = [{"ts": at, **pod_row(p, dropped)} for p in pods]
        store.append_batch(
            {
                "nodes": conform("nodes", pa.Table.from_pylist(nodes)),
                "pods": conform("pods", pa.Table.from_pylist(rows)),
            }
        )
        body.append(stamped(ksm_text(NODES, pods), at))
    assert not dropped, dropped


def _on_gpus(pods: list[dict[str, Any]]) -> dict[str, list[tuple[str, str] | None]]:
    """Which pod dcgm-exporter names on each GPU: Running GPU pods, lowest free index first."""
    out: dict[str, list[tuple[str, str] | None]] = {n: [None] * c for n, c in GPUS.items()}
    for p in pods:
        node, phase = p["spec"].get("nodeName"), p["status"]["phase"]
        gpus = int(p["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))
        if node not in out or phase != "Running" or not gpus:
            continue
        free = [i for i, who in enumerate(out[node]) if who is None][:gpus]
        for i in free:
            out[node][i] = (p["metadata"]["namespace"], p["metadata"]["name"])
    return out


def _dcgm(node: str, on: list[tuple[str, str] | None], rng: np.random.Generator) -> str:
    """One dcgm-exporter body for ``node`` (dcgm-exporter's label names and units)."""
    families: dict[str, list[str]] = {}
    total = TOTAL_MIB[KIND[node]]
    for i, who in enumerate(on):
        labels = (
            f'gpu="{i}",UUID="GPU-{node}-{i:02d}",device="nvidia{i}",'
            f'modelName="{PRODUCTS[KIND[node]]}",Hostname="{node}"'
        )
        if who is not None:
            labels += f',namespace="{who[0]}",pod="{who[1]}",container="main"'
        busy = who is not None
        used = int(rng.integers(total // 4, total // 2)) if busy else int(rng.integers(0, 600))
        reserved = 312
        values = {
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_RESERVED": reserved,
            "DCGM_FI_DEV_FB_FREE": total - used - reserved,
            "DCGM_FI_DEV_MEM_COPY_UTIL": int(rng.integers(20, 90)) if busy else 0,
            "DCGM_FI_PROF_DRAM_ACTIVE": round(float(rng.uniform(0.1, 0.9)), 6) if busy else 0.0,
            "DCGM_FI_PROF_NVLINK_TX_BYTES": int(rng.integers(0, 40_000_000_000)) if busy else 0,
            "DCGM_FI_PROF_NVLINK_RX_BYTES": int(rng.integers(0, 40_000_000_000)) if busy else 0,
        }
        for family, value in values.items():
            families.setdefault(family, []).append(f"{family}{{{labels}}} {value}")
    lines = []
    for family, rows in families.items():
        lines += [f"# TYPE {family} gauge", *rows]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    now: datetime


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("view_promql")
    vm = VictoriaMetrics(root / "vm")
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    last_ksm = now - timedelta(seconds=10)
    ksm_times = [last_ksm - timedelta(seconds=KSM_STEP_S * k) for k in (2, 1, 0)]
    snapshots = _snapshots()
    rng = np.random.default_rng(14)
    body: list[str] = []
    with Store.open(root / "sits.duckdb") as store:
        write_inventory(store, body, zip(ksm_times, snapshots, strict=True))
        for k in range(DCGM_SCRAPES):
            at = now - timedelta(seconds=5 + DCGM_STEP_S * (DCGM_SCRAPES - 1 - k))
            current = [p for t, p in zip(ksm_times, snapshots, strict=True) if t <= at]
            placed = _on_gpus(current[-1] if current else snapshots[0])
            for node in sorted(GPUS):
                text = _dcgm(node, placed[node], rng)
                samples = parse_dcgm(text, now=at, node=None).tables["gpu_samples"]
                store.append("gpu_samples", samples)
                body.append(stamped(text, at))
    vm.import_text("".join(body))
    store = Store.open(root / "sits.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    try:
        yield Loaded(store, client, now)
    finally:
        client.close()
        store.close()
        vm.stop()


def _views(loaded: Loaded) -> tuple[ClusterView, ClusterView]:
    settings = ViewSettings()
    duck = build_view(loaded.store, loaded.now, settings)
    prom = build_view(PromQLViewSource(loaded.client), loaded.now, settings)
    return duck, prom


def _same(left: np.ndarray[Any, Any], right: np.ndarray[Any, Any], name: str) -> None:
    assert left.shape == right.shape, name
    np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)


def test_view_from_promql_is_the_duckdb_view(loaded: Loaded) -> None:
    duck, prom = _views(loaded)
    assert duck.node_names == prom.node_names == ("cpu-1", "gpu-a", "gpu-b", "gpu-c", "gpu-d",
                                                  "gpu-e")  # fmt: skip
    assert duck.nodes_at == prom.nodes_at == loaded.now - timedelta(seconds=10)
    assert duck.inventory.pods_at == prom.inventory.pods_at
    for name in ("gpu_free", "physical_gpus", "fb_free_ranked_bytes", "fb_free_topk_bytes",
                 "fb_total_bytes", "memory_known", "nvlink", "gpus_per_numa",
                 "interference_ratio", "gpu_pods", "tie_rank"):  # fmt: skip
        _same(getattr(duck, name), getattr(prom, name), name)
    _same(duck.state.gpu_free_milli, prom.state.gpu_free_milli, "gpu_free_milli")
    _same(duck.state.cpu_free_milli, prom.state.cpu_free_milli, "cpu_free_milli")
    assert duck.fgd is not None and prom.fgd is not None
    _same(duck.fgd.node_frag_milli, prom.fgd.node_frag_milli, "node_frag_milli")
    assert duck.gpu_uuids == prom.gpu_uuids
    assert duck.inventory.bound_pods == prom.inventory.bound_pods
    assert duck.inventory.gpu_memory_label_bytes == prom.inventory.gpu_memory_label_bytes
    assert duck.slow.workload_need_bytes == prom.slow.workload_need_bytes
    # The data exercise what is compared: labels, a sampled and an unsampled node, needs.
    assert prom.inventory.interconnect == {"gpu-a": False}
    assert prom.inventory.gpus_per_numa == {"gpu-b": 2}
    assert bool(prom.memory_known[prom.index["gpu-e"]])  # from the nvidia.com/gpu.memory label
    assert ("serve", "llm") in prom.slow.workload_need_bytes
    assert np.isfinite(prom.interference_ratio[prom.index["gpu-b"]])
    assert prom.gpu_free[prom.index["gpu-d"]] == 8 - 1 - 2 - 2 + 1  # Succeeded pod holds none
    assert prom.gpu_uuids[prom.index["gpu-c"]] == tuple(f"GPU-gpu-c-{i:02d}" for i in range(4))


def test_unchanged_inventory_is_not_read_again(loaded: Loaded) -> None:
    settings = ViewSettings()
    source = PromQLViewSource(loaded.client)
    first = build_view(source, loaded.now, settings)
    again = build_view(source, loaded.now + timedelta(seconds=5), settings, first)
    assert again.inventory is first.inventory
    assert again.slow is first.slow  # younger than slow_refresh_s


def _extender_pod(name: str, gpus: int, *, share: int | None = None) -> dict[str, Any]:
    pod = _pod(name, None, gpus=gpus, owner=_LLM, share=share, labels=_HASH, phase="Pending")
    pod["spec"]["priority"] = 0
    return pod


CALLS = [
    _extender_pod("llm-5d8f7c9b4-new01", 1),  # the workload's measured need applies
    _extender_pod("big-1", 4),
    _extender_pod("share-3", 1, share=40),
    _extender_pod("cpu-only", 0),
]
NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "cpu-1", "new-node"]


def _body(pod: dict[str, Any]) -> bytes:
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": NAMES}).encode()


def test_filter_and_prioritize_answer_the_same(loaded: Loaded) -> None:
    duck, prom = _views(loaded)
    handler = ExtenderHandler(ScoringSettings(), max_snapshot_age_s=300, clock=lambda: loaded.now)
    scores = set()
    for pod in CALLS:
        left = handler.prioritize(_body(pod), duck)
        right = handler.prioritize(_body(pod), prom)
        assert left.outcome == right.outcome == "scored"
        assert left.body == right.body, pod["metadata"]["name"]
        scores.add(left.body)
        left = handler.filter(_body(pod), duck)
        right = handler.filter(_body(pod), prom)
        assert (left.outcome, left.body) == (right.outcome, right.body), pod["metadata"]["name"]
    assert len(scores) > 1  # the pods are told apart


def test_serve_answers_from_promql_with_an_empty_store(loaded: Loaded, tmp_path: Path) -> None:
    """The service's extender with ``--extender-view-promql-url`` over a DuckDB file with no
    rows: the same prioritize answers, over real HTTP, as one over the filled store."""
    settings = ServiceSettings(token=TOKEN, retention_interval_s=0)
    view = ViewSettings(promql_url=loaded.client.base_url)
    answers = []
    with Store.open(tmp_path / "empty.duckdb") as empty:
        for store, extender in (
            (loaded.store, ExtenderSettings()),
            (empty, ExtenderSettings(view=view)),
        ):
            app = create_app(settings, store, clock=lambda: loaded.now, extender=extender)
            with ServedApp(app) as client:
                answers.append([_post(client, "/scheduler/prioritize", pod) for pod in CALLS])
        assert empty.scalar("SELECT count(*) FROM gpu_samples") == 0
    assert answers[0] == answers[1]
    assert any(h["Score"] > 0 for answer in answers[1] for h in answer)


def _post(client: httpx.Client, path: str, pod: dict[str, Any]) -> Any:
    response = client.post(path, content=_body(pod), headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    return response.json()


def test_no_ksm_series_gives_a_view_that_fails_open(loaded: Loaded) -> None:
    source = PromQLViewSource(loaded.client, ksm_matchers='job="absent"')
    view = build_view(source, loaded.now, ViewSettings())
    assert len(view) == 0
    assert view.warnings == (source.no_inventory,)


def test_numa_misses_only_duckdb_has_lower_the_bound_stated(loaded: Loaded, tmp_path: Path) -> None:
    """With NUMA counters in DuckDB (no PromQL series carries them) a node's interference
    score from PromQL is lower by exactly numa_weight x its miss ratio; other nodes agree."""
    copy = tmp_path / "numa.duckdb"
    shutil.copyfile(loaded.store.path, copy)
    hit, miss = (1000, 1800), (100, 300)  # 200 misses in 1,000 allocations: ratio 0.2
    rows = [
        {"ts": loaded.now - timedelta(seconds=s), "node": "gpu-b", "numa_node": 0,
         "numa_hit_pages_total": h, "numa_miss_pages_total": m}
        for s, h, m in zip((200, 20), hit, miss, strict=True)
    ]  # fmt: skip
    with Store.open(copy) as store:
        store.append("numa_samples", conform("numa_samples", pa.Table.from_pylist(rows)))
        duck = build_view(store, loaded.now, ViewSettings())
    prom = build_view(PromQLViewSource(loaded.client), loaded.now, ViewSettings())
    weight = ViewSettings().interference.numa_weight
    b = prom.index["gpu-b"]
    assert duck.interference_ratio[b] - prom.interference_ratio[b] == pytest.approx(weight * 0.2)
    others = np.arange(len(prom)) != b
    _same(duck.interference_ratio[others], prom.interference_ratio[others], "other nodes")
