"""Ingest at fleet scale: agents' batches into one service, group commit on and off, and
VictoriaMetrics taking the same samples (docs/benchmarks.md and docs/scaling.md quote it).

One node's batch is what the agent builds at its defaults, made by the project's own parts:
8 GPU rows from ``parse_dcgm`` over dcgm-exporter's default counters (``bench/_dcgm_fleet``)
and 200 container rows from ``CgroupCollector`` over a kubelet cgroup tree
(``bench_agent_cost.write_cgroup_tree``). Each simulated agent restamps those rows with its
node name and the tick's time, and ``encode_batch`` makes the wire body (``--ship-every n``
puts n ticks in one body, as the agent's setting does), sent with a fresh batch id; a 5xx,
429 or lost connection is retried with the same id after the agent's back-off
(``shipper.retry_delay_s``: 0.25 s doubling, at most 5 s, with jitter, never sooner than the
answer's Retry-After), and the acknowledgement time counts from the first try; a
connection idle for more than 5 s is closed before the next request (httpx's keep-alive
expiry, which the agent's shipper has), so it is not reused and found dead. The service
keeps its default limits: 64 requests in progress (``--max-requests``; more wait up to
``--queue-timeout-s`` for a slot, at most 256 of them, then get 503 busy) and
1,024 open connections (``--max-connections``; one more is answered 503 and closed at once).

Arms, one after the other on the same machine (never at once):

- ``group`` / ``single``: a real service (``run_service``, the composition root of
  ``sits-observe serve``, with the exporter off and retention off, started as a child
  process with ``group_commit.enabled`` true or false), a fresh DuckDB file each run. After
  the run the service is stopped and the file is opened: rows and ledger entries are
  compared with what was acknowledged (``lost`` = acknowledged rows not stored, ``extra`` =
  rows stored more than once or without an acknowledgement).
- ``vm``: a single-node VictoriaMetrics (Debian package) taking the same rows as Prometheus
  text with timestamps on ``/api/v1/import/prometheus`` (one sample per non-null numeric
  column). VictoriaMetrics acknowledges before its data is on disk, the service only after
  the commit: the ratio compares unequal promises.

``--interval-s 0`` (default) is closed loop: each agent sends its next batch as soon as the
last one is acknowledged (capacity). ``--interval-s 1`` paces each agent at one tick a
second (the target load: ``--agents 1000 --interval-s 1 --seconds 600``; an agent that falls
behind sends at once and is counted late). ``rows_s`` counts the rows acknowledged before
the run's end (batches still in flight then are waited for and checked, their wait is
``drain_s``); ``cpu_us_row`` is the service's CPU from the start of the load to its stop over
every row acknowledged (so ``cpu_us_row`` is also CPU seconds per million rows; for ``vm``, of
VictoriaMetrics' process over the same rows). Figures are medians over ``--runs``, the runs
alternating between the arms; the load averages are printed at the start and after each run
(other work on the machine moves every figure).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

TOKEN = "bench-ingest-token"
#: httpx's default ``keepalive_expiry`` (the agent's shipper is an ``httpx.Client``): a
#: connection idle longer is closed before the next request, not reused and found dead.
KEEPALIVE_EXPIRY_S = 5.0


# -- one node's batch -------------------------------------------------------------------


def node_template() -> dict[str, pa.Table]:
    """8 GPU rows and 200 container rows, from the project's collectors."""
    from _dcgm_fleet import generate
    from bench_agent_cost import write_cgroup_tree

    from sits_observe.collectors.cgroup.collector import CgroupCollector
    from sits_observe.collectors.dcgm import parse_dcgm

    now = datetime.now(UTC)
    gpus = parse_dcgm(generate(1, 8).text, now=now, node="template").tables
    root = Path(tempfile.mkdtemp(prefix="bench-ingest-cgroup-"))
    write_cgroup_tree(root)
    containers = CgroupCollector(root, node="template", slow_every=1).collect(now).tables
    return {**gpus, **containers}


def restamp(table: pa.Table, node: str, ts: datetime) -> pa.Table:
    n = table.num_rows
    i = table.schema.get_field_index("node")
    table = table.set_column(i, "node", pa.array([node] * n, pa.string()))
    j = table.schema.get_field_index("ts")
    return table.set_column(j, "ts", pa.array([ts] * n, table.schema.field("ts").type))


def ticks(template: dict[str, pa.Table], node: str, first: datetime, n: int) -> dict[str, pa.Table]:
    """``n`` ticks of one node, one second apart, each table concatenated across them into
    one record batch, as the agent's ``_Held.take`` ships them."""
    return {
        name: pa.concat_tables(
            [restamp(t, node, first + timedelta(seconds=k)) for k in range(n)]
        ).combine_chunks()
        for name, t in template.items()
    }


#: Label columns of each table in the Prometheus text (the series identity).
SERIES_LABELS = {"gpu_samples": ("node", "gpu_uuid"), "container_samples": ("node", "container_id")}


def prometheus_lines(template: dict[str, pa.Table], node: str) -> list[str]:
    """One node's samples as exposition lines without a timestamp (appended per send)."""
    lines: list[str] = []
    for name, table in template.items():
        labels = SERIES_LABELS[name]
        rows = restamp(table, node, datetime(2026, 1, 1)).to_pylist()
        for column, kind in zip(table.column_names, table.schema.types, strict=True):
            if column in labels or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                continue
            for row in rows:
                value = row[column]
                if value is None:
                    continue
                tags = ",".join(f'{k}="{row[k]}"' for k in labels)
                lines.append(f"sits_{name}_{column}{{{tags}}} {value}")
    return lines


# -- load -------------------------------------------------------------------------------


@dataclass
class Tally:
    latencies_s: list[float] = field(default_factory=list)
    batches: int = 0
    rows: int = 0
    rows_in_window: int = 0  # acknowledged before the run's end (rows_s counts these)
    drain_s: float = 0.0  # seconds past the end until the last acknowledgement
    samples: int = 0
    duplicates: int = 0
    retries: int = 0
    rejected: int = 0
    late: int = 0
    cpu_s: float = 0.0


@dataclass(frozen=True)
class Job:
    target: str  # service | vm
    url: str
    agents: list[int]
    seconds: float
    interval_s: float
    ship_every: int
    start_at: float  # time.time() all workers begin


def worker(job: Job) -> Tally:
    """One load process: a thread per agent, each with its own keep-alive connection
    (``http.client``: a fraction of httpx's CPU per request, so the generator does not
    starve the server it measures on a 2-core machine)."""
    template = node_template()
    tally = Tally()
    lock = threading.Lock()
    time.sleep(max(0.0, job.start_at - time.time()))
    started_cpu = time.process_time()
    end = time.monotonic() + job.seconds
    threads = [
        threading.Thread(target=_agent, args=(job, a, template, tally, lock, end), daemon=True)
        for a in job.agents
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tally.cpu_s = time.process_time() - started_cpu
    return tally


def _agent(
    job: Job,
    a: int,
    template: dict[str, pa.Table],
    tally: Tally,
    lock: threading.Lock,
    end: float,
) -> None:
    from sits_observe.collectors.agent.settings import AgentSettings
    from sits_observe.collectors.agent.shipper import retry_after_s, retry_delay_s
    from sits_observe.collectors.agent.wire import (
        CONTENT_TYPE,
        HEADER_BATCH_ID,
        HEADER_NODE,
        encode_batch,
    )

    defaults = AgentSettings.model_fields  # the agent's back-off at its defaults
    backoff_s, backoff_max_s = defaults["backoff_s"].default, defaults["backoff_max_s"].default

    host, port = job.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    node = f"bench-node-{a:04d}"
    lines = prometheus_lines(template, node) if job.target == "vm" else []
    rows_per = sum(t.num_rows for t in template.values()) * job.ship_every
    period_s = job.interval_s * job.ship_every
    next_at = time.monotonic() + (period_s * (a % 97) / 97 if period_s else 0.0)  # spread
    first = datetime(2026, 11, 1) + timedelta(hours=a % 24)
    k = 0
    last_used = time.monotonic()
    while time.monotonic() < end:
        if period_s:
            wait_s = next_at - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)
            elif wait_s < -period_s:
                with lock:
                    tally.late += 1
            next_at += period_s
            if time.monotonic() >= end:
                break
        ts = first + timedelta(seconds=k * job.ship_every)
        k += 1
        if job.target == "vm":
            ms = round((ts - datetime(1970, 1, 1)).total_seconds() * 1000)
            stamp = f" {ms}\n"
            body = (stamp.join(lines) + stamp).encode()
            headers = {"Content-Type": "text/plain"}
            path = "/api/v1/import/prometheus"
        else:
            body = encode_batch(ticks(template, node, ts, job.ship_every))
            headers = {
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": CONTENT_TYPE,
                HEADER_BATCH_ID: uuid.uuid4().hex,
                HEADER_NODE: node,
            }
            path = "/api/v1/ingest"
        started = time.perf_counter()
        retries = 0
        while True:
            if time.monotonic() - last_used > KEEPALIVE_EXPIRY_S:
                conn.close()  # the next request connects afresh, as httpx's pool does
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                retries += 1
                time.sleep(retry_delay_s(retries, backoff_s, backoff_max_s))
                continue
            last_used = time.monotonic()
            status = response.status
            if status in (200, 204):
                break
            if status in (408, 429) or status >= 500:  # 503 busy: the service's limit
                retries += 1
                after = retry_after_s(response.getheader("Retry-After"))
                wait_s = retry_delay_s(retries, backoff_s, backoff_max_s, after)
                time.sleep(wait_s)
                continue
            print(f"rejected {status}: {answer[:200]!r}", file=sys.stderr)
            with lock:
                tally.rejected += 1
            conn.close()
            return
        latency_s = time.perf_counter() - started
        duplicate = job.target == "service" and bool(json.loads(answer).get("duplicate"))
        with lock:
            tally.latencies_s.append(latency_s)
            tally.batches += 1
            tally.rows += rows_per
            if time.monotonic() <= end:
                tally.rows_in_window += rows_per
            else:
                tally.drain_s = max(tally.drain_s, time.monotonic() - end)
            tally.samples += len(lines) * job.ship_every
            tally.retries += retries
            tally.duplicates += duplicate
    conn.close()


def drive(target: str, url: str, args: argparse.Namespace, agents: int) -> Tally:
    """Spread ``agents`` over ``--procs`` processes; the summed tally."""
    procs = max(1, min(args.procs, agents))
    start_at = time.time() + 8.0  # every worker built its template by then
    jobs = [
        Job(
            target,
            url,
            list(range(p, agents, procs)),
            args.seconds,
            args.interval_s,
            args.ship_every,
            start_at,
        )
        for p in range(procs)
    ]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        parts = list(pool.map(worker, jobs))
    total = Tally()
    for part in parts:
        total.latencies_s += part.latencies_s
        names = ("batches", "rows", "rows_in_window", "samples", "duplicates", "retries")
        for name in (*names, "rejected", "late", "cpu_s"):
            setattr(total, name, getattr(total, name) + getattr(part, name))
        total.drain_s = max(total.drain_s, part.drain_s)
    return total


# -- the servers ------------------------------------------------------------------------


def serve_child(spec: str) -> None:
    """Run the service as ``sits-observe serve`` does, from a JSON settings spec."""
    from sits_observe.surfaces.cli.serve import run_service
    from sits_observe.surfaces.service.exporter.settings import ExporterSettings
    from sits_observe.surfaces.service.settings import ServiceSettings

    settings = ServiceSettings.model_validate(json.loads(spec))
    run_service(settings, log_level="warning", exporter=ExporterSettings(enabled=False))


class Service:
    def __init__(
        self, work: Path, group: bool, limits: dict[str, float], memory_limit: str | None
    ) -> None:
        from tests.integration.serve_process import free_port

        self.db = work / f"ingest-{'group' if group else 'single'}-{uuid.uuid4().hex[:6]}.duckdb"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        spec = {
            "port": self.port,
            "db_path": str(self.db),
            "token": TOKEN,
            "retention_interval_s": 0,
            "group_commit": {"enabled": group},
            "http": limits,
            "db_memory_limit": memory_limit,
        }
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-child", json.dumps(spec)], cwd=ROOT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("service not ready in 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def counts(self) -> tuple[int, int]:
        """Rows stored (gpu + container) and ledger entries."""
        import duckdb

        with duckdb.connect(str(self.db), read_only=True) as con:
            rows = con.execute(
                "SELECT (SELECT count(*) FROM gpu_samples) "
                "+ (SELECT count(*) FROM container_samples)"
            ).fetchone()
            ledger = con.execute("SELECT count(*) FROM ingest_batches").fetchone()
        assert rows is not None and ledger is not None
        return int(rows[0]), int(ledger[0])


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = self.last = 0
        self.halt = threading.Event()

        self.cpu_s = 0.0

    def run(self) -> None:
        first = self.proc.cpu_times()
        while not self.halt.wait(0.5):
            try:
                self.last = self.proc.memory_info().rss
                now = self.proc.cpu_times()
            except psutil.Error:
                return
            self.peak = max(self.peak, self.last)
            self.cpu_s = now.user + now.system - first.user - first.system


# -- arms -------------------------------------------------------------------------------


def run_arm(arm: str, agents: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    if arm == "vm":
        from tests.integration.promql_support import VictoriaMetrics

        vm = VictoriaMetrics(work / f"vm-{uuid.uuid4().hex[:6]}")
        sampler = RssSampler(vm.proc.pid)
        sampler.start()
        try:
            tally = drive("vm", vm.base, args, agents)
        finally:
            sampler.halt.set()
            vm.stop()
        lost = extra = 0
        bytes_row = float("nan")
    else:
        limits = {
            "max_concurrent_requests": args.max_requests,
            "max_connections": args.max_connections,
            "queue_timeout_s": args.queue_timeout_s,
        }
        service = Service(work, arm == "group", limits, args.db_memory_limit)
        sampler = RssSampler(service.proc.pid)
        sampler.start()
        try:
            tally = drive("service", service.url, args, agents)
        finally:
            sampler.halt.set()
            service.stop()
        stored, ledger = service.counts()
        bytes_row = service.db.stat().st_size / max(1, stored)
        acked_new = tally.batches - tally.duplicates
        lost = max(0, tally.rows - stored) + max(0, acked_new - ledger)
        extra = max(0, stored - tally.rows)
        service.db.unlink(missing_ok=True)
        Path(str(service.db) + ".wal").unlink(missing_ok=True)
    lat = sorted(tally.latencies_s) or [float("nan")]
    return {
        "batches_s": tally.batches / args.seconds,
        "rows_s": tally.rows_in_window / args.seconds,
        "drain_s": tally.drain_s,
        "samples_s": tally.samples / args.seconds,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "rss_mib": sampler.peak / 2**20,
        "cpu_ms_batch": 1000 * sampler.cpu_s / max(1, tally.batches),
        "cpu_us_row": 1e6 * sampler.cpu_s / max(1, tally.rows),
        "bytes_row": bytes_row,
        "load_cpu_ratio": tally.cpu_s / args.seconds,
        "retries": tally.retries,
        "late": tally.late,
        "rejected": tally.rejected,
        "lost": lost,
        "extra": extra,
    }


COLUMNS = (
    "batches_s",
    "rows_s",
    "drain_s",
    "p50_ms",
    "p99_ms",
    "rss_mib",
    "cpu_ms_batch",
    "cpu_us_row",
    "bytes_row",
    "load_cpu_ratio",
    "retries",
    "late",
    "lost",
    "extra",
)


def main() -> None:
    from sits_observe.surfaces.service.http.limits import HttpLimits

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve-child", help=argparse.SUPPRESS)
    parser.add_argument("--agents", default="16,64", help="comma-separated agent counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per arm")
    parser.add_argument("--interval-s", type=float, default=0.0, help="0 = closed loop")
    parser.add_argument("--ship-every", type=int, default=1, help="ticks per batch")
    parser.add_argument("--arms", default="group,single,vm")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--procs", type=int, default=1, help="load-generator processes")
    parser.add_argument(
        "--max-requests",
        type=int,
        default=HttpLimits().max_concurrent_requests,
        help="the service's max_concurrent_requests (its default, 64); more wait for a slot, "
        "then get 503 busy and are retried with the agent's back-off",
    )
    parser.add_argument(
        "--queue-timeout-s",
        type=float,
        default=HttpLimits().queue_timeout_s,
        help="the service's queue_timeout_s (its default, 2): how long a request over "
        "--max-requests waits for a slot",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=HttpLimits().max_connections,
        help="the service's max_connections (its default, 1,024); an agent past it is answered "
        "503 at connect and retries with the back-off",
    )
    parser.add_argument(
        "--db-memory-limit",
        help="the service's db_memory_limit (DuckDB's memory limit; default DuckDB's, 80%% of "
        "the memory): what bounds the service's RSS as the file grows",
    )
    args = parser.parse_args()
    if args.serve_child:
        serve_child(args.serve_child)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    print(
        f"# {os.cpu_count()} CPUs; {args.seconds:g} s per arm; interval {args.interval_s:g} s; "
        f"ship every {args.ship_every}; service max_concurrent_requests {args.max_requests}, "
        f"queue_timeout_s {args.queue_timeout_s:g}, max_connections {args.max_connections}, "
        f"db_memory_limit {args.db_memory_limit or 'default'}; "
        f"{args.runs} run(s), medians; load average {_load()}"
    )
    print("| arm | agents | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    arms = args.arms.split(",")
    for agents in [int(a) for a in args.agents.split(",")]:
        # Runs alternate between the arms (a, b, a, b, ...): the machine's drift between
        # sets (+-15 % here) falls on every arm alike.
        runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
        for n in range(args.runs):
            for arm in arms:
                runs[arm].append(run_arm(arm, agents, args, work))
                print(
                    f"# run {n + 1}/{args.runs}, {arm}: {runs[arm][-1]['rows_s']:,.0f} rows/s; "
                    f"load average {_load()}",
                    flush=True,
                )
        results: dict[str, dict[str, float]] = {}
        for arm in arms:
            results[arm] = {c: statistics.median(r[c] for r in runs[arm]) for c in runs[arm][0]}
            row = results[arm]
            cells = " | ".join(
                f"{row[c]:,.2f}"
                if c == "load_cpu_ratio"
                else f"{row[c]:,.1f}"
                if c in ("p50_ms", "cpu_ms_batch", "cpu_us_row", "drain_s")
                else f"{row[c]:,.0f}"
                for c in COLUMNS
            )
            print(f"| {arm} | {agents} | {cells} |", flush=True)
        if "vm" in results and "group" in results and results["group"]["rows_s"]:
            ratio = results["vm"]["rows_s"] / results["group"]["rows_s"]
            print(
                f"# {agents} agents: VictoriaMetrics takes {ratio:.2f}x group commit's rows/s "
                f"({results['vm']['samples_s']:,.0f} samples/s); CPU s per million rows: "
                f"service {results['group']['cpu_us_row']:.2f}, "
                f"VictoriaMetrics {results['vm']['cpu_us_row']:.2f}"
            )


def _load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
