"""The largest batch the service accepts at its defaults: decode time, peak RSS, shutdown time.

docs/api.md bounds what one ingest batch may cost once decoded (``--max-batch-rows``,
``--max-table-rows``, ``--max-decoded-bytes``, read from the Arrow headers before decoding)
and promises that SIGTERM ends the service within 10 s whatever is running. This measures
both at the default limits, with the batch an agent would build, only longer:

- ``largest``: the most ticks of one node (8 GPU + 200 container rows a tick, from the
  project's collectors as in ``bench_service_ingest``), ZSTD-compressed as the agent can send
  them, that fit every limit and ``--max-body-bytes``;
- ``in-process``: ``decode_batch`` with the limits and the range rules (``screen_batch``) on
  it, against the header scan alone (what a refusal costs) and the same decode without limits
  (the peer: what the service did before the limits);
- ``service``: a real ``sits-observe serve`` on loopback takes it (time to the 200, the
  process's peak RSS over its idle RSS), then SIGTERM is sent while a copy (new batch id) is
  in flight, at several delays: the exit time, the answer, and whether the DuckDB file holds
  the batch exactly when the answer was 200 (a committed batch is never answered with an
  error);
- ``hostile``: a few hundred bytes declaring 10,000,000 rows of null-type columns: the
  service's answer and RSS, against decoding it without limits in a child process (its peak
  RSS, what one such request used to cost).

Run: ``.venv/bin/python bench/bench_service_limits.py`` (about a minute). Medians of
``--runs``; docs/benchmarks.md, "Largest allowed batch", records the figures.
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from bench_service_ingest import node_template, ticks  # noqa: E402

from sits_observe.collectors.agent.wire import (  # noqa: E402
    CONTENT_TYPE,
    DecodeLimits,
    _frames,
    decode_batch,
    encode_batch,
)
from sits_observe.collectors.agent.wire_size import stream_size  # noqa: E402
from sits_observe.errors import InputTooLarge  # noqa: E402
from sits_observe.surfaces.service.ingest_rows import screen_batch  # noqa: E402
from sits_observe.surfaces.service.settings import ServiceSettings  # noqa: E402

TOKEN = "bench-limits-token"
NODE = "bench-node-0001"


def fits(body: bytes, limits: DecodeLimits, max_body: int) -> bool:
    if len(body) > max_body:
        return False
    try:
        decode_batch(body, limits)
    except InputTooLarge:
        return False
    return True


def largest(build: Callable[[int], bytes], settings: ServiceSettings) -> tuple[int, bytes]:
    """The most ticks ``n`` whose body ``build(n)`` passes every default limit, and that body."""
    limits = settings.decode_limits()
    low, high = 1, 4096
    while low < high:  # the largest n that fits
        mid = (low + high + 1) // 2
        if fits(build(mid), limits, settings.max_body_bytes):
            low = mid
        else:
            high = mid - 1
    return low, build(low)


def builders(template: dict[str, pa.Table]) -> dict[str, Callable[[int], bytes]]:
    """``agent``: n ticks restamped one second apart, one record batch a tick (what a
    lagging agent's spool sends); ``repeated``: one tick's rows n times in one record batch,
    compressing far better, so the row and decoded-byte limits bind before the body's."""
    first = datetime.now(UTC).replace(tzinfo=None)
    one = ticks(template, NODE, first, 1)

    def agent(n: int) -> bytes:
        return encode_batch(ticks(template, NODE, first, n), compression="zstd")

    def repeated(n: int) -> bytes:
        tables = {k: pa.concat_tables([v] * n).combine_chunks() for k, v in one.items()}
        return encode_batch(tables, compression="zstd")

    return {"agent": agent, "repeated": repeated}


def median_s(run: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_process(body: bytes, limits: DecodeLimits, runs: int) -> dict[str, float]:
    now = datetime.now(UTC)

    def scan() -> None:
        for stream in _frames(body).values():
            stream_size(pa.py_buffer(stream))

    def bounded() -> None:
        screen_batch(decode_batch(body, limits), now=now, max_future_skew_s=300)

    def unbounded() -> None:
        screen_batch(decode_batch(body), now=now, max_future_skew_s=300)

    return {
        "scan_ms": median_s(scan, runs) * 1e3,
        "decode_screen_ms": median_s(bounded, runs) * 1e3,
        "unbounded_ms": median_s(unbounded, runs) * 1e3,
    }


class Service:
    """``sits-observe serve`` on a free port, with a sampler of its RSS."""

    def __init__(self, work: Path) -> None:
        self.db = work / "limits.duckdb"
        token = work / "token"
        token.write_text(TOKEN, encoding="utf-8")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (work / "serve.log").open("ab")
        cli = Path(sys.executable).with_name("sits-observe")
        self.proc = subprocess.Popen(
            [
                *(str(cli), "serve", "--db", str(self.db), "--port", str(self.port)),
                *("--token-file", str(token), "--retention-interval-s", "0", "--no-exporter"),
                *("--log-level", "warning"),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("serve did not become ready in 60 s")
        self.ps = psutil.Process(self.proc.pid)
        self.peak = 0
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self._sampling:
            try:
                self.peak = max(self.peak, self.ps.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.01)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def post(self, body: bytes, batch_id: str, timeout: float = 120) -> httpx.Response:
        return httpx.post(
            self.url + "/api/v1/ingest",
            content=body,
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": CONTENT_TYPE,
                "X-Sits-Batch-Id": batch_id,
                "X-Sits-Node": NODE,
            },
            timeout=timeout,
        )

    def terminate(self) -> float:
        """SIGTERM; seconds until the process exited."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self._sampling = False
        return time.monotonic() - start


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stored(db: Path, batch_id: str) -> int:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(
            "SELECT count(*) FROM ingest_batches WHERE batch_id = ?", [batch_id]
        ).fetchone()
    return int(row[0]) if row else 0


def service_runs(body: bytes, delays: list[float], work: Path) -> list[dict[str, object]]:
    """One service per delay: a first copy acknowledged (time, RSS), then SIGTERM ``delay``
    seconds into a second copy's request."""
    results = []
    for delay in delays:
        run_dir = Path(tempfile.mkdtemp(dir=work))
        service = Service(run_dir)
        idle = service.rss()
        start = time.perf_counter()
        answer = service.post(body, uuid.uuid4().hex)
        ack_s = time.perf_counter() - start
        assert answer.status_code == 200, answer.text
        peak = service.peak
        second = uuid.uuid4().hex
        outcome: list[httpx.Response | str] = []

        def send(
            target: Service = service,
            batch_id: str = second,
            sink: list[httpx.Response | str] = outcome,
        ) -> None:
            try:
                sink.append(target.post(body, batch_id, timeout=60))
            except httpx.HTTPError as exc:
                sink.append(type(exc).__name__)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(delay)
        exit_s = service.terminate()
        sender.join(60)
        got = outcome[0] if outcome else "no answer"
        status = (
            got if isinstance(got, str) else f"{got.status_code} {got.json().get('reason', 'ok')}"
        )
        in_db = stored(service.db, second)
        truthful = (status.startswith("200") and in_db == 1) or (
            not status.startswith("200") and in_db == 0
        )
        results.append(
            {
                "delay_s": delay,
                "ack_s": ack_s,
                "rss_idle_mib": idle / 2**20,
                "rss_peak_over_idle_mib": (peak - idle) / 2**20,
                "exit_s": exit_s,
                "answer": status,
                "stored": in_db,
                "truthful": truthful,
            }
        )
    return results


UNBOUNDED_CHILD = """
import sys, resource
from sits_observe.collectors.agent.wire import decode_batch
from sits_observe.store.intake import conform_batch
body = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
conform_batch(decode_batch(body))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def hostile(work: Path) -> dict[str, object]:
    rows = 10_000_000
    body = encode_batch({"requests": pa.table({"ts": pa.nulls(rows), "model": pa.nulls(rows)})})
    path = work / "hostile.body"
    path.write_bytes(body)
    start = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", UNBOUNDED_CHILD, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    unbounded_s = time.perf_counter() - start
    service = Service(Path(tempfile.mkdtemp(dir=work)))
    idle = service.rss()
    start = time.perf_counter()
    answer = service.post(body, uuid.uuid4().hex)
    answer_ms = (time.perf_counter() - start) * 1e3
    grown = (service.peak - idle) / 2**20
    service.terminate()
    return {
        "body_bytes": len(body),
        "rows_declared": rows,
        "answer": f"{answer.status_code} {answer.json()['reason']}",
        "answer_ms": answer_ms,
        "service_rss_growth_mib": grown,
        "unbounded_decode_rss_mib": float(child.stdout.strip() or "nan"),
        "unbounded_decode_s": unbounded_s,
    }


def report(
    shape: str,
    n: int,
    body: bytes,
    limits: DecodeLimits,
    runs: int,
    delays: list[float],
    work: Path,
) -> None:
    tables = decode_batch(body, limits)
    rows = {name: t.num_rows for name, t in tables.items()}
    sizes = {name: stream_size(pa.py_buffer(s)) for name, s in _frames(body).items()}
    estimate = sum(s.decoded_bytes for s in sizes.values()) / 2**20
    arrow = sum(t.nbytes for t in tables.values()) / 2**20
    print(
        f"\n[{shape}] largest allowed batch at the defaults: {n} ticks of one node, "
        f"{sum(rows.values()):,} rows ({', '.join(f'{k} {v:,}' for k, v in rows.items())}), "
        f"body {len(body) / 2**20:.2f} MiB zstd, decoded estimate {estimate:.1f} MiB of "
        f"{limits.max_decoded_bytes / 2**20:.0f}, Arrow {arrow:.1f} MiB"
    )
    timing = in_process(body, limits, runs)
    print(
        f"in-process (median of {runs}): header scan {timing['scan_ms']:.2f} ms, decode + "
        f"range rules with limits {timing['decode_screen_ms']:.1f} ms, without limits "
        f"{timing['unbounded_ms']:.1f} ms (ratio "
        f"{timing['decode_screen_ms'] / timing['unbounded_ms']:.3f}); the scan is "
        f"{timing['scan_ms'] / timing['decode_screen_ms']:.1%} of the decode"
    )
    print("service: the batch acknowledged, then SIGTERM into a second copy")
    print("delay_s  ack_s  rss_idle_MiB  rss_peak_over_idle_MiB  exit_s  answer  stored  truthful")
    results = service_runs(body, delays, work)
    for r in results:
        print(
            f"{r['delay_s']:>7}  {r['ack_s']:5.2f}  {r['rss_idle_mib']:12.0f}  "
            f"{r['rss_peak_over_idle_mib']:22.0f}  {r['exit_s']:6.2f}  {r['answer']}  "
            f"{r['stored']}  {r['truthful']}"
        )
    exits = [float(str(r["exit_s"])) for r in results]
    print(
        f"exit after SIGTERM: median {statistics.median(exits):.2f} s, max {max(exits):.2f} s "
        "(bound 10 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="repeats of each in-process timing")
    parser.add_argument(
        "--delays",
        default="0.05,0.3,0.8",
        help="seconds into the second copy's request at which SIGTERM is sent",
    )
    args = parser.parse_args()
    settings = ServiceSettings()
    limits = settings.decode_limits()
    template = node_template()
    delays = [float(d) for d in args.delays.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        work = Path(tmp)
        for shape, build in builders(template).items():
            n, body = largest(build, settings)
            report(shape, n, body, limits, args.runs, delays, work)
        bad = hostile(work)
        print(
            f"hostile: {bad['body_bytes']} bytes declaring {bad['rows_declared']:,} rows -> "
            f"{bad['answer']} in {bad['answer_ms']:.0f} ms, service RSS "
            f"+{bad['service_rss_growth_mib']:.0f} MiB; "
            f"decoded without limits: +{bad['unbounded_decode_rss_mib']:.0f} MiB peak RSS, "
            f"{bad['unbounded_decode_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
