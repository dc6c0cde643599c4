"""Inventory at 10,000 pods: rows stored as full snapshots (schema 5) vs as changes (schema 6).

Data (numpy, seeded): 10,000 pods on 1,250 nodes, one inventory snapshot every 30 s (the kube
collector's default) for ``--hours``. 70 % of the pods are long-lived (serving, training:
exponential lifetimes, mean 24 h), 30 % are batch pods (mean 30 min); an ended pod is
replaced by a new one (new uid and name) that is Pending for one snapshot, then Running with
its ``ready_at`` set, so each new pod is two versions. Every 10 minutes one node goes NotReady
for 5 minutes. That is about 53 new pods per snapshot.

Stored two ways, into two DuckDB files:

- ``snapshots``: schema version 5 (migrations 1-5 applied by hand, as a build of version 5
  left it): every row of every snapshot in the ``pods`` / ``nodes`` tables;
- ``changes``: this build's :class:`~sits_observe.store.Store`, one ``append_batch`` per
  snapshot (as the service's inventory loop does; each timed), a full snapshot every
  ``--full-every-s``.

Reported: rows stored and file size (after CHECKPOINT) per simulated span and per day
(scaled linearly: after the first epoch, versions grow linearly with time), append time per
snapshot, and the read time (median of 5, warm) of the analyses' typical inventory queries on
both files, whose answers are compared (they must be equal). ``--record`` writes the block
into docs/benchmarks.md between the inventory-bench markers.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._docs import write_block  # noqa: E402
from sits_observe.domain.tables import NODES, PODS  # noqa: E402
from sits_observe.store import Store  # noqa: E402
from sits_observe.store.inventory import InventorySettings  # noqa: E402
from sits_observe.store.migrations import migrations  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- inventory-bench:begin -->", "<!-- inventory-bench:end -->"
SECTION = "## Inventory: 10,000 pods as snapshots vs as changes"
T0 = datetime(2026, 11, 2)
STEP_S = 30
LONG_SHARE, LONG_MEAN_S, BATCH_MEAN_S = 0.7, 24 * 3600.0, 1800.0


class Fleet:
    """The pods and nodes at each snapshot (see the module docstring)."""

    def __init__(self, pods: int, nodes: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n_nodes = nodes
        self.serial = 0
        self.uid = np.empty(pods, dtype=object)
        self.node = np.empty(pods, dtype=np.int64)
        self.gpus = np.empty(pods, dtype=np.int64)
        self.long = np.empty(pods, dtype=bool)
        self.born = np.zeros(pods, dtype=np.int64)  # snapshot index it appeared at
        self.ends = np.empty(pods, dtype=np.int64)
        for k in range(pods):
            self._new(k, born=-10, now=0)

    def _new(self, k: int, born: int, now: int) -> None:
        self.serial += 1
        self.uid[k] = f"{self.serial:08d}-6f1c-4c2e-9a41-{self.serial:012d}"
        self.node[k] = self.rng.integers(self.n_nodes)
        self.gpus[k] = self.rng.choice([1, 1, 1, 2, 4, 8])
        self.long[k] = self.rng.random() < LONG_SHARE
        mean = LONG_MEAN_S if self.long[k] else BATCH_MEAN_S
        self.born[k] = born
        self.ends[k] = now + 1 + int(self.rng.exponential(mean) / STEP_S)

    def step(self, i: int) -> None:
        for k in np.flatnonzero(self.ends <= i):
            self._new(int(k), born=i, now=i)

    def pods(self, i: int) -> pa.Table:
        n = len(self.uid)
        ts = T0 + timedelta(seconds=STEP_S * i)
        running = self.born < i
        born_at = np.array([T0 + timedelta(seconds=STEP_S * int(b)) for b in self.born])
        kind = np.where(self.long, "serve", "batch")
        name = np.array([f"{k}-{u[:8]}" for k, u in zip(kind, self.uid, strict=True)])
        cols: dict[str, Any] = {
            "ts": pa.array([ts] * n, pa.timestamp("us")),
            "pod_uid": pa.array(self.uid, pa.string()),
            "namespace": pa.array(np.char.add("team-", (self.node % 40).astype(str))),
            "pod": pa.array(name),
            "node": pa.array(np.char.add("gpu-node-", self.node.astype(str))),
            "phase": pa.array(np.where(running, "Running", "Pending")),
            "qos_class": pa.array(["Burstable"] * n),
            "owner_kind": pa.array(np.where(self.long, "ReplicaSet", "Job")),
            "owner_name": pa.array(kind),
            "workload": pa.array(kind),
            "gpu_request": pa.array(self.gpus, pa.int32()),
            "cpu_request_milli": pa.array(self.gpus * 4000),
            "memory_request_bytes": pa.array(self.gpus * (32 << 30)),
            "containers_json": pa.array(
                [f'[{{"name":"main","container_id":"containerd://{u}"}}]' for u in self.uid]
            ),
            "created_at": pa.array(born_at, pa.timestamp("us")),
            "scheduled_at": pa.array(born_at, pa.timestamp("us")),
            "ready_at": pa.array(
                [b if r else None for b, r in zip(born_at, running, strict=True)],
                pa.timestamp("us"),
            ),
            "gpu_milli": pa.array(np.full(n, 1000), pa.int32()),
        }
        table = pa.table(cols)
        missing = [f for f in PODS.schema if f.name not in cols]
        for f in missing:
            table = table.append_column(f, pa.nulls(n, f.type))
        return table.select(PODS.schema.names).cast(PODS.schema)

    def nodes(self, i: int) -> pa.Table:
        ts = T0 + timedelta(seconds=STEP_S * i)
        n = self.n_nodes
        ready = np.ones(n, dtype=bool)
        # Every 10 minutes one node goes NotReady for 5 minutes.
        if (i * STEP_S) % 600 < 300:
            ready[(i * STEP_S // 600) % n] = False
        names = np.char.add("gpu-node-", np.arange(n).astype(str))
        return pa.table(
            {
                "ts": pa.array([ts] * n, pa.timestamp("us")),
                "node": pa.array(names),
                "gpu_allocatable": pa.array(np.full(n, 8), pa.int32()),
                "gpu_product": pa.array(["NVIDIA-H100-80GB-HBM3"] * n),
                "gpu_memory_bytes": pa.array(np.full(n, 80 << 30)),
                "cpu_allocatable_milli": pa.array(np.full(n, 192_000)),
                "memory_allocatable_bytes": pa.array(np.full(n, 2 << 40)),
                "ready": pa.array(ready),
                "labels_json": pa.array(['{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}'] * n),
            }
        ).cast(NODES.schema)


def version_5_file(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    for migration in migrations()[:5]:
        con.execute(migration.sql)
        con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)", [migration.version])
    return con


def build(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    snapshots = int(args.hours * 3600 / STEP_S)
    fleet = Fleet(args.pods, args.nodes, seed=14)
    old = version_5_file(workdir / "snapshots.duckdb")
    new = Store.open(
        workdir / "changes.duckdb",
        inventory=InventorySettings(full_snapshot_every_s=args.full_every_s),
    )
    append_s: list[float] = []
    old_s: list[float] = []
    for i in range(snapshots):
        fleet.step(i)
        pods, nodes = fleet.pods(i), fleet.nodes(i)
        started = time.perf_counter()
        new.append_batch({"pods": pods, "nodes": nodes})
        append_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        old.register("_p", pods)
        old.register("_n", nodes)
        old.execute("BEGIN TRANSACTION")
        old.execute("INSERT INTO pods SELECT * FROM _p").fetchall()
        old.execute("INSERT INTO nodes SELECT * FROM _n").fetchall()
        old.execute("COMMIT")
        old_s.append(time.perf_counter() - started)
    stored = {
        "snapshots": {
            "pods": old.execute("SELECT count(*) FROM pods").fetchall()[0][0],
            "nodes": old.execute("SELECT count(*) FROM nodes").fetchall()[0][0],
        },
        "changes": {
            "pods": new.scalar("SELECT count(*) FROM pod_versions"),
            "nodes": new.scalar("SELECT count(*) FROM node_versions"),
            "snapshot times": new.scalar("SELECT count(*) FROM inventory_snapshots"),
        },
    }
    old.execute("CHECKPOINT")
    old.close()
    new.close()
    return {
        "snapshots": snapshots,
        "stored": stored,
        "append_s": append_s,
        "old_append_s": old_s,
        "bytes": {
            name: (workdir / f"{name}.duckdb").stat().st_size for name in ("snapshots", "changes")
        },
    }


def queries(last: datetime) -> dict[str, tuple[str, str, list[Any]]]:
    """Each read as the analyses issued it before version 6 (on the snapshots file) and as
    they issue it now (on the changes file): the readers that only need the latest snapshot
    time read it from ``pod_snapshots`` / ``node_snapshots``."""
    hour_ago = last - timedelta(hours=1)
    latest_pods = (
        "SELECT namespace, pod, node, gpu_request, gpu_milli FROM pods "
        "WHERE ts = (SELECT max(ts) FROM {t}) ORDER BY ALL"
    )
    in_window = (
        "SELECT namespace, pod AS name, priority_class FROM pods "
        "WHERE ts = (SELECT max(ts) FROM {t} WHERE ts <= ? AND ts >= ?) ORDER BY ALL"
    )
    nodes = (
        "SELECT sum(gpu_allocatable), count(*) FILTER (WHERE ready) FROM nodes "
        "WHERE ts = (SELECT max(ts) FROM {t} WHERE ts >= ? AND ts <= ?)"
    )
    same = {
        "pods seen in the last hour (what-if trace)": (
            "SELECT pod_uid, arg_max(gpu_request, ts), arg_max(node, ts) FROM pods "
            "WHERE ts >= ? AND ts <= ? GROUP BY pod_uid ORDER BY ALL",
            [hour_ago, last],
        ),
        "pods per snapshot, last hour (fleet series)": (
            "SELECT ts, count(*), sum(gpu_request) FROM pods WHERE ts >= ? GROUP BY ts ORDER BY ts",
            [hour_ago],
        ),
        "each pod's first and last snapshot, all (timeline, experiment)": (
            "SELECT pod_uid, min(ts), max(ts) FROM pods GROUP BY pod_uid ORDER BY ALL",
            [],
        ),
    }
    return {
        "max(ts) FROM pods (unchanged form: expands every snapshot)": (
            "SELECT max(ts) FROM pods",
            "SELECT max(ts) FROM pods",
            [],
        ),
        "latest snapshot time (report windows, extender)": (
            "SELECT max(ts) FROM pods",
            "SELECT max(ts) FROM pod_snapshots",
            [],
        ),
        "latest pods (extender, live FGD)": (
            latest_pods.format(t="pods"),
            latest_pods.format(t="pod_snapshots"),
            [],
        ),
        "latest pods in a window (controller signals)": (
            in_window.format(t="pods"),
            in_window.format(t="pod_snapshots"),
            [last, hour_ago],
        ),
        "latest nodes' allocatable (capacity)": (
            nodes.format(t="nodes"),
            nodes.format(t="node_snapshots"),
            [hour_ago, last],
        ),
        **{label: (sql, sql, params) for label, (sql, params) in same.items()},
    }


def read_times(workdir: Path, repeats: int) -> list[dict[str, Any]]:
    cons = {
        name: duckdb.connect(str(workdir / f"{name}.duckdb"), read_only=True)
        for name in ("snapshots", "changes")
    }
    last = cons["snapshots"].execute("SELECT max(ts) FROM pods").fetchall()[0][0]
    rows = []
    for label, (old_sql, new_sql, params) in queries(last).items():
        result: dict[str, Any] = {"query": label}
        answers = {}
        for name, sql in (("snapshots", old_sql), ("changes", new_sql)):
            con = cons[name]
            answers[name] = con.execute(sql, params).fetchall()  # warm-up, and the answer
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                con.execute(sql, params).fetchall()
                times.append(time.perf_counter() - started)
            result[name] = statistics.median(times)
        if answers["snapshots"] != answers["changes"]:
            raise SystemExit(f"answers differ for {label!r}")
        result["rows"] = len(answers["changes"])
        rows.append(result)
    return rows


def p(values: list[float], q: float) -> float:
    return float(np.quantile(values, q))


def render(args: argparse.Namespace, built: dict[str, Any], reads: list[dict[str, Any]]) -> str:
    scale = 24 / args.hours
    st = built["stored"]
    old_rows = st["snapshots"]["pods"] + st["snapshots"]["nodes"]
    new_rows = sum(st["changes"].values())
    lines = [
        f"`python bench/bench_inventory.py --hours {args.hours:g} --record` on "
        f"{platform.machine()} ({os.cpu_count()} CPUs, shared), DuckDB {duckdb.__version__}: "
        f"{args.pods:,} pods on {args.nodes:,} nodes, a snapshot every {STEP_S} s for "
        f"{args.hours:g} h ({built['snapshots']:,} snapshots), a full snapshot every "
        f"{args.full_every_s:g} s; per day = the span's rows x {scale:g}.",
        "",
        "| stored as | pod rows | node rows | snapshot rows | rows per day | file size |",
        "|---|---:|---:|---:|---:|---:|",
        f"| full snapshots (schema 5) | {st['snapshots']['pods']:,} | "
        f"{st['snapshots']['nodes']:,} | - | {old_rows * scale:,.0f} | "
        f"{built['bytes']['snapshots'] / 1e6:,.0f} MB |",
        f"| changes (schema 6) | {st['changes']['pods']:,} | {st['changes']['nodes']:,} | "
        f"{st['changes']['snapshot times']:,} | {new_rows * scale:,.0f} | "
        f"{built['bytes']['changes'] / 1e6:,.0f} MB |",
        "",
        f"Reduction: {old_rows / new_rows:,.0f}x fewer rows. One snapshot appended (10,000 pods "
        f"+ {args.nodes:,} nodes, one transaction): as changes p50 "
        f"{p(built['append_s'], 0.5) * 1e3:.0f} ms, p99 {p(built['append_s'], 0.99) * 1e3:.0f} "
        f"ms; as a plain insert p50 {p(built['old_append_s'], 0.5) * 1e3:.0f} ms.",
        "",
        "| query (what reads it) | rows | snapshots | changes |",
        "|---|---:|---:|---:|",
    ]
    for r in reads:
        lines.append(
            f"| {r['query']} | {r['rows']:,} | {r['snapshots'] * 1e3:.1f} ms | "
            f"{r['changes'] * 1e3:.1f} ms |"
        )
    lines += [
        "",
        "Every query's answer is the same from both files (compared in full). Reads of one "
        "snapshot join only its epoch's versions (DuckDB prunes the rest by `epoch_at`); "
        "`max(ts) FROM pods` expands every snapshot kept, which is why the readers that need "
        "only the time read `pod_snapshots` / `node_snapshots`.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_250)
    parser.add_argument("--hours", type=float, default=4.0, help="simulated span")
    parser.add_argument("--full-every-s", type=float, default=3600.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        built = build(args, workdir)
        reads = read_times(workdir, args.repeats)
    text = render(args, built, reads)
    print(text)
    if args.record:
        write_block(DOCS, BEGIN, END, text, SECTION)


if __name__ == "__main__":
    main()
