"""The one way rows come in: a :class:`Batch` is conformed, screened and appended.

Every source (an agent's batch over HTTP, an OTLP export, the service's inventory poller,
each ``sits-observe ingest`` command) hands the store a :class:`Batch` and gets an
:class:`IngestReceipt` back from :meth:`Store.ingest <sits_observe.store.duck.Store.ingest>`
(or, in the service, :meth:`GroupCommitter.ingest
<sits_observe.store.group_commit.GroupCommitter.ingest>`, which shares one transaction among
concurrent batches). On the way:

1. each table is conformed to its domain schema (:class:`~sits_observe.errors.SchemaError`,
   nothing stored, when one does not fit);
2. the domain's range rules run (:func:`sits_observe.domain.ranges.screen_tables`): bad rows
   are dropped, bad optional values NULLed, rows stamped after ``received_at +
   max_future_skew_s`` dropped as ``ts:future``;
3. what was dropped becomes ``collector_drops`` rows (collector ``ingest``, the batch's
   node, ``received_at``) stored in the same transaction as the batch.

:func:`prepare` runs steps 1-3 without a store, for a caller that must look at the rows
before anything is opened or stored (the CLI opens no database for a file with no usable row;
the service refuses a node token's rows of another node); :meth:`Store.ingest` accepts the
prepared batch as it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from sits_observe.domain.ranges import MAX_FUTURE_SKEW_S, screen_tables
from sits_observe.domain.tables import TABLES, conform
from sits_observe.errors import SchemaError
from sits_observe.store.inventory import check_snapshot_times

__all__ = ["Batch", "IngestReceipt", "Prepared", "conform_batch", "prepare"]


@dataclass(frozen=True)
class Batch:
    """Domain tables as a source delivered them.

    ``received_at`` is the clock the range rules judge timestamps by and the stamp of the
    drop rows; ``node`` names the sender (drop rows carry it); ``batch_id`` makes a replay
    idempotent and ``body_sha256`` (hex) tells a replay from a conflicting reuse of the id
    (see :meth:`Store.append_batch <sits_observe.store.duck.Store.append_batch>`).
    """

    tables: Mapping[str, pa.Table]
    received_at: datetime
    node: str | None = None
    batch_id: str | None = None
    body_sha256: str | None = None
    max_future_skew_s: float = MAX_FUTURE_SKEW_S


@dataclass(frozen=True)
class Prepared:
    """A :class:`Batch` conformed and screened: ``tables`` is what will be stored (drop rows
    included), ``dropped`` counts what the rules removed by ``<table>.<column>:<why>``."""

    batch: Batch
    tables: dict[str, pa.Table]
    dropped: Mapping[str, int] = field(default_factory=dict)

    @property
    def rows_by_table(self) -> dict[str, int]:
        """Rows to store in each table."""
        return {name: table.num_rows for name, table in self.tables.items()}


@dataclass(frozen=True)
class IngestReceipt:
    """What :meth:`Store.ingest` did: ``rows`` stored (of a duplicate: the rows stored the
    first time), whether the batch id had been seen, and what the range rules dropped
    (empty for a duplicate, which stores nothing)."""

    batch_id: str | None
    rows: int
    duplicate: bool
    dropped: Mapping[str, int]
    rows_by_table: Mapping[str, int]


def conform_batch(tables: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
    """Every table of a batch conformed to its domain schema; :class:`SchemaError` names the
    first table (and column) that does not fit, so nothing of the batch is stored."""
    conformed: dict[str, pa.Table] = {}
    for name, data in tables.items():
        if name not in TABLES:
            raise SchemaError(f"unknown table {name!r}; valid tables: {', '.join(TABLES)}")
        if data.schema.equals(TABLES[name].schema):
            # Already the domain schema (an agent's batch always is): a cast per column
            # would copy nothing and cost a third of the service's CPU per batch (measured).
            conformed[name] = data
            continue
        doubled = sorted(c for c, n in Counter(data.column_names).items() if n > 1)
        if doubled:
            raise SchemaError(
                f"batch for table {name!r} has column(s) {', '.join(doubled)} more than once; "
                "send each column once"
            )
        try:
            conformed[name] = conform(name, data)
        except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(f"batch for table {name!r} does not fit: {exc}") from exc
    for name, data in conformed.items():
        check_snapshot_times(name, data)
    return conformed


def prepare(batch: Batch | Prepared) -> Prepared:
    """Conform and screen ``batch`` (a :class:`Prepared` one is returned as it is); raises
    :class:`~sits_observe.errors.SchemaError` when a table does not fit its schema."""
    if isinstance(batch, Prepared):
        return batch
    screened = screen_tables(
        conform_batch(batch.tables),
        now=batch.received_at,
        max_future_skew_s=batch.max_future_skew_s,
    )
    tables = screened.batch(at=batch.received_at, node=batch.node)
    return Prepared(batch, tables, dict(sorted(screened.dropped.items())))


def receipt_of(ready: Prepared, batch_id: str | None, rows: int, duplicate: bool) -> IngestReceipt:
    """The receipt of ``ready`` once the store answered."""
    return IngestReceipt(
        batch_id,
        rows,
        duplicate,
        {} if duplicate else ready.dropped,
        {} if duplicate else ready.rows_by_table,
    )
