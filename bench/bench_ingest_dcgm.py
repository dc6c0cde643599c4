"""Ingest benchmark: dcgm-exporter text into sits_observe's DuckDB store vs VictoriaMetrics.

Input: one body holding 1,000 nodes x 8 GPUs x dcgm-exporter's default counters (25
families in ``../shared/data/dcgm/default-counters.csv``: 200,000 samples, about 49 MB),
labels shaped like the real L4 capture (see ``_dcgm_fleet.py``). Generated once, not timed.

What is timed (each a median of ``--runs`` runs, each run in a fresh temporary directory):

- sits_observe: ``bytes.decode`` + :func:`parse_dcgm` + ``Store.append_batch`` of the
  ``gpu_samples`` and ``collector_drops`` tables into a DuckDB file, up to the commit (the
  rows are then durable in the WAL and visible to every query). The store is opened (schema
  migrated) before the clock starts. Afterwards the row count is checked, untimed.
- VictoriaMetrics (``/usr/bin/victoria-metrics``, single node, started fresh per run with
  ``-storageDataPath`` in a temp dir on ``127.0.0.1:<free port>``; start-up and ``/health``
  wait not timed): ``POST /api/v1/import/prometheus`` of the same bytes over loopback, then
  ``GET /internal/force_flush`` (synchronous: pending rows become searchable parts). Then,
  untimed, a ``count(...)`` query must see every series; the time until that first full
  answer is printed too ("visible"), but it includes one query's own cost.
  "cold" = the first import (all 200,000 series are new: the index is built); "warm" = a
  second import of the same text into the same instance (series known, new samples), which
  is the steady state of a scraper. sits_observe has no such difference: its rows are the
  same cost every time.

Run: ``.venv/bin/python bench/bench_ingest_dcgm.py [--runs 3] [--nodes 1000] [--record]``.
``--record`` rewrites the ingest section of ``docs/benchmarks.md`` with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _dcgm_fleet import Fleet, generate

from sits_observe.collectors.dcgm import FIELDS, DcgmParser, parse_dcgm
from sits_observe.domain.tables import COLLECTOR_DROPS, GPU_SAMPLES
from sits_observe.store import Store

ROOT = Path(__file__).resolve().parents[1]
SHARED_DCGM = ROOT.parent / "shared" / "data" / "dcgm"
VM_BINARY = Path("/usr/bin/victoria-metrics")
DOCS = ROOT / "docs" / "benchmarks.md"
PLACEHOLDER = "<!-- ingest-bench: filled by bench/bench_ingest_dcgm.py -->"
BEGIN = "<!-- ingest-bench:begin -->"
END = "<!-- ingest-bench:end -->"


@dataclass(frozen=True)
class Run:
    """One timed run: wall-clock seconds and CPU seconds spent by the side being timed."""

    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Timing:
    """One side's runs."""

    runs: list[Run]

    @property
    def median_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(r.cpu_s for r in self.runs)

    def rate(self, samples: int) -> float:
        return samples / self.median_s

    def cpu_rate(self, samples: int) -> float:
        return samples / self.median_cpu_s


def drops_table(dropped: Counter[str], at: datetime) -> pa.Table:
    reasons = sorted(dropped)
    return pa.Table.from_pydict(
        {
            "ts": [at] * len(reasons),
            "node": [None] * len(reasons),
            "collector": ["dcgm"] * len(reasons),
            "reason": reasons,
            "count": [dropped[r] for r in reasons],
        },
        schema=COLLECTOR_DROPS.schema,
    )


def sits_once(body: bytes, db_path: Path, expected_rows: int, parser: DcgmParser) -> Run:
    """Decode + parse + store once: the time from bytes to committed rows."""
    with Store.open(db_path) as store:
        now = datetime.now(UTC)
        cpu_started = time.process_time()  # every thread of this process (DuckDB's too)
        started = time.perf_counter()
        result = parser.parse(body.decode("utf-8"), now=now, node=None)
        tables = {
            GPU_SAMPLES.name: result.tables[GPU_SAMPLES.name],
            COLLECTOR_DROPS.name: drops_table(result.dropped, now.replace(tzinfo=None)),
        }
        store.append_batch(tables)
        run = Run(time.perf_counter() - started, time.process_time() - cpu_started)
        rows = store.count(GPU_SAMPLES.name)
    if rows != expected_rows:
        raise SystemExit(f"sits_observe stored {rows} gpu_samples rows, expected {expected_rows}")
    return run


class SitsSide:
    """sits_observe's runs. cold: a fresh parser per run (every label set is new); warm: a
    parser that has already read this fleet once (the label sets of the last scrape are
    known, as in an agent's steady state)."""

    def __init__(self, fleet: Fleet) -> None:
        self.body = fleet.text.encode("utf-8")
        self.expected = fleet.nodes * fleet.gpus_per_node
        first = SHARED_DCGM / "l4-kops-aws-default-counters.prom"
        if first.is_file():  # one-time import costs of numpy / pyarrow are not the parser's
            parse_dcgm(first.read_text(encoding="utf-8"), now=datetime.now(UTC), node=None)
        self.warm_parser = DcgmParser()
        self.warm_parser.parse(fleet.text, now=datetime.now(UTC), node=None)
        self.cold: list[Run] = []
        self.warm: list[Run] = []

    def run(self) -> None:
        with tempfile.TemporaryDirectory(prefix="sits-bench-") as tmp:
            self.cold.append(
                sits_once(self.body, Path(tmp) / "c.duckdb", self.expected, DcgmParser())
            )
            self.warm.append(
                sits_once(self.body, Path(tmp) / "w.duckdb", self.expected, self.warm_parser)
            )

    def timings(self) -> dict[str, Timing]:
        return {"cold": Timing(self.cold), "warm": Timing(self.warm)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class VictoriaMetrics:
    """A throw-away single-node VictoriaMetrics on loopback."""

    def __init__(self, data_dir: Path) -> None:
        self.base = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [
                str(VM_BINARY),
                f"-storageDataPath={data_dir}",
                f"-httpListenAddr={self.base.removeprefix('http://')}",
                "-search.latencyOffset=0s",  # samples stamped "now" are queryable at once
                "-search.disableCache",
                "-loggerLevel=ERROR",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = httpx.Client(timeout=120.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.client.get(f"{self.base}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise SystemExit("VictoriaMetrics did not answer /health within 30 s")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def import_and_flush(self, body: bytes) -> Run:
        cpu_started = self.cpu_s()
        started = time.perf_counter()
        response = self.client.post(f"{self.base}/api/v1/import/prometheus", content=body)
        if response.status_code != 204:
            raise SystemExit(f"import answered HTTP {response.status_code}: {response.text}")
        self.client.get(f"{self.base}/internal/force_flush").raise_for_status()
        return Run(time.perf_counter() - started, self.cpu_s() - cpu_started)

    def wait_visible(self, query: str, expected: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answer = self.client.get(
                f"{self.base}/api/v1/query", params={"query": query, "nocache": "1"}
            ).json()
            result = answer["data"]["result"]
            if result and int(float(result[0]["value"][1])) >= expected:
                return
            time.sleep(0.01)
        raise SystemExit(f"VictoriaMetrics never showed {expected} for {query}")

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class VmSide:
    """VictoriaMetrics' runs: a fresh instance per run; cold import, then a warm one."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.body = fleet.text.encode("utf-8")
        self.cold: list[Run] = []
        self.cold_visible: list[Run] = []
        self.warm: list[Run] = []

    def run(self) -> None:
        n = self.fleet.samples
        tmp = Path(tempfile.mkdtemp(prefix="vm-bench-"))
        vm = VictoriaMetrics(tmp / "data")
        try:
            started = time.perf_counter()
            self.cold.append(vm.import_and_flush(self.body))
            vm.wait_visible('count({__name__=~"DCGM_.+"})', n)
            self.cold_visible.append(Run(time.perf_counter() - started, float("nan")))
            time.sleep(1.0)  # a later scrape: new timestamps for the same series
            self.warm.append(vm.import_and_flush(self.body))
            vm.wait_visible('sum(count_over_time({__name__=~"DCGM_.+"}[1h]))', 2 * n)
        finally:
            vm.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    def timings(self) -> dict[str, Timing]:
        return {
            "cold": Timing(self.cold),
            "cold_visible": Timing(self.cold_visible),
            "warm": Timing(self.warm),
        }


def machine() -> str:
    cores = os.cpu_count()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cores} cores, {mem_gib:.0f} GiB, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}"
    )


def vm_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "victoria-metrics"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except OSError:
        out = ""
    return out or "unknown version"


def _row(what: str, timing: Timing, n: int) -> str:
    cpu = timing.median_cpu_s
    cpu_cells = (
        "n/a | n/a" if cpu != cpu else f"{cpu:.3f} | {timing.cpu_rate(n):,.0f}"
    )  # NaN: not measured
    return f"| {what} | {timing.median_s:.3f} | {timing.rate(n):,.0f} | {cpu_cells} |"


def _runs(label: str, timing: Timing) -> str:
    return f"{label} " + ", ".join(f"{r.wall_s:.3f}" for r in timing.runs)


def report(
    fleet: Fleet, runs: int, sits: dict[str, Timing], vm: dict[str, Timing] | None, skipped: str
) -> str:
    n = fleet.samples
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {machine()}; median of {runs} runs "
        "(sits and VictoriaMetrics runs interleaved).",
        f"Input: {fleet.nodes:,} nodes x {fleet.gpus_per_node} GPUs x {len(fleet.families)} "
        f"default dcgm-exporter families = {n:,} samples ({len(fleet.text) / 1e6:.1f} MB).",
        "",
        "| what is timed | wall s | samples/s (wall) | CPU s | samples per CPU s |",
        "|---|---:|---:|---:|---:|",
        _row(
            "sits_observe, cold (new label sets): decode + parse + DuckDB commit", sits["cold"], n
        ),
        _row("sits_observe, warm (label sets known): same", sits["warm"], n),
    ]
    if vm is not None:
        lines += [
            _row(
                f"VictoriaMetrics {vm_version()}, cold (new series): import + flush", vm["cold"], n
            ),
            _row(
                "VictoriaMetrics, cold, until a count query sees every series",
                vm["cold_visible"],
                n,
            ),
            _row("VictoriaMetrics, warm (series known): import + flush", vm["warm"], n),
            "",
            "Ratio sits_observe / VictoriaMetrics, samples/s (wall): "
            f"cold vs cold {sits['cold'].rate(n) / vm['cold'].rate(n):.2f}x, "
            f"warm vs warm {sits['warm'].rate(n) / vm['warm'].rate(n):.2f}x, "
            f"sits cold vs VM warm {sits['cold'].rate(n) / vm['warm'].rate(n):.2f}x. "
            "Per CPU second: "
            f"cold vs cold {sits['cold'].cpu_rate(n) / vm['cold'].cpu_rate(n):.2f}x, "
            f"warm vs warm {sits['warm'].cpu_rate(n) / vm['warm'].cpu_rate(n):.2f}x.",
        ]
    else:
        lines += ["", f"VictoriaMetrics skipped: {skipped}."]
    parts = [_runs("sits cold", sits["cold"]), _runs("sits warm", sits["warm"])]
    mapped = {family for spec in FIELDS for family in spec.families}
    stored = sum(1 for family in fleet.families if family in mapped)
    gpus = fleet.nodes * fleet.gpus_per_node
    if vm is not None:
        parts += [_runs("VM cold", vm["cold"]), _runs("VM warm", vm["warm"])]
    lines += [
        "",
        "What is timed. sits_observe: `bytes.decode` + `DcgmParser.parse` + `Store.append_batch`"
        " (gpu_samples and collector_drops) into a DuckDB file, up to the commit; the store is"
        " opened before the clock starts; cold = a fresh parser, warm = a parser that read the"
        " same fleet before (label sets known, as in an agent). It stores"
        f" {stored} of the {len(fleet.families)} families ({stored * gpus:,} values in {gpus:,}"
        f" rows) and counts the other {len(fleet.families) - stored} as not stored."
        " VictoriaMetrics: `POST /api/v1/import/prometheus` of the same bytes over loopback + `GET"
        " /internal/force_flush` (synchronous), a fresh instance per run (start-up not timed);"
        " cold = new series, warm = the same text again a second later (series known). It keeps"
        " every family. A count query then checks that every sample is visible (not timed,"
        " except in the 'until a count query' row). CPU s: the sits process (all threads) or"
        " the VictoriaMetrics process, over the timed window.",
        "",
        "Wall seconds of every run (the machine is shared, so runs are noisy): "
        + "; ".join(parts)
        + ".",
        "",
        f"Command: `.venv/bin/python bench/bench_ingest_dcgm.py --runs {runs} --record`.",
    ]
    return "\n".join(lines)


def record(text: str) -> None:
    """Replace the placeholder (or the previous block) in docs/benchmarks.md with ``text``."""
    doc = DOCS.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        doc = head + block + tail
    elif PLACEHOLDER in doc:
        doc = doc.replace(PLACEHOLDER, block)
    else:
        raise SystemExit(f"no ingest-bench placeholder or block in {DOCS}")
    DOCS.write_text(doc, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-vm", action="store_true", help="skip VictoriaMetrics")
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)

    csv_path = SHARED_DCGM / "default-counters.csv"
    fleet = generate(args.nodes, args.gpus, csv_path=csv_path if csv_path.is_file() else None)
    print(f"input: {fleet.samples:,} samples, {len(fleet.text) / 1e6:.1f} MB", flush=True)
    skipped = ""
    if args.no_vm:
        skipped = "--no-vm"
    elif not VM_BINARY.is_file():
        skipped = f"{VM_BINARY} not found (apt-get install victoria-metrics)"
    if skipped:
        print(f"VictoriaMetrics skipped: {skipped}")
    sits_side = SitsSide(fleet)
    vm_side = None if skipped else VmSide(fleet)
    # Interleaved, so that load from other processes on a shared machine falls on both sides.
    for i in range(args.runs):
        sits_side.run()
        if vm_side is not None:
            vm_side.run()
        print(f"run {i + 1}/{args.runs} done", flush=True)
    sits = sits_side.timings()
    vm = vm_side.timings() if vm_side is not None else None
    text = report(fleet, args.runs, sits, vm, skipped)
    print()
    print(text)
    if args.record:
        record(text)
        print(f"\nrecorded in {DOCS}")


if __name__ == "__main__":
    main()
