"""Sync-delay collector: a gauge and a histogram series in the Prometheus text format, read
from text and over real HTTP on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sits_observe.collectors.sync_delay import SyncDelayCollector
from sits_observe.domain.schema.topology_tables import SYNC_DELAYS
from sits_observe.errors import CollectorError

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

GAUGE = """# HELP train_allreduce_wait_ms Wait of the last all-reduce.
# TYPE train_allreduce_wait_ms gauge
train_allreduce_wait_ms{pod="trainer-0",rank="0"} 92.5
train_allreduce_wait_ms{pod="trainer-1",rank="1"} 12
train_allreduce_wait_ms{pod="trainer-2",rank="2"} NaN
other_metric 5
"""


def histogram(total_s: float, count: int) -> str:
    return (
        "# TYPE nccl_sync_seconds histogram\n"
        f'nccl_sync_seconds_bucket{{pod="t-0",le="0.08"}} {count}\n'
        f'nccl_sync_seconds_bucket{{pod="t-0",le="+Inf"}} {count}\n'
        f'nccl_sync_seconds_sum{{pod="t-0"}} {total_s}\n'
        f'nccl_sync_seconds_count{{pod="t-0"}} {count}\n'
    )


def test_gauge_samples_are_delays_in_seconds() -> None:
    collector = SyncDelayCollector(
        "http://unused", "train_allreduce_wait_ms", node="n1", scale_s=0.001
    )
    result = collector.collect_text(GAUGE, NOW)
    table = result.tables["sync_delays"]
    assert table.schema.equals(SYNC_DELAYS.schema)
    rows = table.to_pylist()
    assert [(r["pod"], r["delay_s"]) for r in rows] == [("trainer-0", 0.0925), ("trainer-1", 0.012)]
    assert {r["metric"] for r in rows} == {"train_allreduce_wait_ms"}
    assert {r["node"] for r in rows} == {"n1"}
    assert result.dropped == {"sync_delay:not_finite_or_negative": 1}
    collector.close()


def test_histogram_mean_between_reads_and_reset() -> None:
    collector = SyncDelayCollector("http://unused", "nccl_sync_seconds", node="n1")
    first = collector.collect_text(histogram(1.0, 10), NOW)
    assert first.tables["sync_delays"].num_rows == 0  # primes the series
    second = collector.collect_text(histogram(1.9, 12), NOW + timedelta(seconds=5))
    (row,) = second.tables["sync_delays"].to_pylist()
    assert row["delay_s"] == pytest.approx(0.45)  # (1.9 - 1.0) / (12 - 10)
    assert row["pod"] == "t-0"
    idle = collector.collect_text(histogram(1.9, 12), NOW + timedelta(seconds=10))
    assert idle.tables["sync_delays"].num_rows == 0  # no sync since: no delay
    reset = collector.collect_text(histogram(0.1, 1), NOW + timedelta(seconds=15))
    assert reset.tables["sync_delays"].num_rows == 0
    assert reset.dropped == {"sync_delay:reset": 1}
    again = collector.collect_text(histogram(0.3, 2), NOW + timedelta(seconds=20))
    assert again.tables["sync_delays"].column("delay_s").to_pylist() == [pytest.approx(0.2)]
    collector.close()


def test_bad_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_s"):
        SyncDelayCollector("http://unused", "m", node="n1", scale_s=0)


@pytest.fixture
def server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = GAUGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass  # keep the test output quiet; requests are asserted on instead

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_scrape_over_loopback(server: str) -> None:
    with_scale = SyncDelayCollector(
        f"{server}/metrics", "train_allreduce_wait_ms", node="n1", scale_s=0.001
    )
    try:
        result = with_scale.collect(NOW)
    finally:
        with_scale.close()
    assert result.tables["sync_delays"].column("delay_s").to_pylist() == [0.0925, 0.012]
    missing = SyncDelayCollector(f"{server}/nope", "m", node="n1")
    with pytest.raises(CollectorError, match="HTTP 404"):
        missing.collect(NOW)
    missing.close()
