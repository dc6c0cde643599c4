"""FGD fragmentation from kube-state-metrics series in a real VictoriaMetrics and from DuckDB.

One seeded cluster (7 nodes of three GPU products, one not Ready, one Ready-unknown, one
CPU-only; 70 pods: whole GPUs 1/2/4, HAMi shares, CPU-only and BestEffort pods, init
containers and sidecars, node selectors on the GPU product, Pending and Succeeded pods)
changes over 5 inventory snapshots 30 s apart: pods end, new ones arrive, a Pending pod gets
bound. Each snapshot's Node / Pod objects go into DuckDB through the inventory collector's
own parsers (``node_row`` / ``pod_row``) and into VictoriaMetrics as one kube-state-metrics
scrape of the same objects (tests/integration/ksm_support.py), stamped at the snapshot time.

Expected agreement (docs/analytics/fragmentation-fgd.md, "From kube-state-metrics"):
- a cluster whose GPU constraints KSM exports (requests, HAMi percentages, node selectors):
  the same report, every table, to 1e-9;
- pods pinned to a GPU product by required node affinity (not in any KSM family): the same
  cluster state (idle, total and allocated GPU milli, per node), and a typical-pod set that
  differs only in those pods' allowed products.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.kube.inventory import node_row
from sits_observe.collectors.kube.pods import pod_row
from sits_observe.domain.tables import conform
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.fragmentation import SPEC
from sits_observe.reports.result import Report
from sits_observe.reports.spec import PromQLReader
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import PromQLKubeSource
from sits_observe.surfaces.cli.main import app
from tests.integration.ksm_support import ksm_text
from tests.integration.promql_support import VictoriaMetrics, stamped

STEP_S = 30
SNAPSHOTS = 5
PRODUCTS = {"a100": "NVIDIA A100-SXM4-80GB", "h100": "NVIDIA H100 80GB HBM3", "l4": "NVIDIA L4"}


def _node(name: str, kind: str | None, gpus: int, cpu: str, ready: str = "True") -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    allocatable = {"cpu": cpu, "memory": "503Gi", "pods": "110"}
    if kind is not None:
        labels |= {"nvidia.com/gpu.product": PRODUCTS[kind], "nvidia.com/gpu.memory": "81920"}
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


NODES = [
    _node("a100-0", "a100", 8, "96"),
    _node("a100-1", "a100", 8, "96"),
    _node("h100-0", "h100", 8, "64"),
    _node("l4-0", "l4", 4, "31500m"),
    _node("l4-1", "l4", 4, "32", ready="Unknown"),
    _node("down-0", "h100", 8, "64", ready="False"),
    _node("cpu-0", None, 0, "16"),
]


class Cluster:
    """Seeded pods that arrive, run, finish and get bound (module docstring)."""

    def __init__(self, seed: int, *, affinity: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.affinity = affinity
        self.pods: dict[str, dict[str, Any]] = {}
        self.count = 0
        for _ in range(60):
            self.add()

    def add(self) -> None:
        rng, n = self.rng, self.count
        self.count += 1
        kind = str(rng.choice(["whole", "whole", "share", "share", "cpu", "besteffort"]))
        gpus = int(rng.choice([1, 1, 2, 4])) if kind == "whole" else int(kind == "share")
        requests: dict[str, str] = {}
        if kind != "besteffort":
            requests["cpu"] = f"{int(rng.integers(1, 16)) * 250 + int(rng.integers(0, 3))}m"
            requests["memory"] = f"{int(rng.integers(1, 64))}Gi"
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
        if kind == "share":
            requests["nvidia.com/gpucores"] = str(int(rng.integers(1, 10)) * 10)
            requests["nvidia.com/gpumem-percentage"] = str(int(rng.integers(1, 99)))
        spec: dict[str, Any] = {
            "containers": [{"name": "main", "resources": {"requests": requests}}],
            "priorityClassName": "batch-low",
        }
        if rng.random() < 0.3:  # a sidecar first, then an init step that may need more CPU
            spec["initContainers"] = [
                {"name": "proxy", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m"}}},
                {"name": "fetch", "resources": {"requests": {"cpu": f"{int(rng.integers(1, 9))}"}}},
            ]  # fmt: skip
        phase = "Running"
        node_pick = str(rng.choice([n["metadata"]["name"] for n in NODES]))
        if gpus and rng.random() < 0.4:
            product = str(rng.choice(list(PRODUCTS.values())))
            if self.affinity and rng.random() < 0.5:
                term = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}
                required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
                spec["affinity"] = {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
                }
            else:
                spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
        draw = rng.random()
        if draw < 0.1:
            phase = "Pending"
        else:
            spec["nodeName"] = node_pick
            phase = "Succeeded" if draw < 0.18 else "Running"
        name = f"job-{n:03d}"
        annotations: dict[str, str] = {}
        if kind == "share" and rng.random() < 0.3:  # the trace's exact share wins over HAMi's
            annotations["alibabacloud.com/gpu-milli"] = str(int(rng.integers(1, 1001)))
        self.pods[name] = {
            "metadata": {
                "name": name,
                "annotations": annotations,
                "namespace": str(rng.choice(["training", "research"])),
                "uid": f"uid-{n:05d}",
                "ownerReferences": [{"kind": "Job", "name": name, "controller": True}],
            },
            "spec": spec,
            "status": {"phase": phase},
        }

    def step(self) -> None:
        names = sorted(self.pods)
        for name in self.rng.choice(names, size=4, replace=False):
            del self.pods[str(name)]
        for _ in range(5):
            self.add()
        pending = [p for p in self.pods.values() if p["status"]["phase"] == "Pending"]
        if pending:  # one Pending pod is bound: its series' node label changes
            pending[0]["spec"]["nodeName"] = "a100-1"
            pending[0]["status"]["phase"] = "Running"


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    since: datetime
    until: datetime
    last_at: datetime
    erased: Store | None = None


def _without_affinity(pod: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in pod["spec"].items() if k != "affinity"}
    return {**pod, "spec": spec}


def _load(root: Any, *, affinity: bool) -> tuple[Store, VictoriaMetrics, datetime, datetime]:
    vm = VictoriaMetrics(root / "vm")
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    last_at = now - timedelta(seconds=60)
    first_at = last_at - timedelta(seconds=(SNAPSHOTS - 1) * STEP_S)
    cluster = Cluster(seed=5, affinity=affinity)
    body = []
    erased = Store.open(root / "erased.duckdb")
    with Store.open(root / "sits.duckdb") as store, erased:
        for k in range(SNAPSHOTS):
            if k:
                cluster.step()
            at = first_at + timedelta(seconds=k * STEP_S)
            pods = list(cluster.pods.values())
            dropped: Counter[str] = Counter()
            nodes = [{"ts": at, **node_row(n, dropped)} for n in NODES]
            rows = [{"ts": at, **pod_row(p, dropped)} for p in pods]
            assert not dropped, dropped
            store.append_batch(
                {
                    "nodes": conform("nodes", pa.Table.from_pylist(nodes)),
                    "pods": conform("pods", pa.Table.from_pylist(rows)),
                }
            )
            plain = [{"ts": at, **pod_row(_without_affinity(p), dropped)} for p in pods]
            erased.append_batch(
                {
                    "nodes": conform("nodes", pa.Table.from_pylist(nodes)),
                    "pods": conform("pods", pa.Table.from_pylist(plain)),
                }
            )
            body.append(stamped(ksm_text(NODES, pods), at))
    vm.import_text("".join(body))
    return Store.open(root / "sits.duckdb", read_only=True), vm, first_at, last_at


def _loaded(tmp: pytest.TempPathFactory, name: str, *, affinity: bool) -> Iterator[Loaded]:
    root = tmp.mktemp(name)
    store, vm, first_at, last_at = _load(root, affinity=affinity)
    erased = Store.open(root / "erased.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    since, until = first_at - timedelta(seconds=1), last_at + timedelta(seconds=1)
    try:
        yield Loaded(store, client, since, until, last_at, erased)
    finally:
        client.close()
        erased.close()
        store.close()
        vm.stop()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    yield from _loaded(tmp_path_factory, "ksm", affinity=False)


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    yield from _loaded(tmp_path_factory, "ksm_affinity", affinity=True)


def _both(loaded: Loaded, **settings: object) -> tuple[Report, Report]:
    query = SPEC.validate({"top": 0, **settings})
    window = Window(loaded.since, loaded.until, "given")
    assert SPEC.promql is not None
    duck = SPEC.build(loaded.store, window, query)
    return duck, SPEC.promql(PromQLReader(loaded.client), window, query)


def _rows(report: Report, name: str | None = None) -> list[dict[str, Any]]:
    table = report.main if name is None else next(t for t in report.others if t.name == name)
    return [dict(r) for r in table.rows.to_pylist()]


def _close(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
            else:
                assert b[key] == value, key


def test_inventory_tables_are_the_collector_rows(loaded: Loaded) -> None:
    ksm = PromQLKubeSource(loaded.client).inventory(loaded.since, loaded.until, lookback_s=300)
    assert ksm.nodes_at == ksm.pods_at == loaded.last_at
    assert ksm.absent == ()
    node_cols = ["node", "gpu_allocatable", "gpu_product", "gpu_memory_bytes",
                 "cpu_allocatable_milli", "memory_allocatable_bytes", "ready"]  # fmt: skip
    duck_nodes = loaded.store.query(
        f"SELECT {', '.join(node_cols)} FROM nodes WHERE ts = ? ORDER BY node", [loaded.last_at]
    )
    assert ksm.nodes.select(node_cols).sort_by("node").to_pylist() == duck_nodes.to_pylist()
    pod_cols = ["pod_uid", "namespace", "pod", "node", "phase", "gpu_request", "gpu_milli",
                "gpu_types", "cpu_request_milli", "memory_request_bytes", "owner_kind",
                "owner_name", "priority_class"]  # fmt: skip
    duck_pods = loaded.store.query(
        f"SELECT {', '.join(pod_cols)} FROM pods WHERE ts = ? ORDER BY pod_uid", [loaded.last_at]
    ).to_pylist()
    assert ksm.pods.select(pod_cols).sort_by("pod_uid").to_pylist() == duck_pods
    assert len(duck_pods) == 60 + 4 * (5 - 4)  # 60, then 4 ended and 5 arrived per step
    shares = [p for p in duck_pods if p["gpu_milli"] is not None and p["gpu_milli"] < 1000]
    assert shares and any(p["gpu_types"] for p in duck_pods)
    assert any(p["gpu_milli"] % 10 for p in shares)  # an annotated share, not a HAMi percent
    # Every pod seen in the window: the 60 first ones and the 4 x 5 that arrived.
    assert ksm.workload.num_rows == 80


def test_report_agrees_with_duckdb(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    assert duck.main.rows.num_rows == 1 and duck.main.rows["frag_milli"][0].as_py() > 0
    _close(_rows(duck), _rows(prom))
    for table in ("causes", "typical_pods", "nodes"):
        _close(_rows(duck, table), _rows(prom, table))
    assert duck.facts["nodes_at"] == prom.facts["nodes_at"] == loaded.last_at
    assert duck.facts["warnings"] == prom.facts["warnings"]
    assert prom.facts["source"] == "promql"
    assert any("node affinity" in n for n in prom.notes)


def test_affinity_pinned_pods_lose_only_their_products(pinned: Loaded) -> None:
    duck, prom = _both(pinned)
    same = ["idle_milli", "total_milli", "alloc_ratio", "node_count", "placed_pods",
            "workload_pods"]  # fmt: skip
    left, right = _rows(duck)[0], _rows(prom)[0]
    assert {k: left[k] for k in same} == {k: right[k] for k in same}
    state = ("node", "idle_milli", "cpu_free_milli")
    assert sorted(tuple(r[k] for k in state) for r in _rows(duck, "nodes")) == sorted(
        tuple(r[k] for k in state) for r in _rows(prom, "nodes")
    )
    assert left["frag_milli"] != pytest.approx(right["frag_milli"])
    # The whole difference: the same DuckDB rows without the affinity-pinned products.
    assert pinned.erased is not None
    window = Window(pinned.since, pinned.until, "given")
    query = SPEC.validate({"top": 0})
    erased = SPEC.build(pinned.erased, window, query)
    _close(_rows(erased), _rows(prom))
    for table in ("causes", "typical_pods", "nodes"):
        _close(_rows(erased, table), _rows(prom, table))


def test_no_series_before_the_window(loaded: Loaded) -> None:
    query = SPEC.validate({})
    early = Window(loaded.since - timedelta(hours=2), loaded.since - timedelta(hours=1), "given")
    assert SPEC.promql is not None
    with pytest.raises(NoDataError, match="kube_node_status_allocatable"):
        SPEC.promql(PromQLReader(loaded.client), early, query)


def test_cli_from_promql_prints_the_db_answer(loaded: Loaded) -> None:
    def run(*args: str) -> dict[str, Any]:
        result = CliRunner().invoke(app, ["fragmentation", "-o", "json", "--top", "0", *args])
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout)
        assert isinstance(document, dict)
        return document

    from_db = run("--db", str(loaded.store.path), "--since", "1h")
    from_vm = run("--promql-url", loaded.client.base_url, "--since", "1h")
    assert from_vm["rows"] == from_db["rows"]
    assert from_vm["tables"]["nodes"] == from_db["tables"]["nodes"]


def _shard(text: str, instance: str) -> str:
    """A KSM scrape as the target ``instance`` of job ``ksm`` (labels the scraper adds)."""
    return text.replace("{", f'{{job="ksm",instance="{instance}",', text.count("{"))


def test_sharded_targets_each_give_their_newest_scrape(tmp_path: Any) -> None:
    """Two KSM shards scraped 20 s apart: a pod of each is in the snapshot while its shard
    still serves it, and a pod its shard stopped serving is not, whatever the other's time."""
    vm = VictoriaMetrics(tmp_path / "vm")
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    cluster = Cluster(seed=9, affinity=False)
    pods = sorted(cluster.pods.values(), key=lambda p: str(p["metadata"]["name"]))
    kept, gone = pods[:10], pods[10:12]
    body = []
    for k in range(3):  # shard 0: the nodes and pods 0-9, ends pod 10 before its last scrape
        at = now - timedelta(seconds=90 - 30 * k)
        served = kept[:5] + (gone[:1] if k < 2 else [])
        body.append(stamped(_shard(ksm_text(NODES, served), "ksm-0:8080"), at))
    for k in range(3):  # shard 1, 20 s behind: ends pod 11 before its last scrape
        at = now - timedelta(seconds=110 - 30 * k)
        served = kept[5:] + (gone[1:] if k < 2 else [])
        body.append(stamped(_shard(ksm_text([], served), "ksm-1:8080"), at))
    vm.import_text("".join(body))
    client = PromQLClient(vm.base)
    try:
        source = PromQLKubeSource(client, matchers='job="ksm"')
        ksm = source.inventory(now - timedelta(minutes=5), now, lookback_s=300)
    finally:
        client.close()
        vm.stop()
    names = sorted(ksm.pods.column("pod").to_pylist())
    assert names == sorted(str(p["metadata"]["name"]) for p in kept)
    assert ksm.pods_at == ksm.nodes_at == now - timedelta(seconds=30)
    assert ksm.nodes.num_rows == len(NODES)
    assert ksm.workload.num_rows == 12  # the ended pods were seen in the window


def test_a_step_is_refused(loaded: Loaded) -> None:
    window = Window(loaded.since, loaded.until, "given")
    assert SPEC.promql is not None
    with pytest.raises(ConfigError, match="--promql-step-s"):
        SPEC.promql(PromQLReader(loaded.client, step_s=30), window, SPEC.validate({}))
