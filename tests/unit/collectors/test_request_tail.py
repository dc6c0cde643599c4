"""The JSON-lines request-log tailer: appends, partial lines, rotation, bad lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sits_observe.collectors.inference.request_log import ColumnMap
from sits_observe.collectors.inference.request_tail import RequestLogTail

NOW = datetime(2026, 11, 30, tzinfo=UTC)
COLUMNS = ColumnMap(model="model", latency="latency_s", timestamp="ts", pod="pod", node="node")


def line(i: int, **extra: object) -> str:
    record = {
        "ts": f"2026-11-30T00:00:{i:02d}Z",
        "model": "m",
        "latency_s": 0.1 * i,
        "pod": "p-1",
        "node": "n-1",
        **extra,
    }
    return json.dumps(record) + "\n"


def test_reads_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    tail = RequestLogTail(log, COLUMNS)
    assert tail.collect(NOW).rows == 0  # no file yet: nothing, no error
    log.write_text(line(1) + line(2) + line(3)[:20])  # last line half-written
    first = tail.collect(NOW).tables["requests"]
    assert first.column("latency_s").to_pylist() == [0.1, 0.2]
    assert first.column("pod").to_pylist() == ["p-1", "p-1"]
    assert first.column("node").to_pylist() == ["n-1", "n-1"]
    with log.open("a") as f:
        f.write(line(3)[20:] + line(4))
    second = tail.collect(NOW).tables["requests"]
    assert [round(v, 6) for v in second.column("latency_s").to_pylist()] == [0.3, 0.4]
    assert tail.collect(NOW).rows == 0


def test_rotation_restarts_from_the_top_and_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text(line(1) + line(2))
    tail = RequestLogTail(log, COLUMNS)
    assert tail.collect(NOW).rows == 2
    log.unlink()
    log.write_text(line(5))
    result = tail.collect(NOW)
    assert result.rows == 1
    assert result.dropped["log rotated"] == 1


def test_malformed_and_invalid_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text(line(1) + "{not json\n" + line(2, latency_s=-1) + line(3))
    result = RequestLogTail(log, COLUMNS).collect(NOW)
    assert result.tables["requests"].column("latency_s").to_pylist() == [0.1, 0.30000000000000004]
    assert result.dropped["malformed JSON line"] == 1
    assert result.dropped["negative latency"] == 1


def test_reads_are_bounded_per_tick(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(line(i % 60) for i in range(100)))
    tail = RequestLogTail(log, COLUMNS, max_bytes_per_collect=1000)
    counts = [tail.collect(NOW).rows for _ in range(30)]
    assert all(c < 100 for c in counts)
    assert sum(counts) == 100
