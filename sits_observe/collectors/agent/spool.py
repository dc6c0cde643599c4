"""A bounded on-disk queue of batches the service has not acknowledged yet.

When the service cannot be reached the agent writes each batch here, one file per batch, in
the wire format of :mod:`.wire`, and replays them oldest first once the service answers.

Invariants:
- A file is either complete or absent: it is written to a ``.tmp`` name, flushed with
  ``fsync``, renamed into place and the directory is synced, so a crash (``kill -9``, power
  loss) leaves whole batches only. Leftover ``.tmp`` files are deleted on open.
- File names are ``<seq:016d>_<rows>_<batch_id>.batch``; ``seq`` grows by one per batch
  and is recovered from the directory on open, so the order survives restarts; ``rows``
  lets counters report samples without decoding the file.
- The spool never holds more than ``max_bytes`` bytes or ``max_files`` files. Making room
  drops the *oldest* batches (the newest data is the most useful after an outage); every
  drop is logged and counted in :attr:`Spool.dropped_batches` / :attr:`Spool.dropped_bytes`.
- Not thread-safe for writers (the agent loop is the one writer); counters may be read from
  any thread.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from sits_observe.collectors.agent.wire import BATCH_ID_PATTERN

log = logging.getLogger(__name__)

SUFFIX = ".batch"
TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class SpooledBatch:
    """One batch file in the spool."""

    seq: int
    batch_id: str
    rows: int
    path: Path
    size_bytes: int

    def read(self) -> bytes:
        """The batch body, in the wire format."""
        return self.path.read_bytes()


class Spool:
    """A directory of batch files, bounded by bytes and by file count."""

    def __init__(
        self, directory: Path, *, max_bytes: int, max_files: int, fsync: bool = True
    ) -> None:
        if max_bytes <= 0 or max_files <= 0:
            raise ValueError(f"spool bounds must be positive, got {max_bytes=} {max_files=}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._fsync = fsync
        self._entries: deque[SpooledBatch] = deque()
        self._bytes = 0
        self._next_seq = 0
        self.dropped_batches = 0
        self.dropped_bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- state ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        """Bytes of batch files held."""
        return self._bytes

    def entries(self) -> list[SpooledBatch]:
        """Every held batch, oldest first."""
        return list(self._entries)

    def peek(self) -> SpooledBatch | None:
        """The oldest held batch, or None when empty."""
        return self._entries[0] if self._entries else None

    # -- changes ----------------------------------------------------------------------

    def put(self, batch_id: str, body: bytes, *, rows: int = 0) -> list[SpooledBatch]:
        """Store one batch (``rows`` samples) durably; returns the batches dropped to make
        room, oldest first.

        A body larger than the whole spool cannot be kept: it is dropped, counted and
        returned as the only dropped entry.
        """
        if not BATCH_ID_PATTERN.match(batch_id):
            raise ValueError(f"batch id {batch_id!r} does not match {BATCH_ID_PATTERN.pattern}")
        seq = self._next_seq
        self._next_seq += 1
        final = self.directory / f"{seq:016d}_{rows:d}_{batch_id}{SUFFIX}"
        entry = SpooledBatch(seq, batch_id, rows, final, len(body))
        if len(body) > self.max_bytes:
            self._count_drop(entry, f"it alone exceeds the spool bound of {self.max_bytes} bytes")
            return [entry]
        dropped: list[SpooledBatch] = []
        while self._entries and (
            len(self._entries) + 1 > self.max_files or self._bytes + len(body) > self.max_bytes
        ):
            oldest = self._entries[0]
            self.remove(oldest)
            self._count_drop(oldest, "the spool is full (oldest batch dropped for the newest)")
            dropped.append(oldest)
        self._write_atomically(final, body)
        self._entries.append(entry)
        self._bytes += entry.size_bytes
        return dropped

    def remove(self, entry: SpooledBatch) -> None:
        """Forget ``entry`` (acknowledged, rejected or evicted) and delete its file."""
        try:
            self._entries.remove(entry)
        except ValueError:
            return
        self._bytes -= entry.size_bytes
        try:
            entry.path.unlink()
        except FileNotFoundError:
            log.warning("spool file %s was already gone", entry.path)

    # -- helpers ----------------------------------------------------------------------

    def _count_drop(self, entry: SpooledBatch, why: str) -> None:
        self.dropped_batches += 1
        self.dropped_bytes += entry.size_bytes
        log.warning(
            "spool %s: dropped batch %s (%d bytes) because %s; %d batches dropped so far",
            self.directory,
            entry.batch_id,
            entry.size_bytes,
            why,
            self.dropped_batches,
        )

    def _write_atomically(self, final: Path, body: bytes) -> None:
        tmp = final.with_name(final.name + TMP_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(body)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        if self._fsync:
            self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _load(self) -> None:
        found: list[SpooledBatch] = []
        for path in self.directory.iterdir():
            if path.name.endswith(TMP_SUFFIX):
                log.warning("spool %s: deleting partial write %s", self.directory, path.name)
                path.unlink(missing_ok=True)
                continue
            if not path.name.endswith(SUFFIX):
                continue
            parts = path.name.removesuffix(SUFFIX).split("_", 2)
            if (
                len(parts) != 3
                or not parts[0].isdigit()
                or not parts[1].isdigit()
                or not BATCH_ID_PATTERN.match(parts[2])
            ):
                log.warning("spool %s: ignoring unexpected file %s", self.directory, path.name)
                continue
            found.append(
                SpooledBatch(int(parts[0]), parts[2], int(parts[1]), path, path.stat().st_size)
            )
        found.sort(key=lambda e: e.seq)
        self._entries = deque(found)
        self._bytes = sum(e.size_bytes for e in found)
        self._next_seq = found[-1].seq + 1 if found else 0
        if found:
            log.info(
                "spool %s: %d batches (%d bytes) left from an earlier run will be replayed",
                self.directory,
                len(found),
                self._bytes,
            )
        while self._entries and (
            len(self._entries) > self.max_files or self._bytes > self.max_bytes
        ):
            oldest = self._entries[0]
            self.remove(oldest)
            self._count_drop(oldest, "the spool bounds are smaller than what an earlier run left")
