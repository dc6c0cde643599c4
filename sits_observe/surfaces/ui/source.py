"""The app's data: a read-only DuckDB file, or a copy of the service's tables in memory.

The service owns its DuckDB file (DuckDB allows one writer, and a writer excludes readers of
other processes), so with ``--service`` the app fetches the rows it analyses through
``GET /api/v1/tables/{table}?since=...&format=arrow`` into a private in-memory
:class:`~sits_observe.store.Store`, and runs the same analytics functions on it as on a file.
Reads are paged: a page that comes back full is followed by one starting at its newest time,
and the rows at that time are taken from the later page only, so none is lost or doubled
(a single time holding more rows than a page is refused, with what to do).

With ``--db`` the file is opened read-only for one page run and closed again, so an
``ingest`` can open it for writing between two runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.errors import StoreError
from sits_observe.store import Store, utc_naive
from sits_observe.surfaces.service.reads import ARROW_STREAM, TIME_COLUMNS

#: The tables the pages analyse (sample tables, inventory, drops, decisions, GPU rollups).
UI_TABLES: tuple[str, ...] = (
    "gpu_samples",
    "gpu_samples_1m",
    "container_samples",
    "gpu_processes",
    "requests",
    "server_windows",
    "nodes",
    "pods",
    "collector_drops",
    "decisions",
)
#: Rows asked for per read request (the service caps it at its ``read_max_rows``).
PAGE_ROWS = 200_000
#: Seconds one read request may take.
READ_TIMEOUT_S = 60.0

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Snapshot:
    """An in-memory store filled from the service, and what was fetched."""

    store: Store
    fetched_at: datetime
    since: datetime
    rows: dict[str, int]


def fetch_table(
    client: httpx.Client,
    base_url: str,
    token: str,
    table: str,
    *,
    since: datetime,
    page_rows: int = PAGE_ROWS,
) -> pa.Table:
    """Every row of ``table`` with time at or after ``since`` (naive UTC), oldest first."""
    column = TIME_COLUMNS[table]
    pages: list[pa.Table] = []
    start = since
    while True:
        page = _get(client, base_url, token, table, since=start, limit=page_rows)
        if page.num_rows < page_rows:
            pages.append(page)
            break
        newest = pc.max(page.column(column)).as_py()
        kind = page.schema.field(column).type
        before = page.filter(pc.less(page.column(column), pa.scalar(newest, kind)))
        if before.num_rows == 0:
            raise StoreError(
                f"table {table}: more than {page_rows} rows share the time {newest}; "
                "raise the service's --read-max-rows or the page size"
            )
        pages.append(before)
        start = newest
    return pa.concat_tables(pages) if len(pages) > 1 else pages[0]


def _get(
    client: httpx.Client, base_url: str, token: str, table: str, *, since: datetime, limit: int
) -> pa.Table:
    url = f"{base_url.rstrip('/')}/api/v1/tables/{table}"
    params = {"since": since.isoformat(), "format": "arrow", "limit": str(limit)}
    try:
        response = client.get(url, params=params, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise StoreError(f"GET {url} failed: {exc}; is `sits-observe serve` running?") from exc
    if response.status_code != 200:
        raise StoreError(
            f"GET {url} answered HTTP {response.status_code}: {response.text[:300]}"
            + (" (check the token file)" if response.status_code in (401, 403) else "")
        )
    if not response.headers.get("content-type", "").startswith(ARROW_STREAM):
        raise StoreError(f"GET {url} did not answer an Arrow stream")
    with pa.ipc.open_stream(response.content) as reader:
        return reader.read_all()


def load_into(store: Store, table: str, data: pa.Table) -> None:
    """Append fetched rows to the in-memory ``store`` (rollups through a transaction)."""
    if data.num_rows == 0:
        return
    if table == "gpu_samples_1m":
        with store.transaction() as con:
            con.register("_fetched", data)
            try:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _fetched")
            finally:
                con.unregister("_fetched")
        return
    store.append(table, data)


def snapshot_from_service(
    base_url: str,
    token: str,
    *,
    since: datetime,
    now: datetime,
    tables: Sequence[str] = UI_TABLES,
    client: httpx.Client | None = None,
) -> Snapshot:
    """Fetch ``tables`` since ``since`` into a new in-memory store."""
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT_S))
    store = Store.open(":memory:")
    rows: dict[str, int] = {}
    try:
        for table in tables:
            data = fetch_table(http, base_url, token, table, since=since)
            load_into(store, table, data)
            rows[table] = data.num_rows
    except BaseException:
        store.close()
        raise
    finally:
        if own:
            http.close()
    return Snapshot(store, now, since, rows)


@contextmanager
def open_file(path: str) -> Iterator[Store]:
    """The DuckDB file read-only, closed on exit."""
    store = Store.open(path, read_only=True)
    try:
        yield store
    finally:
        store.close()


def window_since(window_s: float, now: datetime) -> datetime:
    """Start (naive UTC) of the ``window_s`` seconds of data before ``now``."""
    return utc_naive(now) - timedelta(seconds=window_s)
