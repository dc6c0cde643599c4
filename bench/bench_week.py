"""A week of history at 100 nodes: store size per day and each analysis' wall time, from
DuckDB (with retention and the minute roll-ups) and from VictoriaMetrics.

A simulated clock, not seven days of waiting. The fleet (numpy, seeded): ``--nodes`` nodes x
8 GPUs, ``--containers`` containers per node (one pod each; the first 8 hold one GPU each,
the rest are CPU-only), sampled every ``--interval-s``; an inventory snapshot every 30 s (the
kube collector's default). 70 % of the pods are long-lived (mean lifetime 24 h), 30 % batch
pods (mean 30 min); an ended pod is replaced by a new one (new uid, container id and name)
that is Pending for one snapshot, and every 10 minutes one node goes NotReady for 5 minutes.
GPU memory follows the pod holding the GPU; a free GPU reads idle.

Written as the service writes it: one :meth:`Store.append_batch` per ``--batch-s`` of
simulated time holding that span's ``gpu_samples``, ``container_samples`` and inventory
snapshots (an agent shipping several ticks per batch, ``agent --ship-every``; the inventory
several snapshots at once, which :mod:`sits_observe.store.inventory` folds into the same
versions as one by one), and :func:`enforce_retention` with the simulated time every
simulated hour, as the service's retention loop does (default settings: 6 h raw, 30 d
roll-ups, 7 d inventory). After each simulated day: ``CHECKPOINT`` and the file's size.

The same samples go to a real VictoriaMetrics (``/api/v1/import/prometheus``, exposition
text with timestamps) under the agent's names (:mod:`sits_observe.collectors.agent.latest`:
dcgm-exporter's ``DCGM_FI_*`` names and units, cAdvisor's / ``sits_container_*`` names for
cgroups), ``--vm-families`` of them: ``read`` (default) the families the PromQL reports read,
``all`` every generated column.

At the end, the wall time of each report (``sits_observe.reports.spec.run_report``, default
settings) over the last 24 h and the last 7 d of the simulated clock, and of the reports that
read a PromQL store (``run_promql_report``) against VictoriaMetrics, raw and with a step.
``--record`` writes the block into docs/benchmarks.md between the week-bench markers.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._docs import write_block  # noqa: E402
from sits_observe.domain.schema.container_fields import FAMILIES as CONTAINER_FAMILIES  # noqa: E402
from sits_observe.domain.schema.dcgm_fields import FIELDS  # noqa: E402
from sits_observe.domain.tables import TABLES  # noqa: E402
from sits_observe.errors import SitsError  # noqa: E402
from sits_observe.reports.registry import find_report  # noqa: E402
from sits_observe.reports.spec import PromQLReader, run_promql_report, run_report  # noqa: E402
from sits_observe.reports.window import WindowRequest  # noqa: E402
from sits_observe.store import Store  # noqa: E402
from sits_observe.store.promql.client import PromQLClient  # noqa: E402
from sits_observe.store.retention import enforce_retention  # noqa: E402
from tests.integration.promql_support import VictoriaMetrics  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- week-bench:begin -->", "<!-- week-bench:end -->"
SECTION = "## A week of history at 100 nodes: DuckDB with retention, and VictoriaMetrics"
GPUS = 8
INVENTORY_S = 30
LONG_SHARE, LONG_MEAN_S, BATCH_MEAN_S = 0.7, 24 * 3600.0, 1800.0
FB_TOTAL = 80 << 30
MIB = 1 << 20
EPOCH = datetime(1970, 1, 1)

#: Reports timed on DuckDB; then those with a PromQL builder, and their settings.
DUCK_REPORTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fleet", {}),
    ("smf", {}),
    ("baseline", {}),
    ("baseline", {"table": "container_samples", "metric": "memory_current_bytes"}),
    ("classes", {}),
    ("classes", {"view": "elastic"}),
    ("interference", {}),
    ("trends", {}),
    ("fragmentation", {}),
    ("recommend", {}),
)
PROMQL_REPORTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("trends", {}),
    ("interference", {}),
    ("smf", {}),
    ("baseline", {}),
    ("baseline", {"table": "container_samples", "metric": "memory_current_bytes"}),
    ("classes", {"view": "elastic"}),
)

#: The generated gpu_samples / container_samples value columns.
GPU_COLUMNS = (
    "fb_used_bytes",
    "fb_free_bytes",
    "fb_reserved_bytes",
    "fb_total_bytes",
    "gpu_util_ratio",
    "mem_copy_util_ratio",
    "sm_active_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "power_w",
    "gpu_temp_c",
)
#: Every value column the agent exports for a container (domain/schema/container_fields.py).
CONTAINER_COLUMNS = tuple(f.column for f in CONTAINER_FAMILIES)
#: What the PromQL reports above read (store/promql/source.py): framebuffer and activity for
#: SMF, trends, interference and the elastic rule; the default baseline's GPU metric; the
#: cgroup memory for SMF and the container baseline.
READ_GPU = GPU_COLUMNS[:13]
READ_CONTAINER = ("memory_current_bytes",)


#: What ``--vm-families`` feeds VictoriaMetrics, in words.
FAMILY_WORDS = {"all": "every generated column", "read": "those the PromQL reports read"}
NONE = np.array(None, dtype=object)


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


class Fleet:
    """Pods in slots (node x container), GPUs and their samples (see the module docstring)."""

    def __init__(self, nodes: int, containers: int, interval_s: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n, self.c, self.interval_s = nodes, containers, interval_s
        slots = nodes * containers
        self.slot_node = np.repeat(np.arange(nodes), containers)
        self.slot_gpu = np.tile(np.arange(containers), nodes)  # < GPUS: holds that GPU
        self.serial = np.zeros(slots, dtype=np.int64)
        self.born_s = np.zeros(slots, dtype=np.int64)
        self.ends_s = np.zeros(slots, dtype=np.int64)
        self.long = np.zeros(slots, dtype=bool)
        self.mem_base = np.zeros(slots)
        self.cpu_s = np.zeros(slots)
        self.uid = np.empty(slots, dtype=object)
        self.cid = np.empty(slots, dtype=object)
        self.pod = np.empty(slots, dtype=object)
        self.json = np.empty(slots, dtype=object)
        self.next_serial = 0
        self._replace(np.arange(slots), at_s=-3600)
        self.node_names = np.array([f"gpu-node-{i:04d}" for i in range(nodes)], dtype=object)
        self.namespaces = np.array([f"team-{i % 12}" for i in range(slots)], dtype=object)

    def _replace(self, slots: np.ndarray, at_s: int) -> None:
        k = len(slots)
        if not k:
            return
        serials = self.next_serial + np.arange(k)
        self.next_serial += k
        self.serial[slots] = serials
        self.long[slots] = self.rng.random(k) < LONG_SHARE
        mean = np.where(self.long[slots], LONG_MEAN_S, BATCH_MEAN_S)
        self.born_s[slots] = at_s
        self.ends_s[slots] = at_s + INVENTORY_S + self.rng.exponential(mean).astype(np.int64)
        self.mem_base[slots] = self.rng.uniform(2, 60, k) * (1 << 30)
        self.cpu_s[slots] = 0.0
        for s, serial in zip(slots, serials, strict=True):
            kind = "serve" if self.long[s] else "batch"
            self.uid[s] = _digest("uid", serial)[:32]
            self.cid[s] = _digest("cid", serial)
            self.pod[s] = f"{kind}-{serial:07d}"
            self.json[s] = f'[{{"name":"main","container_id":"containerd://{self.cid[s]}"}}]'

    def advance(self, at_s: int) -> None:
        """Replace the pods that ended by ``at_s`` (seconds since the start)."""
        self._replace(np.flatnonzero(self.ends_s <= at_s), at_s)

    def running(self, at_s: int) -> np.ndarray:
        return self.born_s + INVENTORY_S <= at_s

    def samples(self, at: datetime, at_s: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """One tick's gpu_samples and container_samples columns (numpy / lists)."""
        run = self.running(at_s)
        phase = 2 * np.pi * (at_s / 86400.0 + self.serial % 97 / 97)
        mem = self.mem_base * (1 + 0.15 * np.sin(phase)) + self.rng.normal(0, 1 << 28, len(run))
        mem = np.clip(mem, 1 << 28, FB_TOTAL - (2 << 30)).astype(np.int64)
        self.cpu_s += np.where(run, self.rng.uniform(0, 4, len(run)) * self.interval_s, 0)
        # GPU rows: the pod in slot (node, g) for g < 8 holds GPU g.
        gslots = np.flatnonzero(self.slot_gpu < GPUS)
        held = run[gslots]
        busy = np.where(held, 0.4 + 0.5 * np.abs(np.sin(phase[gslots])), 0.0)
        noise = self.rng.uniform(0, 0.1, len(gslots))
        used = np.where(held, mem[gslots], 0) + (600 * MIB)
        n = len(gslots)
        gpu: dict[str, Any] = {
            "ts": [at] * n,
            "node": self.node_names[self.slot_node[gslots]],
            "gpu_uuid": np.char.add(
                np.char.add("GPU-", self.slot_node[gslots].astype(str)),
                np.char.add("-", self.slot_gpu[gslots].astype(str)),
            ),
            "gpu_index": self.slot_gpu[gslots],
            "device": np.char.add("nvidia", self.slot_gpu[gslots].astype(str)),
            "model_name": ["NVIDIA H100 80GB HBM3"] * n,
            "namespace": np.where(held, self.namespaces[gslots], NONE),
            "pod": np.where(held, self.pod[gslots], NONE),
            "container": np.where(held, "main", NONE),
            "fb_used_bytes": used,
            "fb_free_bytes": FB_TOTAL - used - (500 * MIB),
            "fb_reserved_bytes": np.full(n, 500 * MIB),
            "fb_total_bytes": np.full(n, FB_TOTAL),
            "gpu_util_ratio": np.round(np.clip(busy + noise, 0, 1), 2),
            "mem_copy_util_ratio": np.round(busy * 0.4, 2),
            "sm_active_ratio": busy * 0.9,
            "tensor_active_ratio": busy * 0.5,
            "dram_active_ratio": busy * 0.6 + noise,
            "pcie_tx_bytes_per_s": busy * 2e9,
            "pcie_rx_bytes_per_s": busy * 3e9 + noise * 1e8,
            "nvlink_tx_bytes_per_s": busy * 5e10,
            "nvlink_rx_bytes_per_s": busy * 5e10,
            "power_w": 90 + 600 * busy,
            "gpu_temp_c": np.round(35 + 40 * busy),
            "source": ["dcgm"] * n,
        }
        cs = np.flatnonzero(run)
        m = mem[cs]
        cpu = self.cpu_s[cs]
        k = len(cs)
        psi = self.rng.uniform(0, 0.3, k)
        container: dict[str, Any] = {
            "ts": [at + timedelta(milliseconds=300)] * k,
            "node": self.node_names[self.slot_node[cs]],
            "pod_uid": self.uid[cs],
            "container_id": self.cid[cs],
            "runtime": ["containerd"] * k,
            "qos_class": ["Burstable"] * k,
            "namespace": self.namespaces[cs],
            "pod": self.pod[cs],
            "container": ["main"] * k,
            "memory_current_bytes": m // 8,
            "memory_max_bytes": np.full(k, 64 << 30),
            "memory_anon_bytes": m // 8 * 3 // 4,
            "memory_file_bytes": m // 40,
            "memory_kernel_bytes": m // 160,
            "oom_events_total": np.zeros(k, dtype=np.int64),
            "oom_kill_events_total": np.zeros(k, dtype=np.int64),
            "memory_pressure_some_avg10_ratio": psi,
            "memory_pressure_full_avg10_ratio": psi / 3,
            "memory_pressure_some_total_s": cpu / 100,
            "cpu_pressure_some_avg10_ratio": psi / 2,
            "cpu_pressure_some_total_s": cpu / 10,
            "cpu_usage_s": cpu,
            "cpu_throttled_s": cpu / 7,
            "cpu_periods_total": (cpu * 10).astype(np.int64),
            "cpu_throttled_periods_total": cpu.astype(np.int64),
            "cpu_limit_cores": np.full(k, 4.0),
        }
        return gpu, container

    def pods(self, at: datetime, at_s: int) -> dict[str, Any]:
        run = self.running(at_s)
        slots = len(run)
        start = np.datetime64(at - timedelta(seconds=at_s), "us")
        born = start + self.born_s.astype("timedelta64[s]")
        gpu_pod = self.slot_gpu < GPUS
        return {
            "ts": [at] * slots,
            "pod_uid": self.uid,
            "namespace": self.namespaces,
            "pod": self.pod,
            "node": self.node_names[self.slot_node],
            "phase": np.where(run, "Running", "Pending"),
            "qos_class": ["Burstable"] * slots,
            "owner_kind": np.where(self.long, "ReplicaSet", "Job"),
            "owner_name": np.where(self.long, "serve", "batch"),
            "workload": np.where(self.long, "serve", "batch"),
            "gpu_request": gpu_pod.astype(np.int32),
            "cpu_request_milli": np.where(gpu_pod, 8000, 2000),
            "memory_request_bytes": np.where(gpu_pod, 64 << 30, 8 << 30),
            "containers_json": self.json,
            "created_at": born,
            "scheduled_at": born,
            "ready_at": np.where(
                run, born + np.timedelta64(INVENTORY_S, "s"), np.datetime64("NaT")
            ),
            "gpu_milli": np.where(gpu_pod, 1000, 0).astype(np.int32),
        }

    def nodes(self, at: datetime, at_s: int) -> dict[str, Any]:
        ready = np.ones(self.n, dtype=bool)
        if at_s % 600 < 300:  # every 10 minutes one node is NotReady for 5 minutes
            ready[(at_s // 600) % self.n] = False
        return {
            "ts": [at] * self.n,
            "node": self.node_names,
            "gpu_allocatable": np.full(self.n, GPUS, dtype=np.int32),
            "gpu_product": ["NVIDIA-H100-80GB-HBM3"] * self.n,
            "gpu_memory_bytes": np.full(self.n, FB_TOTAL),
            "cpu_allocatable_milli": np.full(self.n, 192_000),
            "memory_allocatable_bytes": np.full(self.n, 2 << 40),
            "ready": ready,
            "labels_json": ['{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}'] * self.n,
        }


def _table(name: str, parts: list[dict[str, Any]]) -> pa.Table:
    """The columns of several ticks as one table in ``name``'s schema (NULL elsewhere)."""
    schema = TABLES[name].schema
    rows = sum(len(p["ts"]) for p in parts)
    arrays = []
    for field in schema:
        if field.name in parts[0]:
            chunks = [pa.array(p[field.name], from_pandas=True) for p in parts]
            arrays.append(pa.concat_arrays([c.cast(field.type) for c in chunks]))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _label_text(frame: pl.DataFrame, labels: list[tuple[str, str]]) -> pl.Expr:
    parts: list[pl.Expr] = []
    for i, (label, column) in enumerate(labels):
        value = (
            pl.col(column).cast(pl.Utf8).fill_null("") if column in frame.columns else pl.lit("")
        )
        parts += [pl.lit(("," if i else "") + f'{label}="'), value, pl.lit('"')]
    return pl.concat_str(parts)


GPU_LABELS = [
    ("gpu", "gpu_index"),
    ("UUID", "gpu_uuid"),
    ("device", "device"),
    ("modelName", "model_name"),
    ("Hostname", "node"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
]
CONTAINER_LABELS = [
    ("node", "node"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
    ("pod_uid", "pod_uid"),
    ("container_id", "container_id"),
    ("runtime", "runtime"),
    ("qos_class", "qos_class"),
]


def exposition(gpu: pa.Table, containers: pa.Table, which: str) -> tuple[bytes, int]:
    """The tables as timestamped exposition text under the agent's family names and units
    (as :mod:`sits_observe.collectors.agent.latest` serves them); the sample count."""
    lines: list[pl.Series] = []
    gpu_cols = set(GPU_COLUMNS if which == "all" else READ_GPU)
    ctr_cols = set(CONTAINER_COLUMNS if which == "all" else READ_CONTAINER)
    for table, labels, families in (
        (gpu, GPU_LABELS, [(f.column, f.families[0], f.scale) for f in FIELDS]),
        (containers, CONTAINER_LABELS, [(f.column, f.name, 1.0) for f in CONTAINER_FAMILIES]),
    ):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        frame = frame.with_columns(
            _label_text(frame, labels).alias("_labels"),
            (pl.col("ts").dt.epoch("ms")).cast(pl.Utf8).alias("_ms"),
        )
        wanted = gpu_cols if table is gpu else ctr_cols
        for column, family, scale in families:
            if column not in wanted:
                continue
            value = (pl.col(column).cast(pl.Float64) / scale).cast(pl.Utf8)
            text = frame.filter(pl.col(column).is_not_null()).select(
                pl.concat_str(
                    [
                        pl.lit(family + "{"),
                        pl.col("_labels"),
                        pl.lit("} "),
                        value,
                        pl.lit(" "),
                        pl.col("_ms"),
                    ]
                )
            )
            lines.append(text.to_series())
    joined = pl.concat(lines)
    return ("\n".join(joined.to_list()) + "\n").encode(), len(joined)


@dataclass
class Written:
    days: list[dict[str, Any]]
    rows: dict[str, int]
    duck_write_s: float
    retention_s: float
    vm_write_s: float
    vm_samples: int
    generate_s: float
    end: datetime


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def simulate(
    args: argparse.Namespace, store: Store, vm: VictoriaMetrics | None, vm_dir: Path, db: Path
) -> Written:
    now = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0)
    start = now - timedelta(days=args.days)
    start -= timedelta(seconds=(start - EPOCH).total_seconds() % 3600)
    fleet = Fleet(args.nodes, args.containers, args.interval_s, seed=14)
    total_s = int(args.days * 86400)
    rows = {"gpu_samples": 0, "container_samples": 0, "pods": 0, "nodes": 0}
    days: list[dict[str, Any]] = []
    gen_s = duck_s = ret_s = vm_s = 0.0
    vm_samples = 0
    t = 0
    while t < total_s:
        began = time.perf_counter()
        ticks: list[tuple[dict[str, Any], dict[str, Any]]] = []
        inventory_pods: list[dict[str, Any]] = []
        inventory_nodes: list[dict[str, Any]] = []
        for s in range(t, min(t + args.batch_s, total_s), INVENTORY_S):
            at = start + timedelta(seconds=s)
            fleet.advance(s)
            inventory_pods.append(fleet.pods(at, s))
            inventory_nodes.append(fleet.nodes(at, s))
            if s % args.interval_s == 0:
                ticks.append(fleet.samples(at, s))
        batch = {
            "gpu_samples": _table("gpu_samples", [g for g, _ in ticks]),
            "container_samples": _table("container_samples", [c for _, c in ticks]),
            "pods": _table("pods", inventory_pods),
            "nodes": _table("nodes", inventory_nodes),
        }
        body, samples = (b"", 0)
        if vm is not None:
            body, samples = exposition(
                batch["gpu_samples"], batch["container_samples"], args.vm_families
            )
        gen_s += time.perf_counter() - began
        began = time.perf_counter()
        store.append_batch(batch, batch_id=f"week-{t}", node="bench")
        duck_s += time.perf_counter() - began
        for name, table in batch.items():
            rows[name] += table.num_rows
        if vm is not None:
            began = time.perf_counter()
            response = vm.client.post(f"{vm.base}/api/v1/import/prometheus", content=body)
            if response.status_code != 204:
                raise SystemExit(f"VictoriaMetrics refused an import: {response.text[:300]}")
            vm_s += time.perf_counter() - began
            vm_samples += samples
        t += args.batch_s
        if t % 3600 == 0:
            began = time.perf_counter()
            enforce_retention(store, now=start + timedelta(seconds=t))
            ret_s += time.perf_counter() - began
        if t % 86400 == 0 or t >= total_s:
            store.execute("CHECKPOINT")
            day: dict[str, Any] = {
                "day": t / 86400,
                "db_bytes": db.stat().st_size,
                "raw_gpu": store.count("gpu_samples"),
                "raw_containers": store.count("container_samples"),
                "rollup": store.scalar("SELECT count(*) FROM gpu_samples_1m")
                + store.scalar("SELECT count(*) FROM container_samples_1m"),
                "pod_versions": store.scalar("SELECT count(*) FROM pod_versions"),
                "elapsed_s": gen_s + duck_s + ret_s + vm_s,
            }
            if vm is not None:
                vm.client.get(f"{vm.base}/internal/force_flush").raise_for_status()
                day["vm_bytes"] = dir_bytes(vm_dir)
            days.append(day)
            print(f"day {day['day']:g}: {day}", file=sys.stderr, flush=True)
    return Written(
        days, rows, duck_s, ret_s, vm_s, vm_samples, gen_s, start + timedelta(seconds=total_s)
    )


def timed(build: Callable[[], Any]) -> tuple[float, str]:
    gc.collect()
    began = time.perf_counter()
    try:
        report = build()
    except SitsError as exc:
        return time.perf_counter() - began, f"{type(exc).__name__}: {str(exc)[:80]}"
    elapsed = time.perf_counter() - began
    rows = len(report.main.rows) if getattr(report, "main", None) is not None else 0
    return elapsed, f"{rows} rows"


def label(name: str, settings: dict[str, Any]) -> str:
    extra = " ".join(f"--{k} {v}" for k, v in settings.items())
    return f"`{name} {extra}`".replace(" `", "`") if extra else f"`{name}`"


def time_reports(
    db: Path, vm_base: str | None, end: datetime, args: argparse.Namespace
) -> list[dict[str, Any]]:
    windows = [("24 h", 86400.0), ("7 d", 7 * 86400.0)]
    out: list[dict[str, Any]] = []
    store = Store.open(db, read_only=True)
    try:
        for name, settings in DUCK_REPORTS:
            if name in args.skip_reports or args.promql_only:
                continue
            spec = find_report(name)
            query = spec.validate(settings)
            row: dict[str, Any] = {"report": label(name, settings), "store": "DuckDB"}
            for w, since_s in windows:
                request = WindowRequest(since_s=since_s, until=end)
                row[w] = timed(partial(run_report, spec, store, request, query))
            print(row, file=sys.stderr, flush=True)
            out.append(row)
    finally:
        store.close()
    if vm_base is None:
        return out
    client = PromQLClient(vm_base, timeout_s=180.0)
    try:
        step: list[float | None] = [float(args.promql_step_s)]
        raw: list[float | None] = [None]
        steps = {"raw": raw, "step": step, "both": raw + step}[args.promql_reads]
        for step_s in steps:
            reader = PromQLReader(client, step_s=step_s)
            for name, settings in PROMQL_REPORTS:
                if name in args.skip_reports:
                    continue
                spec = find_report(name)
                query = spec.validate(settings)
                where = "VM raw" if step_s is None else f"VM step {step_s:g} s"
                row = {"report": label(name, settings), "store": where}
                for w, since_s in windows:
                    request = WindowRequest(since_s=since_s, until=end)
                    row[w] = timed(partial(run_promql_report, spec, reader, request, query))
                print(row, file=sys.stderr, flush=True)
                out.append(row)
    finally:
        client.close()
    return out


def render(args: argparse.Namespace, w: Written, reports: list[dict[str, Any]]) -> str:
    ticks = int(args.days * 86400 / args.interval_s)
    per_tick = args.nodes * GPUS + args.nodes * args.containers
    load = os.getloadavg()
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; {platform.machine()}, {os.cpu_count()} cores "
        f"(shared), Python {platform.python_version()}, DuckDB {duckdb.__version__}; load "
        f"average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end.",
        f"Simulated: {args.days:g} days, {args.nodes} nodes x {GPUS} GPUs, {args.containers} "
        f"containers per node, a sample every {args.interval_s} s (the agent's default is 1 s "
        f"with about 200 containers per node: "
        f"{(GPUS + 200) * args.interval_s / (GPUS + args.containers):,.0f}x these rows), "
        f"an inventory snapshot every {INVENTORY_S} s "
        f"({args.nodes * args.containers:,} pods, 30 % with a 30 min mean lifetime); one "
        f"`append_batch` per {args.batch_s} s simulated, `enforce_retention` every simulated "
        f"hour (defaults: 6 h raw, 30 d minute roll-ups, 7 d inventory).",
        f"Written: {w.rows['gpu_samples']:,} GPU rows + {w.rows['container_samples']:,} "
        f"container rows ({ticks:,} ticks of up to {per_tick:,} rows), "
        f"{w.rows['pods']:,} pod rows and {w.rows['nodes']:,} node rows offered to the "
        f"inventory. DuckDB: {w.duck_write_s:.0f} s of `append_batch` "
        f"({(w.rows['gpu_samples'] + w.rows['container_samples']) / w.duck_write_s:,.0f} "
        f"sample rows/s with the inventory), {w.retention_s:.0f} s of retention in all; "
        f"generating the data {w.generate_s:.0f} s (not counted).",
    ]
    if w.vm_samples:
        lines.append(
            f"VictoriaMetrics: {w.vm_samples:,} samples ({args.vm_families} families: "
            f"{FAMILY_WORDS[args.vm_families]}) imported in {w.vm_write_s:.0f} s "
            f"({w.vm_samples / w.vm_write_s:,.0f} samples/s)."
        )
    lines += [
        "",
        "| day | DuckDB file MB | raw GPU rows | raw container rows | minute roll-up rows "
        "| pod versions | VictoriaMetrics MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in w.days:
        vm_mb = f"{d['vm_bytes'] / 1e6:,.0f}" if "vm_bytes" in d else "-"
        lines.append(
            f"| {d['day']:g} | {d['db_bytes'] / 1e6:,.0f} | {d['raw_gpu']:,} | "
            f"{d['raw_containers']:,} | {d['rollup']:,} | {d['pod_versions']:,} | {vm_mb} |"
        )
    lines += [
        "",
        "Wall seconds of each report at the end of the week (default settings, "
        "`--until` the simulated end; one run each, the process warm):",
        "",
        "| report | reads | last 24 h | last 7 d |",
        "|---|---|---:|---:|",
    ]
    for r in reports:
        cells = [f"{r[w][0]:.2f} ({r[w][1]})" for w in ("24 h", "7 d")]
        lines.append(f"| {r['report']} | {r['store']} | {cells[0]} | {cells[1]} |")
    command = (
        f"`.venv/bin/python bench/bench_week.py --days {args.days:g} --nodes {args.nodes} "
        f"--containers {args.containers} --interval-s {args.interval_s} --record`"
    )
    lines += ["", f"Command: {command}."]
    return "\n".join(lines)


def reuse(args: argparse.Namespace) -> None:
    """Time the reports on a kept run's files (the simulated end: newest tick + interval)."""
    db = args.reuse / "sits.duckdb"
    store = Store.open(db, read_only=True)
    try:
        newest = store.scalar("SELECT max(ts) FROM gpu_samples")
    finally:
        store.close()
    end = newest + timedelta(seconds=args.interval_s)
    for r in time_reports(db, args.vm_url, end, args):
        cells = [f"{r[w][0]:.2f} ({r[w][1]})" for w in ("24 h", "7 d")]
        print(f"| {r['report']} | {r['store']} | {cells[0]} | {cells[1]} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0, help="simulated days")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--containers", type=int, default=20, help="containers per node")
    parser.add_argument("--interval-s", type=int, default=60, help="agent sample interval, s")
    parser.add_argument(
        "--batch-s",
        type=int,
        default=600,
        help="simulated seconds per append_batch (a multiple of 30 dividing 3600)",
    )
    parser.add_argument("--vm-families", choices=("read", "all", "none"), default="read")
    parser.add_argument("--promql-step-s", type=int, default=300)
    parser.add_argument("--promql-reads", choices=("raw", "step", "both"), default="both")
    parser.add_argument("--promql-only", action="store_true", help="with --reuse: no DuckDB")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here")
    parser.add_argument("--record", action="store_true")
    parser.add_argument(
        "--skip-reports", type=lambda t: set(t.split(",")), default=set(), help="names, a,b"
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="only time the reports on DIR/sits.duckdb (a --workdir run) and --vm-url",
    )
    parser.add_argument("--vm-url", default=None, help="with --reuse: a VictoriaMetrics fed alike")
    args = parser.parse_args()
    if args.reuse is not None:
        reuse(args)
        return
    if 3600 % args.batch_s or args.batch_s % INVENTORY_S or args.batch_s % args.interval_s:
        parser.error("--batch-s must divide 3600 and be a multiple of 30 and of --interval-s")
    tmp = tempfile.mkdtemp(prefix="bench_week.", dir=args.workdir)
    workdir = Path(tmp)
    vm: VictoriaMetrics | None = None
    try:
        if args.vm_families != "none":
            vm = VictoriaMetrics(workdir / "vm")
        db = workdir / "sits.duckdb"
        store = Store.open(db)
        try:
            written = simulate(args, store, vm, workdir / "vm", db)
        finally:
            store.close()
        if vm is not None:
            vm.client.get(f"{vm.base}/internal/force_flush").raise_for_status()
        reports = time_reports(db, None if vm is None else vm.base, written.end, args)
    finally:
        if vm is not None:
            vm.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    text = render(args, written, reports)
    print(text)
    if args.record:
        write_block(DOCS, BEGIN, END, text, SECTION)


if __name__ == "__main__":
    main()
