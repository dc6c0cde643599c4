"""One SQL text over rows that lie in the store or in a frame.

An analysis written as SQL names its inputs as relations (``samples``, ``gpus`` ...).
:func:`query_rows` binds each name either to a query of the store (:class:`StoreRows`: the
SQL then runs inside the store, next to the rows, and no frame is built) or to an Arrow table
or polars frame a caller already holds (the SQL then runs in a private in-memory DuckDB over
it, zero-copy). So a report over a PromQL source and the extender over the store share one
implementation, and the extender's slow signals need neither polars (about 0.1 s of `serve`'s
cold start, docs/extender.md) nor the GIL while DuckDB aggregates (DuckDB releases it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeAlias

import duckdb
import pyarrow as pa

from sits_observe.domain.times import utc_naive
from sits_observe.errors import StoreError

if TYPE_CHECKING:
    from sits_observe.store.duck import Store


class ArrowFrame(Protocol):
    """A frame that converts to Arrow (a polars ``DataFrame``)."""

    def to_arrow(self) -> pa.Table: ...


@dataclass(frozen=True)
class StoreRows:
    """The rows ``select`` (one SELECT, ``?`` parameters ``params``) gives in ``store``."""

    store: Store
    select: str
    params: Sequence[object] = ()


#: What :func:`query_rows` binds a relation name to.
Rows: TypeAlias = "StoreRows | pa.Table | ArrowFrame"

#: ``ts`` in ``[since, until)`` and, optionally, one node (:func:`window`).
_WINDOW_SQL = (
    "(?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?) "
    "AND (?::VARCHAR IS NULL OR node = ?)"
)


#: ``ts`` in ``[since, until)`` with ``until`` given and ``since`` None for "from the first
#: row": three parameters, :func:`in_window_params`.
IN_WINDOW = "ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?)"


def in_window_params(since: datetime | None, until: datetime) -> list[object]:
    """The three parameters of one :data:`IN_WINDOW` condition."""
    return [until, since, since]


def _window_params(
    since: datetime | None, until: datetime | None, node: str | None
) -> list[object]:
    """The parameters of :data:`_WINDOW_SQL`."""
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return [lo, lo, hi, hi, node, node]


def window(
    store: Store,
    table: str,
    columns: Sequence[str],
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> StoreRows:
    """``columns`` of ``table`` in ``[since, until)``, optionally one node."""
    return StoreRows(
        store,
        f"SELECT {', '.join(columns)} FROM {table} WHERE {_WINDOW_SQL}",
        _window_params(since, until, node),
    )


def query_rows(sql: str, relations: Mapping[str, Rows], params: Sequence[object] = ()) -> pa.Table:
    """Run ``sql`` (``?`` parameters ``params``) with each name of ``relations`` bound to its
    rows: all of them :class:`StoreRows` of one store, or all frames. A failing query is a
    :class:`~sits_observe.errors.StoreError`."""
    stored = {name: r for name, r in relations.items() if isinstance(r, StoreRows)}
    if not stored:
        frames = {name: r for name, r in relations.items() if not isinstance(r, StoreRows)}
        return _over_frames(sql, frames, params)
    stores = {id(r.store): r.store for r in stored.values()}
    if len(stored) != len(relations) or len(stores) != 1:
        raise TypeError("relations must all be rows of one store, or all frames")
    # The relations as common table expressions ahead of the query's own (if it has any),
    # so that the query's ORDER BY stays the outermost one.
    ctes = ", ".join(f"{name} AS ({r.select})" for name, r in stored.items())
    own = _WITH.match(sql)
    query = f"WITH {ctes}, {sql[own.end() :]}" if own else f"WITH {ctes} {sql}"
    bound = [p for r in stored.values() for p in r.params]
    (store,) = stores.values()
    return store.query(query, [*bound, *params])


_WITH = re.compile(r"\s*WITH\s+", re.IGNORECASE)
_memory: duckdb.DuckDBPyConnection | None = None
_memory_lock = threading.Lock()


def _over_frames(
    sql: str, frames: Mapping[str, pa.Table | ArrowFrame], params: Sequence[object]
) -> pa.Table:
    """``sql`` in a cursor of one in-memory database (a database is about 18 ms to create, a
    cursor 2 ms); each cursor sees only the frames registered on it."""
    global _memory
    with _memory_lock:
        if _memory is None:
            _memory = duckdb.connect()
        cursor = _memory.cursor()
    try:
        for name, frame in frames.items():
            cursor.register(name, frame if isinstance(frame, pa.Table) else frame.to_arrow())
        return cursor.sql(sql, params=list(params) or None).to_arrow_table()
    except duckdb.Error as exc:
        raise StoreError(f"query failed: {exc}") from exc
    finally:
        cursor.close()
