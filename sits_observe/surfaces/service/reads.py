"""Read endpoints: the service owns the DuckDB file, so other tools read through it.

``GET /api/v1/tables`` lists tables and row counts; ``GET /api/v1/tables/{table}`` returns
rows of one table in a time range (read by :func:`sits_observe.store.reads.read_range`) as an
Arrow IPC stream (or JSON with ``format=json``). JSON rows are strict RFC 8259: a NaN or
infinite value (stored before the ingest range rules existed, or by a local ``ingest``) is
``null``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

import pyarrow as pa
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from sits_observe.domain.strict_json import finite_columns
from sits_observe.domain.tables import TABLES
from sits_observe.store import Store
from sits_observe.store.duck import EXTRA_TABLES
from sits_observe.store.reads import TIME_COLUMNS, read_range
from sits_observe.surfaces.service.http.json_answers import problem

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def table_counts(store: Store) -> dict[str, int]:
    """Rows of every readable table."""
    return {name: store.count(name) for name in [*TABLES, *EXTRA_TABLES]}


async def rows_response(
    store: Store,
    table: str,
    *,
    since: datetime | None,
    until: datetime | None,
    node: str | None,
    limit: int,
    fmt: Literal["arrow", "json"],
) -> Response:
    """The HTTP answer of ``GET /api/v1/tables/{table}``."""
    if table not in TIME_COLUMNS:
        return problem(
            404, "unknown_table", f"unknown table {table!r}; valid: {', '.join(TIME_COLUMNS)}"
        )
    if node is not None and "node" not in store.columns(table):
        return problem(400, "bad_query", f"table {table!r} has no node column")
    data = await run_in_threadpool(
        lambda: read_range(store, table, since=since, until=until, node=node, limit=limit)
    )
    if fmt == "json":
        # Columns cleaned in Arrow (vectorised), so the rows need no second walk.
        rows = finite_columns(data).to_pylist()
        text = json.dumps(rows, default=str, allow_nan=False)
        return Response(text, media_type="application/json")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return Response(sink.getvalue().to_pybytes(), media_type=ARROW_STREAM)
