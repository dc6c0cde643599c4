"""The controller's signals from kube-state-metrics, dcgm-exporter and vLLM series in a real
VictoriaMetrics equal the signals from DuckDB, and so do the plan's decisions.

The cluster is the extender test's (tests/integration/test_extender_view_promql.py: 6 nodes,
Deployment replicas, Jobs, HAMi shares, a Pending pod that gets bound, a Succeeded pod; 3
KSM scrapes 30 s apart, 20 dcgm-exporter scrapes 15 s apart), plus two scrapes of the day
before (another namespace, more GPUs) for the quotas' daily peaks, and one vLLM server of
27 scrapes 15 s apart for one pod's latency estimates. The same objects and text go into
DuckDB through the collectors' parsers and into VictoriaMetrics with the same times. The KSM
scrapes lie on the 30 s grid (``promql_ksm_step_s``), as a scrape interval of 30 s does.

Expected (docs/controller.md, "Signals from a PromQL store"): with no NUMA, sync-delay,
NVML-process, exact-request or assigned-GPU rows in DuckDB (no PromQL series carries them),
every node, pod and namespace signal is the same (floats to 1e-9) and ``plan()`` makes the
same decisions; the tenants are left empty as missing data, not as an error.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.collectors.inference.vllm import VllmCollector
from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.planning.inputs import History, Signals
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.promql import PromQLSignalSettings, PromQLSignalSource
from sits_observe.control.signals.source import SignalMetrics, signals_of
from sits_observe.control.signals.store import signals_from_store
from sits_observe.control.signals.store_state import state_from_store
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient, PromSeries
from sits_observe.store.promql.signals import SETTLE, PromQLSignalReads
from sits_observe.surfaces.cli.main import app
from tests.integration.promql_support import VictoriaMetrics, VllmServer, stamped
from tests.integration.test_extender_view_promql import (
    DCGM_SCRAPES,
    DCGM_STEP_S,
    GPUS,
    KSM_STEP_S,
    NODES,
    _dcgm,
    _on_gpus,
    _pod,
    _snapshots,
    write_inventory,
)

VLLM_SCRAPES = 27
VLLM_STEP_S = 15
LLM_POD = ("serve", "llm-5d8f7c9b4-q2x7v")
SETTINGS = ControllerSettings(
    classes=ClassSettings(namespace_sla_p99_s={"serve": 5.0, "train": 5.0})
)


def _yesterday() -> list[dict[str, Any]]:
    """The day before: the first snapshot's pods and a larger training namespace."""
    extra = [
        _pod("big-1", "gpu-d", gpus=4, namespace="train"),
        _pod("big-2", "gpu-e", gpus=4, namespace="train"),
        _pod("eval-1", "gpu-b", gpus=2, namespace="eval"),
    ]
    return [*_snapshots()[0], *extra]


def _with_gpu_util(text: str) -> str:
    """The body with ``DCGM_FI_DEV_GPU_UTIL`` (the elastic rule's input) copied from the
    copy-engine utilisation, in percent as both are."""
    copied = [
        line.replace("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_GPU_UTIL")
        for line in text.splitlines()
        if "DCGM_FI_DEV_MEM_COPY_UTIL" in line
    ]
    return text + "\n".join(copied) + "\n"


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    at: datetime


def _grid(now: datetime, step_s: int) -> datetime:
    seconds = int((now - datetime(1970, 1, 1)).total_seconds())
    return datetime(1970, 1, 1) + timedelta(seconds=seconds - seconds % step_s)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("signals_promql")
    vm = VictoriaMetrics(root / "vm")
    base = _grid(datetime.now(UTC).replace(tzinfo=None), KSM_STEP_S)
    at = base + timedelta(seconds=10)
    day_before = base - timedelta(days=1, hours=2)
    inventory = [(day_before, _yesterday()), (day_before + timedelta(seconds=30), _yesterday())]
    inventory += [
        (base - timedelta(seconds=KSM_STEP_S * k), pods)
        for k, pods in zip((2, 1, 0), _snapshots(), strict=True)
    ]
    rng = np.random.default_rng(14)
    body: list[str] = []
    with Store.open(root / "sits.duckdb") as store:
        write_inventory(store, body, inventory)
        today = inventory[2:]
        for k in range(DCGM_SCRAPES):
            ts = at - timedelta(seconds=5 + DCGM_STEP_S * (DCGM_SCRAPES - 1 - k))
            current = [p for t, p in today if t <= ts]
            placed = _on_gpus(current[-1] if current else today[0][1])
            for node in sorted(GPUS):
                text = _with_gpu_util(_dcgm(node, placed[node], rng))
                store.append(
                    "gpu_samples", parse_dcgm(text, now=ts, node=None).tables["gpu_samples"]
                )
                body.append(stamped(text, ts))
        server = VllmServer("llama-3-8b", seed=5)
        namespace, pod = LLM_POD
        labelled = f'model_name="llama-3-8b",namespace="{namespace}",pod="{pod}",node="gpu-a"'
        with VllmCollector(
            "http://127.0.0.1:9/metrics", node="gpu-a", namespace=namespace, pod=pod
        ) as collector:
            for k in range(VLLM_SCRAPES):
                server.advance(load=1.0 + (k % 10) / 5)
                ts = at - timedelta(seconds=7 + VLLM_STEP_S * (VLLM_SCRAPES - 1 - k))
                text = server.text()
                windows = collector.collect_text(text, ts).tables.get("server_windows")
                if windows is not None:
                    store.append("server_windows", windows)
                body.append(stamped(text.replace('model_name="llama-3-8b"', labelled), ts))
    vm.import_text("".join(body))
    store = Store.open(root / "sits.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    try:
        yield Loaded(store, client, at.replace(tzinfo=UTC))
    finally:
        client.close()
        store.close()
        vm.stop()


def _both(loaded: Loaded, **promql: Any) -> tuple[Signals, Signals]:
    duck = signals_from_store(loaded.store, loaded.at, SETTINGS)
    source = PromQLSignalSource(loaded.client, PromQLSignalSettings(**promql))
    return duck, signals_of(source, loaded.at, SETTINGS)


def _same(left: pl.DataFrame, right: pl.DataFrame, keys: list[str]) -> None:
    assert_frame_equal(
        left.sort(keys), right.sort(keys), check_exact=False, rel_tol=1e-9, abs_tol=1e-9
    )


def test_node_signals_are_the_duckdb_signals(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    _same(duck.nodes, prom.nodes, ["node"])
    assert prom.nodes.get_column("node").to_list() == sorted(n["metadata"]["name"] for n in NODES)
    # The data exercise what is compared: every GPU node fragmented or not, scores measured.
    frag = dict(prom.nodes.select("node", "fragmentation_ratio").iter_rows())
    assert frag["gpu-c"] is not None and frag["gpu-c"] > 0  # HAMi shares strand capacity
    scored = prom.nodes.filter(pl.col("interference_score").is_not_null())
    assert set(scored.get_column("node")) == set(GPUS)
    assert scored.get_column("interference_partial").all()  # no NUMA miss ratio in either
    assert prom.nodes.get_column("sync_delay_breached").null_count() == prom.nodes.height


def test_pod_signals_are_the_duckdb_signals(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    _same(duck.pods, prom.pods, ["namespace", "pod"])
    pods = {(r["namespace"], r["pod"]): r for r in prom.pods.iter_rows(named=True)}
    assert ("train", "done-1") not in pods and ("train", "wait-1") in pods  # bound, not done
    assert pods[("serve", "llm-5d8f7c9b4-t5w8r")]["workload"] == "llm"
    assert pods[("train", "train-1")]["peak_gpu_memory_bytes"] > 0
    llm = pods[LLM_POD]
    assert llm["p99_latency_s"] is not None and llm["p95_latency_s"] <= llm["p99_latency_s"]
    assert 0 < llm["sla_violation_ratio"] < 1  # the SLA splits the windows
    assert llm["gpu_util_ratio"] is not None and llm["link_saturation_ratio"] is not None
    assert prom.pods.get_column("sequence_tokens").null_count() == prom.pods.height


def test_namespace_peaks_are_the_duckdb_peaks(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    _same(duck.namespaces, prom.namespaces, ["namespace", "resource"])
    gpu = {
        r["namespace"]: r["daily_peaks"]
        for r in prom.namespaces.filter(pl.col("resource") == "requests.nvidia.com/gpu").to_dicts()
    }
    # Yesterday's larger training run (train-1, the Pending wait-1, big-1, big-2; not the
    # Succeeded done-1), then today's (train-1, train-2, wait-1); eval only yesterday.
    assert gpu["train"][0] == 4.0 + 2 + 4 + 4 and gpu["train"][-1] == 4.0 + 2 + 2
    assert gpu["eval"] == [2.0]
    assert prom.namespaces.get_column("allocatable").null_count() == 0


def test_the_plan_makes_the_same_decisions(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    state = state_from_store(loaded.store, loaded.at)
    left = plan(duck, state, SETTINGS, History.of(), at=loaded.at)
    right = plan(prom, state, SETTINGS, History.of(), at=loaded.at)
    columns = ["kind", "namespace", "name", "action", "proposed", "skip"]
    assert_frame_equal(
        left.frame.select(columns).sort(columns, nulls_last=True),
        right.frame.select(columns).sort(columns, nulls_last=True),
    )
    assert left.suppressed == right.suppressed
    assert len(right) > 0
    # Node labels, memory classes from the peaks, quotas from the daily peaks, time slices.
    assert {"fragmentation", "memory-class", "quota-gpu", "time-slice"} <= set(
        right.frame.get_column("action")
    )


def test_tenants_are_missing_data_not_an_error(
    loaded: Loaded, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    metrics = SignalMetrics(registry)
    source = PromQLSignalSource(loaded.client, metrics=metrics)
    with caplog.at_level(logging.INFO):
        signals = signals_of(source, loaded.at, SETTINGS, metrics=metrics)
    assert signals.tenants.height == 0
    assert "no tenants signal" in caplog.text and "exact per-request latencies" in caplog.text
    assert registry.get_sample_value(
        "sits_controller_signal_errors_total", {"signal": "tenants"}
    ) in (None, 0.0)


def test_a_refused_read_is_counted_and_the_other_signals_measured(loaded: Loaded) -> None:
    registry = CollectorRegistry()
    metrics = SignalMetrics(registry)
    settings = PromQLSignalSettings(promql_gpu_matchers='job=~"("')  # a regex the store refuses
    source = PromQLSignalSource(loaded.client, settings, metrics=metrics)
    signals = signals_of(source, loaded.at, SETTINGS, metrics=metrics)

    def errors(signal: str) -> float:
        value = registry.get_sample_value("sits_controller_signal_errors_total", {"signal": signal})
        return value or 0.0

    assert errors("interference") == errors("memory_peaks") == errors("elastic") == 1
    assert errors("fragmentation") == errors("latency") == errors("namespaces") == 0
    assert signals.nodes.get_column("interference_score").null_count() == signals.nodes.height
    assert signals.nodes.get_column("fragmentation_ratio").drop_nulls().len() > 0
    assert signals.pods.filter(pl.col("p99_latency_s").is_not_null()).height == 1
    assert signals.namespaces.height > 0


def test_no_kube_state_metrics_series_measure_no_subject(loaded: Loaded) -> None:
    _, prom = _both(loaded, promql_ksm_matchers='job="absent"')
    assert prom.nodes.height == prom.pods.height == prom.namespaces.height == 0


def _seed(kube: KubeJson) -> None:
    """The cluster's objects of the newest scrape (nodes, namespaces, pods) in the emulator."""
    for node in NODES:
        kube.request("POST", "/api/v1/nodes", body={"metadata": node["metadata"]})
    pods = _snapshots()[-1]
    for namespace in sorted({p["metadata"]["namespace"] for p in pods}):
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    for pod in pods:
        namespace = pod["metadata"]["namespace"]
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)


def _decisions(db: Path) -> set[tuple[str, str | None, str, str]]:
    with Store.open(db, read_only=True) as store:
        rows = store.query("SELECT kind, namespace, name, action, outcome FROM decisions")
    return {(r["kind"], r["namespace"], r["name"], r["action"]) for r in rows.to_pylist()}


@pytest.mark.k8s
def test_controller_once_reads_promql_with_an_empty_store(loaded: Loaded, tmp_path: Path) -> None:
    """``controller --promql-url`` over a DuckDB file with no rows records the decisions a
    controller over the filled file records (dry-run, one pass, the same emulated cluster)."""
    filled = tmp_path / "filled.duckdb"
    shutil.copyfile(loaded.store.path, filled)
    empty = tmp_path / "empty.duckdb"
    with KubeEmulator() as emu:
        _seed(KubeJson(emu.api_client(), timeout_s=10))
        config = emu.write_kubeconfig(tmp_path / "kubeconfig")
        base = ["controller", "--kubeconfig", str(config), "--once", "--no-leader-election"]
        for db, extra in ((filled, []), (empty, ["--promql-url", loaded.client.base_url])):
            result = CliRunner().invoke(app, [*base, "--db", str(db), *extra])
            assert result.exit_code == 0, result.output
        assert emu.objects("events") == []  # dry-run
    from_promql = _decisions(empty)
    assert from_promql == _decisions(filled)
    assert {a for *_, a in from_promql} >= {"fragmentation", "memory-class", "quota-gpu"}
    with Store.open(empty, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM gpu_samples") == 0
        assert store.scalar("SELECT count(*) FROM node_snapshots") == 0


def test_controller_refuses_a_promql_url_that_is_not_http(tmp_path: Path) -> None:
    args = ["controller", "--db", str(tmp_path / "d.duckdb"), "--promql-url", "vm:8428"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--promql-url" in result.output and "http://" in result.output
    assert not (tmp_path / "d.duckdb").exists()  # refused before anything was opened


class _Counting(PromQLClient):
    """The fixture's VictoriaMetrics, counting instant queries."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.queries = 0

    def query(self, expr: str, at: datetime) -> list[PromSeries]:
        self.queries += 1
        return super().query(expr, at)


def test_finished_days_are_read_once(loaded: Loaded) -> None:
    client = _Counting(loaded.client.base_url)
    with client:
        reads = PromQLSignalReads(client)
        at = loaded.at.replace(tzinfo=None)
        start = at - timedelta(days=14)
        first = reads.namespace_daily_peaks(start, at, KSM_STEP_S)
        asked = client.queries
        midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
        later = at + timedelta(seconds=30)
        if later >= midnight + timedelta(days=1):
            later = at  # 30 s on would add a day to the range (a run at 23:59:30 or later)
        again = reads.namespace_daily_peaks(start, later, KSM_STEP_S)
        assert asked == 15  # 14 whole days and today's part (the first is cut by start)
        # Again: the first day (cut by start) and today, which are not finished, and
        # yesterday too in the first minutes after midnight (its scrapes may still come).
        assert client.queries - asked == 2 + (later - midnight < SETTLE)
        assert_frame_equal(first.sort(pl.all()), again.sort(pl.all()))
        assert first.filter(pl.col("namespace") == "eval").height > 0  # yesterday, kept
