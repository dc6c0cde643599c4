"""Follows a JSON-lines request log as it grows (``tail -F`` for the agent).

Inference gateways and servers write one JSON object per finished request; the agent reads
what was appended since its last tick and ships it as exact ``requests`` rows, using the same
column mapping and rejection rules as a one-shot import (:mod:`.request_log`).

Invariants: only complete lines are read (a half-written last line waits for the next tick);
a file that shrank or was replaced (rotation: a new inode) is read again from its start and
counted under ``log rotated``; a missing file is not an error (the server may not have started
yet) and yields nothing; at most ``max_bytes_per_collect`` are read per tick so one huge
burst cannot stall the agent (the rest follows on later ticks).
"""

from __future__ import annotations

import io
import os
from collections import Counter
from datetime import datetime
from pathlib import Path

import polars as pl

from sits_observe.collectors.inference.request_log import (
    ColumnMap,
    LatencyUnit,
    requests_from_frame,
)
from sits_observe.domain.collect import CollectResult
from sits_observe.errors import CollectorError


class RequestLogTail:
    """A collector of the lines appended to one JSON-lines request log."""

    name = "requests"

    def __init__(
        self,
        path: Path,
        columns: ColumnMap,
        *,
        latency_unit: LatencyUnit = "s",
        max_bytes_per_collect: int = 16 * 1024 * 1024,
    ) -> None:
        self.path = path
        self.columns = columns
        self.latency_unit = latency_unit
        self.max_bytes_per_collect = max_bytes_per_collect
        self._offset = 0
        self._inode: int | None = None

    def collect(self, now: datetime) -> CollectResult:
        """Rows for the complete lines appended since the previous call."""
        dropped: Counter[str] = Counter()
        try:
            with self.path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                if self._inode is not None and (
                    stat.st_ino != self._inode or stat.st_size < self._offset
                ):
                    dropped["log rotated"] += 1
                    self._offset = 0
                self._inode = stat.st_ino
                handle.seek(self._offset)
                chunk = handle.read(self.max_bytes_per_collect)
        except FileNotFoundError:
            return CollectResult()
        except OSError as exc:
            raise CollectorError(f"cannot read request log {self.path}: {exc}") from exc
        end = chunk.rfind(b"\n")
        if end < 0:
            return CollectResult(dropped=dropped)
        complete = chunk[: end + 1]
        self._offset += len(complete)
        lines = [line for line in complete.splitlines() if line.strip()]
        if not lines:
            return CollectResult(dropped=dropped)
        try:
            frame = pl.read_ndjson(io.BytesIO(b"\n".join(lines)), infer_schema_length=None)
        except pl.exceptions.PolarsError:
            # Slow path, only when the chunk holds a malformed line: keep the good lines.
            good = [line for line in lines if _parses(line)]
            dropped["malformed JSON line"] += len(lines) - len(good)
            if not good:
                return CollectResult(dropped=dropped)
            frame = pl.read_ndjson(io.BytesIO(b"\n".join(good)), infer_schema_length=None)
        result = requests_from_frame(
            frame.lazy(),
            self.columns,
            label=f"request log {self.path}",
            source=self.path.name,
            latency_unit=self.latency_unit,
            now=now,
        )
        return CollectResult(result.tables, result.dropped + dropped)


def _parses(line: bytes) -> bool:
    try:
        pl.read_ndjson(io.BytesIO(line))
    except pl.exceptions.PolarsError:
        return False
    return True
