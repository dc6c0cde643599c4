"""The same analyses from DuckDB and from a real VictoriaMetrics agree.

The simulator's dcgm-exporter text (4 nodes x 4 GPUs, 120 scrapes 15 s apart) and a vLLM
server's histograms (40 scrapes) go into DuckDB through the normal collectors + store path and,
stamped with the same scrape times, into VictoriaMetrics' ``/api/v1/import/prometheus``. Then
trend clustering, the interference report and the latency estimates run on both.

Expected agreement (docs/scaling.md, "Agreement"):
- raw reads (``step_s=None``) and a step grid that lands on the scrape times: identical rows,
  so identical clusters, scores equal to 1e-9 and identical window estimates;
- a grid offset from the scrape times: every grid point reads the previous scrape, so the
  means move by at most one sample at each end of the range: <= 2/n of the 0-1 range for n
  samples per GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.analytics.serving.latency import estimate_windows
from sits_observe.analytics.source import (
    DuckGpuSource,
    DuckServerWindows,
    SnapshotServerWindows,
    estimate_windows_from,
    occupancy_from_samples,
)
from sits_observe.analytics.topology.interference import (
    SAMPLE_COLUMNS,
    interference_report,
    load_gpu_samples,
)
from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.analytics.trends.clusters import TrendClusters, cluster_trends
from sits_observe.analytics.trends.series import read_occupancy_series
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.collectors.inference.vllm import VllmCollector
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.source import PromQLGpuSource, PromQLServerSource
from sits_observe.surfaces.cli.main import app
from tests.integration.promql_support import VictoriaMetrics, VllmServer, grid_start, stamped

STEP_S = 15
SCRAPES = 120
VLLM_SCRAPES = 40


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    since: datetime
    until: datetime


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("promql")
    vm = VictoriaMetrics(root / "vm")
    store = Store.open(root / "sits.duckdb")
    since = grid_start(datetime.now(UTC), STEP_S, timedelta(hours=2))
    cluster = SimulatedCluster(nodes=4, gpus_per_node=4, seed=3)
    body: list[str] = []
    for k in range(SCRAPES):
        cluster.step(STEP_S)
        at = since + timedelta(seconds=k * STEP_S)
        for node in sorted(cluster.nodes):
            text = dcgm_text(cluster, node)
            store.append("gpu_samples", parse_dcgm(text, now=at, node=None).tables["gpu_samples"])
            body.append(stamped(text, at))
    server = VllmServer("llama-3-8b", seed=5)
    with VllmCollector("http://127.0.0.1:9/metrics") as collector:
        for k in range(VLLM_SCRAPES):
            server.advance(load=1.0 + (k % 10) / 5)
            at = since + timedelta(seconds=k * STEP_S)
            text = server.text()
            windows = collector.collect_text(text, at).tables.get("server_windows")
            if windows is not None:
                store.append("server_windows", windows)
            body.append(stamped(text, at))
    vm.import_text("".join(body))
    store.close()  # read-only from here: the CLI tests open the same file read-only too
    store = Store.open(root / "sits.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    try:
        yield Loaded(store, client, since, since + timedelta(seconds=SCRAPES * STEP_S))
    finally:
        client.close()
        store.close()
        vm.stop()


def _memberships(result: TrendClusters) -> set[frozenset[str]]:
    groups = {frozenset(m.key for m in c.members) for c in result.clusters}
    return groups | {frozenset({f"noise:{c.members[0].key}"}) for c in result.noise}


def test_raw_gpu_samples_are_the_duckdb_rows(loaded: Loaded) -> None:
    duck = DuckGpuSource(loaded.store).gpu_samples(loaded.since, loaded.until)
    prom = PromQLGpuSource(loaded.client).gpu_samples(loaded.since, loaded.until)
    assert duck.num_rows == prom.num_rows == SCRAPES * 16
    keys = ["ts", "gpu_uuid"]
    checked = ["node", "pod", "fb_used_bytes", "fb_total_bytes", "gpu_util_ratio", "power_w"]
    left = pl.from_arrow(duck.select(keys + checked)).sort(keys)
    right = pl.from_arrow(prom.select(keys + checked)).sort(keys)
    assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
    assert left.select(keys, "node", "pod", "fb_used_bytes", "fb_total_bytes").equals(
        right.select(keys, "node", "pod", "fb_used_bytes", "fb_total_bytes")
    )
    for column in ("gpu_util_ratio", "power_w"):
        assert (left[column] - right[column]).abs().max() < 1e-9


@pytest.mark.parametrize("step_s", [None, STEP_S])
def test_trend_clusters_identical(loaded: Loaded, step_s: int | None) -> None:
    duck_series = read_occupancy_series(loaded.store, since=loaded.since, bucket_s=60)
    samples = PromQLGpuSource(loaded.client).gpu_samples(
        loaded.since, loaded.until, step_s=step_s, columns=["fb_used_bytes", "fb_total_bytes"]
    )
    prom_series = occupancy_from_samples(samples, bucket_s=60)
    assert prom_series.keys == duck_series.keys
    assert abs(prom_series.values - duck_series.values).max() < 1e-12
    duck_clusters = cluster_trends(duck_series)
    prom_clusters = cluster_trends(prom_series)
    assert duck_clusters.n_series == 16
    assert _memberships(prom_clusters) == _memberships(duck_clusters)
    assert [c.words for c in prom_clusters.clusters] == [c.words for c in duck_clusters.clusters]


def _scores(samples: pl.DataFrame) -> dict[str, float]:
    report = interference_report(samples, InterferenceSettings())
    return {g.gpu_uuid: g.score.score for g in report.gpus}


def _prom_frame(loaded: Loaded, step_s: int | None, since: datetime) -> pl.DataFrame:
    table = PromQLGpuSource(loaded.client).gpu_samples(
        since, loaded.until, step_s=step_s, columns=list(SAMPLE_COLUMNS[1:])
    )
    frame = pl.from_arrow(table.select(list(SAMPLE_COLUMNS)))
    assert isinstance(frame, pl.DataFrame)
    return frame


@pytest.mark.parametrize("step_s", [None, STEP_S])
def test_interference_scores_equal_when_aligned(loaded: Loaded, step_s: int | None) -> None:
    duck = _scores(load_gpu_samples(loaded.store, loaded.since, loaded.until))
    prom = _scores(_prom_frame(loaded, step_s, loaded.since))
    assert duck.keys() == prom.keys() and len(duck) == 16
    assert max(duck.values()) > 0.05, "the data must exercise the score"
    for uuid, score in duck.items():
        assert prom[uuid] == pytest.approx(score, abs=1e-9)


def test_interference_scores_within_step_tolerance_when_offset(loaded: Loaded) -> None:
    offset = loaded.since + timedelta(seconds=7)
    duck = _scores(load_gpu_samples(loaded.store, loaded.since, loaded.until))
    prom = _scores(_prom_frame(loaded, STEP_S, offset))
    tolerance = 2 / SCRAPES  # one sample at each end of the range (module docstring)
    differences = [abs(prom[u] - duck[u]) for u in duck]
    assert max(differences) <= tolerance
    # the grid did read shifted points: the comparison is not vacuous
    shifted = _prom_frame(loaded, STEP_S, offset)["ts"]
    assert shifted.dt.second().unique().to_list() in ([7, 22, 37, 52], [7, 22, 52, 37])


@pytest.mark.parametrize("step_s", [None, STEP_S])
def test_latency_estimates_identical(loaded: Loaded, step_s: int | None) -> None:
    duck = estimate_windows(loaded.store, by="model")
    source = SnapshotServerWindows(PromQLServerSource(loaded.client), step_s=step_s)
    windows = source.server_windows(loaded.since, loaded.until)
    prom = estimate_windows_from(windows, by="model")
    assert duck.num_rows == VLLM_SCRAPES - 1
    assert prom.column_names == duck.column_names
    for column in ("model", "window_end", "window_s", "count", "error_bound_s", "estimate"):
        assert prom.column(column).to_pylist() == duck.column(column).to_pylist(), column
    for column in ("p50_s", "p95_s", "p99_s"):
        for a, b in zip(
            prom.column(column).to_pylist(), duck.column(column).to_pylist(), strict=True
        ):
            assert a == pytest.approx(b, rel=1e-12), column
    # the whole server_windows rows agree too (throughput, gauges, mean)
    duck_rows = DuckServerWindows(loaded.store).server_windows(loaded.since, loaded.until)
    for column in ("throughput_rps", "requests_running", "kv_cache_usage_ratio"):
        assert windows.column(column).to_pylist() == pytest.approx(
            duck_rows.column(column).to_pylist()
        )
    means = zip(
        windows.column("latency_mean_s").to_pylist(),
        duck_rows["latency_mean_s"].to_pylist(),
        strict=True,
    )
    assert all(a == pytest.approx(b, rel=1e-9) for a, b in means)


def test_series_endpoint_lists_every_gpu(loaded: Loaded) -> None:
    labels = loaded.client.series(['{__name__="DCGM_FI_DEV_FB_USED"}'], loaded.since, loaded.until)
    assert len({s["UUID"] for s in labels}) == 16


def test_empty_range_reads_nothing(loaded: Loaded, tmp_path: Path) -> None:
    before = loaded.since - timedelta(days=1)
    table = PromQLGpuSource(loaded.client).gpu_samples(before, before + timedelta(minutes=5))
    assert table.num_rows == 0
    assert isinstance(table, pa.Table)


# -- the CLI's --promql-url ---------------------------------------------------------------


def _cli(*args: str) -> dict[str, object] | list[dict[str, object]]:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert isinstance(document, dict | list)
    return document


def _db_path(loaded: Loaded) -> str:
    return str(loaded.store.path)


def test_cli_trends_from_promql_match_the_db(loaded: Loaded) -> None:
    common = ["trends", "--bucket-s", "60", "-o", "json"]
    from_db = _cli(*common, "--db", _db_path(loaded))
    from_vm = _cli(*common, "--promql-url", loaded.client.base_url, "--since", "3h")
    assert isinstance(from_db, dict) and isinstance(from_vm, dict)
    assert from_vm["rows"] == from_db["rows"]  # clusters, members named alike
    assert from_vm["tables"]["noise"] == from_db["tables"]["noise"]
    assert from_db["facts"]["n_series"] == 16


def _same_rows(left: object, right: object) -> None:
    """Report rows equal, floats to 1e-9 (the two reads sum the same samples in another order)."""
    assert isinstance(left, list) and isinstance(right, list) and len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, abs=1e-9), key
            else:
                assert b[key] == value, key


def test_cli_interference_from_promql_matches_the_db(loaded: Loaded) -> None:
    common = ["interference", "-o", "json"]
    from_db = _cli(*common, "--db", _db_path(loaded))
    from_vm = _cli(*common, "--promql-url", loaded.client.base_url, "--since", "3h")
    assert isinstance(from_db, dict) and isinstance(from_vm, dict)
    assert len(from_db["rows"]) == 4  # nodes
    _same_rows(from_vm["rows"], from_db["rows"])
    _same_rows(from_vm["tables"]["gpus"]["rows"], from_db["tables"]["gpus"]["rows"])


def test_cli_latency_estimates_from_promql_match_the_db(loaded: Loaded) -> None:
    common = ["latency", "--source", "estimate", "--format", "json"]
    from_db = _cli(*common, "--db", _db_path(loaded))
    from_vm = _cli(*common, "--promql-url", loaded.client.base_url, "--since", "3h")
    assert isinstance(from_db, dict) and isinstance(from_vm, dict)
    assert from_vm["rows"] == from_db["rows"]  # the same windows, bit for bit
    assert from_vm["columns"] == from_db["columns"]
    assert isinstance(from_db["rows"], list) and len(from_db["rows"]) == VLLM_SCRAPES - 1
    assert (from_db["facts"]["store"], from_vm["facts"]["store"]) == ("duckdb", "promql")


def test_cli_refuses_exact_latency_from_promql(loaded: Loaded) -> None:
    result = CliRunner().invoke(
        app, ["latency", "--promql-url", loaded.client.base_url, "--since", "1h"]
    )
    assert result.exit_code == 2
    assert "--source estimate" in result.stderr
    result = CliRunner().invoke(
        app,
        ["latency", "--promql-url", loaded.client.base_url, "--source", "estimate"],
    )
    assert result.exit_code == 2 and "needs --since" in result.stderr
