"""SMF, classes and baselines from DuckDB and from a real VictoriaMetrics agree.

Each tick (60 ticks, 15 s apart) the simulator's dcgm-exporter rows (2 nodes x 4 GPUs, pod
labels on the GPUs in use) and one cgroup row per labelled container (read 300 ms after the
GPUs, as an agent's cgroup collector runs after its DCGM read) go into DuckDB with the
container names filled, as the service's attribution fills them, and into VictoriaMetrics as
the agent's own ``/metrics`` exposition of that tick (``generate_latest`` of its registry,
imported with ``/api/v1/import/prometheus``). Half of the containers are served without
names, as an agent without inventory serves them; a kube-state-metrics
``kube_pod_container_info`` series per container names them on the PromQL side. The kubelet's
own cAdvisor series of the same containers (same family names, no ``container_id``) are in
the store too, and must not be read.

Expected agreement (docs/scaling.md, "Agreement with DuckDB"):
- raw reads, and a step grid on which each step holds one tick's GPU and cgroup samples: the
  same rows (times at millisecond resolution), so the same SMF per container (1e-12), the
  same baselines and the same elastic rows;
- a grid that falls between a tick's GPU read and its cgroup read pairs each GPU sample with
  the previous tick's cgroup sample: each SMF value moves by at most the largest tick-to-tick
  change of ``memory.current`` over the GPU's total framebuffer (SMF is 1-Lipschitz in
  ``(free - current) / total``), and each mean gains or loses at most one sample per end of
  the window (2/n of the 0-1 range for n samples).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from typer.testing import CliRunner

from sits_observe.analytics.source import DuckContainerSource
from sits_observe.collectors.agent import AgentMetrics
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.domain.schema.container_fields import FAMILIES
from sits_observe.domain.tables import conform
from sits_observe.errors import ConfigError
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text
from sits_observe.reports.baseline import SPEC as BASELINE
from sits_observe.reports.classes import SPEC as CLASSES
from sits_observe.reports.result import Report
from sits_observe.reports.smf import SPEC as SMF
from sits_observe.reports.spec import PromQLReader, ReportSpec
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.source import PromQLContainerSource
from sits_observe.surfaces.cli.main import app
from tests.integration.promql_support import VictoriaMetrics, grid_start, stamped

STEP_S = 15
TICKS = 60
CGROUP_LAG = timedelta(milliseconds=300)
VALUE_COLUMNS = tuple(f.column for f in FAMILIES)


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    since: datetime
    until: datetime
    max_memory_step_bytes: int
    min_fb_total_bytes: int


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


class Containers:
    """One deterministic cgroup row per labelled container per tick (random-walk values)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.state: dict[tuple[str, str, str, str], dict[str, float]] = {}

    def rows(self, gpu_rows: pa.Table, at: datetime) -> list[dict[str, object]]:
        names = (
            pl.DataFrame(gpu_rows.select(["node", "namespace", "pod", "container"]))
            .drop_nulls()
            .unique()
            .sort("node", "namespace", "pod", "container")
        )
        out = []
        for node, namespace, pod, container in names.iter_rows():
            key = (node, namespace, pod, container)
            s = self.state.setdefault(
                key, {"mem": float(self.rng.integers(1, 20) << 30), "cpu": 0.0, "oom": 0}
            )
            s["mem"] = max(1 << 28, s["mem"] + float(self.rng.integers(-1, 2) << 26))
            s["cpu"] += float(self.rng.uniform(0, 30))
            s["oom"] += int(self.rng.random() < 0.05)
            mem = int(s["mem"])
            out.append(
                {
                    "ts": at + CGROUP_LAG,
                    "node": node,
                    "pod_uid": _digest("uid", namespace, pod)[:32],
                    "container_id": _digest("cid", *key),
                    "runtime": "containerd",
                    "qos_class": "Burstable",
                    "namespace": namespace,
                    "pod": pod,
                    "container": container,
                    "memory_current_bytes": mem,
                    "memory_max_bytes": None if namespace == "research" else 64 << 30,
                    "memory_anon_bytes": mem * 3 // 4,
                    "memory_file_bytes": mem // 5,
                    "memory_kernel_bytes": mem // 20,
                    "oom_events_total": s["oom"] * 2,
                    "oom_kill_events_total": s["oom"],
                    "memory_pressure_some_avg10_ratio": float(self.rng.uniform(0, 0.3)),
                    "memory_pressure_full_avg10_ratio": float(self.rng.uniform(0, 0.1)),
                    "memory_pressure_some_total_s": s["cpu"] / 100,
                    "cpu_pressure_some_avg10_ratio": float(self.rng.uniform(0, 0.5)),
                    "cpu_pressure_some_total_s": s["cpu"] / 10,
                    "cpu_usage_s": s["cpu"],
                    "cpu_throttled_s": s["cpu"] / 7,
                    "cpu_periods_total": int(s["cpu"] * 10),
                    "cpu_throttled_periods_total": int(s["cpu"]),
                    "cpu_limit_cores": 4.0,
                }
            )
        return out


def _unnamed(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every other container without names, as an agent without inventory serves it."""
    return [
        {**r, "namespace": None, "pod": None, "container": None} if i % 2 else r
        for i, r in enumerate(rows)
    ]


def _ksm_info(rows: list[dict[str, object]], at: datetime) -> str:
    lines = ["# TYPE kube_pod_container_info gauge"]
    for r in rows:
        lines.append(
            f'kube_pod_container_info{{namespace="{r["namespace"]}",pod="{r["pod"]}",'
            f'uid="{r["pod_uid"]}",container="{r["container"]}",'
            f'container_id="containerd://{r["container_id"]}"}} 1'
        )
    return stamped("\n".join(lines) + "\n", at)


def _kubelet_cadvisor(rows: list[dict[str, object]], at: datetime) -> str:
    """The kubelet's own cAdvisor series of the same containers: same names, no
    ``container_id`` label (``id`` is the cgroup path); the source must not read them."""
    lines = ["# TYPE container_memory_usage_bytes gauge"]
    for r in rows:
        lines.append(
            f'container_memory_usage_bytes{{id="/kubepods/pod{r["pod_uid"]}/{r["container_id"]}",'
            f'namespace="{r["namespace"]}",pod="{r["pod"]}",container="{r["container"]}"}} 1'
        )
    return stamped("\n".join(lines) + "\n", at)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("promql_containers")
    vm = VictoriaMetrics(root / "vm")
    store = Store.open(root / "sits.duckdb")
    since = grid_start(datetime.now(UTC), STEP_S, timedelta(hours=1))
    cluster = SimulatedCluster(nodes=2, gpus_per_node=4, seed=3)
    containers = Containers(seed=11)
    body: list[str] = []
    all_rows: list[dict[str, object]] = []
    for k in range(TICKS):
        cluster.step(STEP_S)
        at = since + timedelta(seconds=k * STEP_S)
        for node in sorted(cluster.nodes):
            gpu = parse_dcgm(dcgm_text(cluster, node), now=at, node=None).tables["gpu_samples"]
            rows = containers.rows(gpu, at)
            all_rows += rows
            store.append("gpu_samples", gpu)
            if rows:
                store.append("container_samples", conform("container_samples", _table(rows)))
            # The agent's /metrics of this tick on this node (one agent per node).
            agent = AgentMetrics()
            tables = {"gpu_samples": gpu}
            if rows:
                tables["container_samples"] = _table(_unnamed(rows))
            agent.latest.publish(tables)
            body.append(_sample_lines(generate_latest(agent.registry).decode()))
            body.append(_ksm_info(rows, at))
            body.append(_kubelet_cadvisor(rows, at))
    vm.import_text("".join(body))
    store.close()
    store = Store.open(root / "sits.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    frame = pl.DataFrame(all_rows).sort("container_id", "ts")
    step = frame.select(pl.col("memory_current_bytes").diff().abs().over("container_id")).max()
    fb_total = store.scalar("SELECT min(fb_total_bytes) FROM gpu_samples")
    try:
        yield Loaded(
            store,
            client,
            since,
            since + timedelta(seconds=TICKS * STEP_S),
            int(step.item()),
            int(fb_total),
        )
    finally:
        client.close()
        store.close()
        vm.stop()


def _table(rows: list[dict[str, object]]) -> pa.Table:
    return conform("container_samples", pa.Table.from_pylist(rows))


def _sample_lines(text: str) -> str:
    """The tick's sample families only: the agent's own counters carry no timestamps and
    would be stamped at import time, outside the window."""
    keep = [
        line
        for line in text.splitlines()
        if line.startswith(("DCGM_FI_", "container_", "sits_container_"))
    ]
    return "\n".join(keep) + "\n"


def _reader(loaded: Loaded, step_s: float | None = None) -> PromQLReader:
    return PromQLReader(loaded.client, step_s=step_s)


def _both(
    spec: ReportSpec[object],
    loaded: Loaded,
    reader: PromQLReader,
    *,
    grid_offset: timedelta = timedelta(0),
    **settings: object,
) -> tuple[Report, Report]:
    """The report from DuckDB over the loaded window and from VictoriaMetrics over the same
    window shifted by ``grid_offset`` (where a step grid's points fall)."""
    query = spec.validate(settings)
    window = Window(loaded.since, loaded.until, "test")
    shifted = Window(loaded.since + grid_offset, loaded.until + grid_offset, "test")
    assert spec.promql is not None
    return spec.build(loaded.store, window, query), spec.promql(reader, shifted, query)


def _frame(report: Report, keys: list[str]) -> pl.DataFrame:
    return pl.DataFrame(report.main.rows).sort(keys)


def test_raw_container_samples_are_the_duckdb_rows(loaded: Loaded) -> None:
    duck = DuckContainerSource(loaded.store).container_samples(loaded.since, loaded.until)
    prom = PromQLContainerSource(loaded.client).container_samples(loaded.since, loaded.until)
    assert duck.num_rows == prom.num_rows > TICKS
    keys = ["ts", "container_id"]
    left = pl.from_arrow(duck).sort(keys)
    right = pl.from_arrow(prom).sort(keys)
    assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
    # Names come back whole, half of them through kube_pod_container_info.
    identity = ["ts", "node", "pod_uid", "container_id", "runtime", "qos_class"]
    identity += ["namespace", "pod", "container"]
    assert left.select(identity).equals(right.select(identity))
    for column in VALUE_COLUMNS:
        a, b = left[column], right[column]
        assert a.is_null().equals(b.is_null()), column
        if a.dtype.is_integer():
            assert a.equals(b), column
        else:  # VictoriaMetrics keeps floats to about 12 significant digits
            assert ((a - b).abs() / a.abs().clip(lower_bound=1e-300)).max() < 1e-11, column


def _smf(report: Report) -> pl.DataFrame:
    return _frame(report, ["container_id"]).select(
        "container_id", "pod", "gpus", "samples", "mean_smf", "max_smf", "latest_smf"
    )


@pytest.mark.parametrize("step_s", [None, STEP_S])
def test_smf_agrees_raw_and_on_a_grid_after_both_reads(loaded: Loaded, step_s: int | None) -> None:
    # Grid points 1 s after each GPU read: each step holds that tick's GPU sample and its
    # cgroup sample (300 ms later), so the pairs are DuckDB's, stamped at the grid times.
    offset = timedelta(0) if step_s is None else timedelta(seconds=1)
    duck, prom = _both(SMF, loaded, _reader(loaded, step_s), grid_offset=offset, by="container")
    left, right = _smf(duck), _smf(prom)
    assert left.height > 4 and (left["mean_smf"] > 0).any()
    assert left.select("container_id", "pod", "samples").equals(
        right.select("container_id", "pod", "samples")
    )
    for column in ("mean_smf", "max_smf", "latest_smf"):
        assert (left[column] - right[column]).abs().max() < 1e-12, column


def test_smf_on_a_grid_between_the_reads_stays_within_the_bound(loaded: Loaded) -> None:
    # Grid points on the GPU reads: each step holds this tick's GPU sample and the previous
    # tick's cgroup sample; the last tick's cgroup samples fall after the last grid point.
    duck, prom = _both(SMF, loaded, _reader(loaded, STEP_S), by="container")
    left, right = _smf(duck), _smf(prom)
    both = left.join(right, on="container_id", suffix="_prom")
    only_duck = left.join(right, on="container_id", how="anti")
    assert right.join(left, on="container_id", how="anti").height == 0
    assert (only_duck["samples"] == 1).all()  # containers seen in the last tick only
    # One cgroup sample per end of the window, counted once per linked GPU.
    assert ((both["samples"] - both["samples_prom"]).abs() <= both["gpus"]).all()
    step = loaded.max_memory_step_bytes / loaded.min_fb_total_bytes
    bound = step + 2 * both["gpus"] / both["samples"]
    error = (both["mean_smf"] - both["mean_smf_prom"]).abs()
    assert float(error.max()) > 0  # not exact: the pairs differ
    assert (error <= bound).all()
    assert step < 1e-3 and float(bound.median()) < 0.5  # a bound that says something


@pytest.mark.parametrize(
    ("table", "metric", "keys"),
    [
        ("container_samples", "memory_current_bytes", ["namespace", "pod", "container"]),
        ("container_samples", "cpu_pressure_some_avg10_ratio", ["namespace", "pod", "container"]),
        ("gpu_samples", "gpu_util_ratio", ["node", "gpu_uuid"]),
    ],
)
def test_baselines_agree(loaded: Loaded, table: str, metric: str, keys: list[str]) -> None:
    duck, prom = _both(BASELINE, loaded, _reader(loaded), table=table, metric=metric)
    left, right = _frame(duck, keys), _frame(prom, keys)
    assert left.height > 1
    counts = ["samples_kept", "samples_excluded", "samples_unchecked", "samples_null"]
    assert left.select(*keys, *counts).equals(right.select(*keys, *counts))
    for column in ("mean", "p50", "p95"):
        assert (left[column] - right[column]).abs().max() <= 1e-9 * left[column].abs().max()


def test_what_only_duckdb_holds_is_refused_with_the_way_out(loaded: Loaded) -> None:
    window = Window(loaded.since, loaded.until, "test")
    assert BASELINE.promql is not None
    requests = BASELINE.validate({"table": "requests", "metric": "latency_s"})
    with pytest.raises(ConfigError, match="--db or --service"):
        BASELINE.promql(_reader(loaded), window, requests)


def test_elastic_classes_agree(loaded: Loaded) -> None:
    duck, prom = _both(CLASSES, loaded, _reader(loaded), view="elastic")
    keys = ["gpu_uuid"]
    left, right = _frame(duck, keys), _frame(prom, keys)
    assert left.height == 8
    same = ["gpu_uuid", "gpu", "pods", "samples", "triggered", "proposed_memory_quota_bytes"]
    assert left.select(same).equals(right.select(same))
    assert (left["gpu_util_ratio"] - right["gpu_util_ratio"]).abs().max() < 1e-9


def _cli(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize(
    "command",
    [
        ["smf", "--by", "pair"],
        ["baseline", "--table", "container_samples", "--metric", "memory_current_bytes"],
    ],
)
def test_cli_from_promql_prints_the_db_answer(loaded: Loaded, command: list[str]) -> None:
    common = [*command, "-o", "json"]
    from_db = _cli(*common, "--db", str(loaded.store.path))
    from_vm = _cli(*common, "--promql-url", loaded.client.base_url, "--since", "2h")
    assert len(from_db["rows"]) > 4
    assert from_vm["rows"] == from_db["rows"]
