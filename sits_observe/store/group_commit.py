"""Group commit: many agents' batches stored in one DuckDB transaction.

One transaction per batch costs a commit (a WAL write and sync) and a few statements per
batch whatever its size, which capped one service at about 95 agent batches per second.
Here request handlers :meth:`GroupCommitter.submit` a batch and wait on the
future it returns; one writer thread takes every batch pending (up to ``max_batches`` and
``max_rows``; it waits at most ``max_wait_s`` after the oldest arrived for more to join),
and in one transaction:

1. looks every batch id up within the group: one seen earlier in the group is a duplicate,
   or a :class:`BatchConflict` when its body's SHA-256 differs (each resolved on its own
   future, nothing else affected);
2. concatenates each table across the group's new batches and inserts it once (``requests``
   is inserted batch by batch, in order, so its (trace_id, span_id) de-duplication and each
   batch's stored row count are exactly those of one-by-one appends);
3. records the group's ``ingest_batches`` rows and commits. The ledger's primary key
   refuses an id stored before: then the transaction is rolled back and run again with
   every id looked up in ``ingest_batches`` first (step 1 for stored ids too), so a replay
   costs its group one more try and is answered as a duplicate or a conflict.

Only then is each future resolved with its own :class:`BatchReceipt`: a batch is
acknowledged after the commit that holds it, never before, so an agent that replays after
a crash still never loses or duplicates samples. When the group's transaction fails with a
DuckDB error, its batches are retried one by one through :meth:`Store.append_batch`, so one
bad batch fails alone and the others are stored. A batch whose tables do not fit their
schema fails alone with :class:`SchemaError` before the transaction.

:meth:`GroupCommitter.ingest` is :meth:`Store.ingest` for this writer: the batch is
conformed and screened (:mod:`.intake`) in the caller's thread, then queued here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.domain.tables import TABLES
from sits_observe.errors import BatchConflict, SitsError, StoreError
from sits_observe.store.duck import (
    BatchReceipt,
    Store,
    check_same_body,
    insert,
    record_batches,
)
from sits_observe.store.intake import (
    Batch,
    IngestReceipt,
    Prepared,
    conform_batch,
    prepare,
    receipt_of,
)
from sits_observe.store.inventory import InventorySettings, check_snapshot_times

log = logging.getLogger(__name__)


class GroupCommitSettings(BaseModel):
    """How many batches one transaction may hold and how long a batch waits for company."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = Field(
        True,
        description="store batches that arrive together in one transaction (off: one "
        "transaction per batch)",
    )
    max_batches: int = Field(
        512, ge=1, le=100_000, description="batches stored in one transaction at most"
    )
    max_rows: int = Field(
        500_000, ge=1, le=100_000_000, description="rows stored in one transaction at most"
    )
    max_wait_s: float = Field(
        0.005,
        ge=0,
        le=1,
        description="seconds a batch waits for others to share its transaction (a group "
        "already queued behind a running commit is taken at once)",
    )


@dataclass
class _Pending:
    tables: Mapping[str, pa.Table]
    batch_id: str | None
    node: str | None
    body_sha256: str | None
    submitted_at: float
    future: Future[Any] = field(default_factory=Future)
    rows: int = 0
    ready: Prepared | None = None  # set by :meth:`GroupCommitter.ingest`

    def resolve(self, receipt: BatchReceipt) -> None:
        """Answer the waiting caller: the store's receipt, or for a batch that came through
        :meth:`GroupCommitter.ingest` its :class:`IngestReceipt`."""
        if self.ready is None:
            self.future.set_result(receipt)
        else:
            self.future.set_result(
                receipt_of(self.ready, receipt.batch_id, receipt.rows, receipt.duplicate)
            )


@dataclass(frozen=True)
class GroupStats:
    """What the committer did so far (for tests and the service's metrics)."""

    groups: int
    batches: int
    fallbacks: int


class GroupCommitter:
    """The writer thread and its queue. :meth:`close` drains the queue and stops it."""

    def __init__(
        self,
        store: Store,
        settings: GroupCommitSettings | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        on_group: Callable[[int], None] | None = None,
    ) -> None:
        """``on_group(batches)`` is called after each group's commit (the service's
        metrics); it runs on the writer thread and must not block."""
        self._store = store
        self._on_group = on_group
        self._settings = settings or GroupCommitSettings()
        self._monotonic = monotonic
        self._pending: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._groups = self._batches = self._fallbacks = 0
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    @property
    def stats(self) -> GroupStats:
        """Groups committed, batches they held, groups that fell back to one by one."""
        with self._cond:
            return GroupStats(self._groups, self._batches, self._fallbacks)

    def submit(
        self,
        tables: Mapping[str, pa.Table],
        *,
        batch_id: str | None = None,
        node: str | None = None,
        body_sha256: str | None = None,
    ) -> Future[BatchReceipt]:
        """Queue one batch (the arguments of :meth:`Store.append_batch`); never blocks. The
        future holds its receipt once the transaction holding it committed, or the
        :class:`SitsError` that kept it out (conflict, schema, store)."""
        return self._queue(_Pending(tables, batch_id, node, body_sha256, self._monotonic()))

    def _queue(self, item: _Pending) -> Future[Any]:
        item.rows = sum(t.num_rows for t in item.tables.values())
        with self._cond:
            if self._closed:
                item.future.set_exception(StoreError("the store is closing; send it again"))
                return item.future
            self._pending.append(item)
            self._cond.notify()
        return item.future

    def ingest(self, batch: Batch | Prepared) -> Future[IngestReceipt]:
        """Queue one batch the way :meth:`Store.ingest` stores it: conformed and screened
        here, in the caller's thread (:class:`SchemaError` raised at once, nothing queued),
        then stored with the group. Never blocks on the store; the future holds the
        :class:`IngestReceipt` once the transaction holding the batch committed, and
        cancelling it withdraws the batch only while it is still queued."""
        ready = prepare(batch)
        meta = ready.batch
        item = _Pending(ready.tables, meta.batch_id, meta.node, meta.body_sha256, self._monotonic())
        item.ready = ready
        return self._queue(item)

    def append_batch(
        self,
        tables: Mapping[str, pa.Table],
        *,
        batch_id: str | None = None,
        node: str | None = None,
        body_sha256: str | None = None,
    ) -> BatchReceipt:
        """:meth:`submit` and wait: a drop-in for :meth:`Store.append_batch`."""
        return self.submit(tables, batch_id=batch_id, node=node, body_sha256=body_sha256).result()

    def close(self, timeout_s: float | None = None) -> bool:
        """Store what is queued, stop the writer; False when it did not stop in time."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # -- the writer ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            group = self._take()
            if not group:
                with self._cond:
                    if self._closed and not self._pending:
                        return
                continue
            try:
                self._commit(group)
            except Exception as exc:  # a bug here must not strand the waiting requests
                log.exception("group commit failed")
                for item in group:
                    if not item.future.done():
                        item.future.set_exception(StoreError(f"batch not stored: {exc}"))

    def _take(self) -> list[_Pending]:
        """The next group: waits for a first batch, then up to ``max_wait_s`` after the
        oldest arrived for the group to fill; empty once closed and drained."""
        limits = self._settings
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            while not self._closed and not self._full():
                left_s = self._pending[0].submitted_at + limits.max_wait_s - self._monotonic()
                if left_s <= 0:
                    break
                self._cond.wait(left_s)
            group: list[_Pending] = []
            rows = 0
            while self._pending and len(group) < limits.max_batches:
                nxt = self._pending[0]
                if group and rows + nxt.rows > limits.max_rows:
                    break
                self._pending.popleft()
                rows += nxt.rows
                # From here the future cannot be cancelled (a request whose client went away
                # cancels it while it waits; such a batch is dropped, it was never answered).
                if nxt.future.set_running_or_notify_cancel():
                    group.append(nxt)
            return group

    def _full(self) -> bool:
        limits = self._settings
        if len(self._pending) >= limits.max_batches:
            return True
        return sum(item.rows for item in self._pending) >= limits.max_rows

    def _commit(self, group: list[_Pending]) -> None:
        live: list[tuple[_Pending, dict[str, pa.Table]]] = []
        for item in group:
            try:
                live.append((item, _conformed(item.tables)))
            except SitsError as exc:
                item.future.set_exception(exc)
        if not live:
            return
        try:
            try:
                outcomes = self._store_group(live, look_up=False)
            except duckdb.ConstraintException:
                # A batch id of the group is in the ledger already (a replay): the group
                # again, its ids looked up first, so the replay is answered as a duplicate.
                outcomes = self._store_group(live, look_up=True)
        except (duckdb.Error, StoreError) as exc:
            log.warning("group of %d batches failed (%s); storing them one by one", len(live), exc)
            self._one_by_one([item for item, _ in live])
            return
        with self._cond:
            self._groups += 1
            self._batches += len(live)
        if self._on_group is not None:
            self._on_group(len(live))
        for (item, _), outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, BatchReceipt):
                item.resolve(outcome)
            else:
                item.future.set_exception(outcome)

    def _store_group(
        self, live: list[tuple[_Pending, dict[str, pa.Table]]], *, look_up: bool
    ) -> list[BatchReceipt | BatchConflict]:
        """One transaction for the whole group; the outcome of each batch, in order.

        Without ``look_up`` the ledger is not read first: nearly every batch is new, and the
        ledger's primary key refuses an id stored before (``duckdb.ConstraintException``,
        nothing of the group stored), after which the caller tries again with ``look_up``.
        The lookup cost a statement a group (3 ms of the writer's 45 under load)."""
        with self._store.transaction() as con:
            stored = _stored_ids(con, [item.batch_id for item, _ in live]) if look_up else {}
            outcomes: list[BatchReceipt | BatchConflict | None] = [None] * len(live)
            firsts: dict[str, int] = {}  # batch id -> index of its first copy in the group
            new: list[int] = []
            for i, (item, _) in enumerate(live):
                bid = item.batch_id
                if bid is not None and bid in stored:
                    seen_rows, digest = stored[bid]
                    outcomes[i] = _duplicate(bid, seen_rows, digest, item.body_sha256)
                elif bid is not None and bid in firsts:
                    continue  # resolved once its first copy's rows are known
                else:
                    if bid is not None:
                        firsts[bid] = i
                    new.append(i)
            rows = dict(
                zip(
                    new,
                    _insert_group(con, [live[i][1] for i in new], self._store.inventory),
                    strict=True,
                )
            )
            ledger = [(live[i][0], n) for i, n in rows.items()]
            record_batches(
                con,
                [
                    (it.batch_id, it.node, n, it.body_sha256)
                    for it, n in ledger
                    if it.batch_id is not None
                ],
            )
            for i, n in rows.items():
                outcomes[i] = BatchReceipt(live[i][0].batch_id, n, duplicate=False)
            for i, (item, _) in enumerate(live):
                if outcomes[i] is None and item.batch_id is not None:
                    first = firsts[item.batch_id]
                    outcomes[i] = _duplicate(
                        item.batch_id, rows[first], live[first][0].body_sha256, item.body_sha256
                    )
        return [o for o in outcomes if o is not None]

    def _one_by_one(self, items: list[_Pending]) -> None:
        with self._cond:
            self._fallbacks += 1
        for item in items:
            try:
                receipt = self._store.append_batch(
                    item.tables,
                    batch_id=item.batch_id,
                    node=item.node,
                    body_sha256=item.body_sha256,
                )
            except SitsError as exc:
                item.future.set_exception(exc)
            else:
                item.resolve(receipt)


def _conformed(tables: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
    """The batch in the domain schema; tables already in it (the service screened them)
    pass untouched, anything else goes through :func:`conform_batch` (raises SchemaError)."""
    fits = all(n in TABLES and t.schema.equals(TABLES[n].schema) for n, t in tables.items())
    if fits:
        for name, data in tables.items():
            check_snapshot_times(name, data)
    return dict(tables) if fits else conform_batch(tables)


def _duplicate(
    batch_id: str, rows: int, stored: str | None, presented: str | None
) -> BatchReceipt | BatchConflict:
    try:
        check_same_body(batch_id, stored, presented)
    except BatchConflict as exc:
        return exc
    return BatchReceipt(batch_id, rows, duplicate=True)


def _stored_ids(
    con: duckdb.DuckDBPyConnection, ids: list[str | None]
) -> dict[str, tuple[int, str | None]]:
    wanted = sorted({i for i in ids if i is not None})
    if not wanted:
        return {}
    found = con.execute(
        "SELECT batch_id, rows, body_sha256 FROM ingest_batches WHERE list_contains(?, batch_id)",
        [wanted],
    ).fetchall()
    return {str(bid): (int(rows), digest) for bid, rows, digest in found}


def _insert_group(
    con: duckdb.DuckDBPyConnection,
    batches: list[dict[str, pa.Table]],
    inventory: InventorySettings,
) -> list[int]:
    """Insert the batches' tables, each table once across the group (``requests`` batch by
    batch); the rows stored for each batch, in order."""
    rows = [0] * len(batches)
    names = sorted({name for tables in batches for name in tables})
    for name in names:
        if name == "requests":
            for i, tables in enumerate(batches):
                if name in tables:
                    rows[i] += insert(con, name, tables[name])
            continue
        parts = [(i, tables[name]) for i, tables in enumerate(batches) if name in tables]
        # One contiguous table: DuckDB's Arrow scan pays per chunk, and a group of 64
        # 8-row GPU tables inserted as 64 chunks took 10x longer than as one (measured).
        insert(con, name, pa.concat_tables([t for _, t in parts]).combine_chunks(), inventory)
        for i, table in parts:
            rows[i] += table.num_rows
    return rows
