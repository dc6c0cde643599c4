"""`heatmap --promql-url`: the latency-throughput heatmap from vLLM histograms in a real
VictoriaMetrics, against the request log of the same requests in DuckDB.

One model serves a load that ramps from 1 to 30 requests/s over 60 time bins of 10 s, its
latency growing past a knee. Every request goes into the DuckDB ``requests`` table; a vLLM
``/metrics`` body (cumulative ``e2e_request_latency_seconds`` histogram of the requests
completed before each bin boundary) is stamped at every boundary and imported into
VictoriaMetrics. Expected (analytics/heatmap/histograms.py):
- time bins, their requests, throughputs and throughput bins: identical to the request path;
- each throughput bin's P95 estimate: the true P95 of its requests (the ceil(0.95 n)-th
  smallest) lies within the stated error (the bucket);
- with the SLO on a bucket bound, the safe maximum equals the one the true P95s give.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.domain.tables import REQUESTS
from sits_observe.reports.result import Report
from sits_observe.reports.serving.heatmap_maps import heatmaps_of
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from tests.integration.promql_support import E2E_BOUNDS, VictoriaMetrics, grid_start, stamped

BIN_S = 10
BINS = 60
MODEL = "llama-3-8b"
SLO_S = 1.5  # a bucket bound of E2E_BOUNDS
WIDTH_RPS = 2.0  # throughput bin
assert SLO_S in E2E_BOUNDS


@dataclass(frozen=True)
class Loaded:
    db: Path
    vm_url: str
    since: datetime
    #: per time bin start, the latencies that completed in it
    latencies: dict[datetime, list[float]]


def _histogram_text(latencies: list[float]) -> str:
    name = "vllm:e2e_request_latency_seconds"
    labels = f'model_name="{MODEL}",pod="vllm-0"'
    values = np.asarray(latencies)
    lines = [f"# TYPE {name} histogram"]
    for bound in E2E_BOUNDS:
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {int((values <= bound).sum())}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {values.size}')
    lines.append(f"{name}_sum{{{labels}}} {float(values.sum())!r}")
    lines.append(f"{name}_count{{{labels}}} {values.size}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("heatmap_promql")
    vm = VictoriaMetrics(root / "vm")
    rng = np.random.default_rng(11)
    since = grid_start(datetime.now(UTC), BIN_S, timedelta(hours=1))
    rows: list[dict[str, Any]] = []
    per_bin: dict[datetime, list[float]] = {}
    done: list[float] = []
    body = [stamped(_histogram_text(done), since)]
    for k in range(BINS):
        start = since + timedelta(seconds=k * BIN_S)
        rate = 1 + 29 * k / (BINS - 1)
        n = int(rng.poisson(rate * BIN_S))
        load = rate / 30
        # a queue: latency grows slowly, then fast past ~70 % of the top rate
        latencies = rng.lognormal(np.log(0.4 + 0.2 * load + 3.0 * max(0.0, load - 0.7)), 0.3, n)
        offsets = np.sort(rng.uniform(0.001, BIN_S - 0.001, n))
        for offset, latency in zip(offsets, latencies, strict=True):
            ts = (start + timedelta(seconds=float(offset))).replace(tzinfo=None)
            rows.append({"ts": ts, "model": MODEL, "latency_s": float(latency), "ok": True})
        per_bin[start.replace(tzinfo=None)] = [float(v) for v in latencies]
        done.extend(float(v) for v in latencies)
        body.append(stamped(_histogram_text(done), start + timedelta(seconds=BIN_S)))
    vm.import_text("".join(body))
    db = root / "sits.duckdb"
    with Store.open(db) as store:
        store.append("requests", pa.Table.from_pylist(rows, schema=REQUESTS.schema))
    try:
        yield Loaded(db, vm.base, since.replace(tzinfo=None), per_bin)
    finally:
        vm.stop()


def _heatmap(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        app,
        [
            "heatmap",
            "--bin-s",
            str(BIN_S),
            "--throughput-bin-rps",
            str(WIDTH_RPS),
            "-o",
            "json",
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def _pooled(loaded: Loaded) -> dict[float, list[float]]:
    """The generated latencies by throughput bin (lower edge, rps)."""
    pooled: dict[float, list[float]] = {}
    for values in loaded.latencies.values():
        if values:
            lo = math.floor(len(values) / BIN_S / WIDTH_RPS) * WIDTH_RPS
            pooled.setdefault(lo, []).extend(values)
    return pooled


def _true_p95(values: list[float]) -> float:
    return float(np.quantile(np.asarray(values), 0.95, method="inverted_cdf"))


def test_time_bins_and_throughput_bins_are_the_request_path_s(loaded: Loaded) -> None:
    windows = ["--table", "windows", "--since", "2h"]
    from_db = _heatmap(*windows, "--db", str(loaded.db))
    from_vm = _heatmap(*windows, "--promql-url", loaded.vm_url)
    assert len(from_db["rows"]) == BINS
    keys = ("start", "count", "throughput_rps", "throughput_bin")
    assert [{k: r[k] for k in keys} for r in from_vm["rows"]] == [
        {k: r[k] for k in keys} for r in from_db["rows"]
    ]
    assert (from_db["facts"]["store"], from_vm["facts"]["store"]) == ("duckdb", "promql")


def test_p95_per_throughput_bin_within_the_stated_bucket(loaded: Loaded) -> None:
    from_db = _heatmap("--since", "2h", "--db", str(loaded.db))
    from_vm = _heatmap("--since", "2h", "--promql-url", loaded.vm_url)
    db_bins = {r["throughput_lo_rps"]: r for r in from_db["rows"]}
    # the true P95 of each throughput bin, from the generated latencies
    pooled = _pooled(loaded)
    assert len(pooled) >= 10
    assert {r["throughput_lo_rps"] for r in from_vm["rows"]} == set(db_bins) == set(pooled)
    for row in from_vm["rows"]:
        lo = row["throughput_lo_rps"]
        assert row["requests"] == db_bins[lo]["requests"] == len(pooled[lo])
        assert row["windows"] == db_bins[lo]["windows"]
        error = row["p95_error_s"]
        assert error is not None and 0 < error < 10  # a finite bucket
        assert abs(row["p95_s"] - _true_p95(pooled[lo])) <= error


def test_safe_max_at_an_slo_on_a_bucket_bound_matches_the_true_p95s(loaded: Loaded) -> None:
    slo = ["--since", "2h", "--slo-ms", str(SLO_S * 1000), "--min-bin-requests", "20"]
    from_vm = _heatmap(*slo, "--promql-url", loaded.vm_url)
    pooled = _pooled(loaded)
    expected = None
    for lo in sorted(pooled):
        if len(pooled[lo]) < 20:
            continue
        if _true_p95(pooled[lo]) > SLO_S:
            break
        expected = lo
    (limits,) = from_vm["tables"]["limits"]["rows"]
    assert expected is not None and limits["safe_max_rps"] == expected
    assert limits["exceeded_from_rps"] is not None  # the ramp went past the SLO
    assert any("ESTIMATES" in note for note in from_vm["notes"])


def test_refusals_say_what_to_do(loaded: Loaded) -> None:
    runner = CliRunner()
    by_gpu = runner.invoke(
        app, ["heatmap", "--promql-url", loaded.vm_url, "--since", "2h", "--by", "gpu"]
    )
    assert by_gpu.exit_code == 2 and "do not know the GPU" in by_gpu.stderr
    stepped = ["heatmap", "--promql-url", loaded.vm_url, "--since", "2h", "--promql-step-s", "30"]
    step = runner.invoke(app, [*stepped, "--bin-s", "10"])
    assert step.exit_code == 2 and "leave --promql-step-s out" in step.stderr
    other = runner.invoke(
        app, ["heatmap", "--promql-url", loaded.vm_url, "--since", "2h", "--model", "nope"]
    )
    assert other.exit_code != 0 and "for model nope" in other.stderr


def test_grid_reads_the_cells_from_the_same_store_and_png_is_refused(
    loaded: Loaded, tmp_path: Path
) -> None:
    runner = CliRunner()
    common = ["heatmap", "--promql-url", loaded.vm_url, "--since", "2h", "--bin-s", str(BIN_S)]
    grid = runner.invoke(app, [*common, "--grid"], env={"COLUMNS": "200"})
    assert grid.exit_code == 0, grid.output
    assert "requests per cell" in grid.stdout
    assert "1500" in grid.stdout  # a row per histogram bucket, labelled by its lower bound, ms
    png = runner.invoke(app, [*common, "--png", str(tmp_path / "h.png")])
    assert png.exit_code == 2 and "--grid or --table cells" in png.stderr
    assert not (tmp_path / "h.png").exists()


def test_the_buckets_edges_travel_with_the_report(loaded: Loaded) -> None:
    """Every bucket's lower edge is in the JSON facts, so a report read back (``--service``)
    draws its grid rows at the histogram's bounds, a row with no cell included."""
    doc = _heatmap("--promql-url", loaded.vm_url, "--since", "2h", "--table", "cells")
    edges = doc["facts"]["heatmaps"][0]["latency_edges_ms"]
    assert edges == pytest.approx([0.0, *(b * 1000 for b in E2E_BOUNDS)])
    [h] = heatmaps_of(Report.from_document(doc))
    assert [h.latency_lo_ms(i) for i in range(len(edges))] == pytest.approx(edges)
    # The DuckDB path's bins are even: no edges in its facts.
    even = _heatmap("--db", str(loaded.db), "--since", "2h", "--until", "now")
    assert all("latency_edges_ms" not in f for f in even["facts"]["heatmaps"])
