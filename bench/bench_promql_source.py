"""Where one DuckDB file stops being enough: store size, ingest and analysis reads, DuckDB vs
VictoriaMetrics through the PromQL source (docs/scaling.md quotes the output).

Input: a synthetic dcgm-exporter fleet (``bench/_dcgm_fleet.py``, default counters) of NODES x
8 GPUs, scraped SCRAPES times 15 s apart (same GPUs; each scrape's values from another seed).
Both stores get the same bodies: DuckDB through ``DcgmParser`` + ``Store.append_batch``,
VictoriaMetrics (single node, Debian package) through ``/api/v1/import/prometheus`` with the
scrape times stamped on every sample.

Timed reads (median of 3): the interference report's columns for the whole window
(``DuckGpuSource`` vs ``PromQLGpuSource`` raw and with a 60 s step) and the trend series
(``read_occupancy_series`` vs ``occupancy_from_samples`` over ``PromQLGpuSource``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _dcgm_fleet import generate

from sits_observe.analytics.source import DuckGpuSource, occupancy_from_samples
from sits_observe.analytics.topology.interference import SAMPLE_COLUMNS
from sits_observe.analytics.trends.series import read_occupancy_series
from sits_observe.collectors.dcgm import DcgmParser
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.source import PromQLGpuSource
from tests.integration.promql_support import VictoriaMetrics, grid_start, stamped


def _same_gpus(base: list[str], other: list[str]) -> str:
    """``other``'s values under ``base``'s label sets: the same GPUs, values that move.

    (The fleet generator draws UUIDs from its seed, so each seed alone is a new fleet.)
    """
    out = []
    for mine, theirs in zip(base, other, strict=True):
        if not mine or mine.startswith("#"):
            out.append(mine)
        else:
            out.append(mine[: mine.rindex(" ")] + theirs[theirs.rindex(" ") :])
    return "\n".join(out)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _median_s(fn: Callable[[], object], runs: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--scrapes", type=int, default=40)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-promql-"))
    since = grid_start(datetime.now(UTC), 15, timedelta(hours=3))
    until = since + timedelta(seconds=15 * args.scrapes)
    store = Store.open(root / "sits.duckdb")
    vm = VictoriaMetrics(root / "vm")
    dcgm = DcgmParser()
    duck_ingest_s = vm_ingest_s = 0.0
    rows = 0
    base = generate(args.nodes, 8, seed=7).text.split("\n")
    for k in range(args.scrapes):
        text = _same_gpus(base, generate(args.nodes, 8, seed=k).text.split("\n"))
        at = since + timedelta(seconds=15 * k)
        started = time.perf_counter()
        table = dcgm.parse(text, now=at, node=None).tables["gpu_samples"]
        store.append_batch({"gpu_samples": table})
        duck_ingest_s += time.perf_counter() - started
        rows += table.num_rows
        body = stamped(text, at)
        started = time.perf_counter()
        vm.import_text(body)
        vm_ingest_s += time.perf_counter() - started
    store.query("CHECKPOINT")
    duck_bytes = (root / "sits.duckdb").stat().st_size
    vm_bytes = _dir_bytes(root / "vm")
    client = PromQLClient(vm.base, timeout_s=600)
    columns = list(SAMPLE_COLUMNS[1:])
    prom = PromQLGpuSource(client)
    reads = {
        "interference columns, DuckDB": lambda: DuckGpuSource(store).gpu_samples(
            since, until, columns=columns
        ),
        "interference columns, PromQL raw": lambda: prom.gpu_samples(since, until, columns=columns),
        "interference columns, PromQL step 60 s": lambda: prom.gpu_samples(
            since, until, step_s=60, columns=columns
        ),
        "trend series, DuckDB SQL": lambda: read_occupancy_series(store, since=since, bucket_s=60),
        "trend series, PromQL raw": lambda: occupancy_from_samples(
            prom.gpu_samples(since, until, columns=["fb_used_bytes", "fb_total_bytes"]),
            bucket_s=60,
        ),
    }
    print(f"fleet {args.nodes} nodes x 8 GPUs, {args.scrapes} scrapes 15 s apart: {rows} rows")
    print(
        f"ingest: DuckDB {rows / duck_ingest_s:,.0f} rows/s; VictoriaMetrics import+flush "
        f"{rows / vm_ingest_s:,.0f} GPU-rows/s"
    )
    print(
        f"on disk: DuckDB {duck_bytes / rows:.1f} B/row ({duck_bytes / 1e6:.1f} MB); "
        f"VictoriaMetrics {vm_bytes / rows:.1f} B/row ({vm_bytes / 1e6:.1f} MB, all families)"
    )
    for name, fn in reads.items():
        seconds, result = _median_s(fn)
        size = getattr(result, "num_rows", None) or getattr(result, "points", None)
        print(f"{name}: {seconds:.3f} s ({size} rows/points)")
    client.close()
    store.close()
    vm.stop()


if __name__ == "__main__":
    main()
