"""How fresh the stored samples are: the newest row per node of each sample table.

One query for everything that asks "is this node's collector still delivering?": the
exporter's ``sits_collector_last_seen_timestamp_seconds`` (and the collector-down alert on
it) and the Streamlit fleet page's freshness table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from sits_observe.store.duck import Store

#: The tables a node's collectors fill (each has ``ts`` and ``node``).
SAMPLE_TABLES: tuple[str, ...] = ("gpu_samples", "container_samples", "requests", "server_windows")


def newest_by_node(
    store: Store,
    tables: Sequence[str] = SAMPLE_TABLES,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """Columns ``source`` (table name), ``node`` (NULL for rows without one) and
    ``newest_at`` (naive UTC): one row per table and node that has rows, by node and source;
    only rows with ``since <= ts < until`` count (None = no bound)."""
    where = "WHERE (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)"
    union = " UNION ALL ".join(
        f"SELECT '{t}' AS source, node, max(ts) AS newest_at FROM {t} {where} GROUP BY node"
        for t in tables
    )
    return store.query(
        f"SELECT source, node, newest_at FROM ({union}) WHERE newest_at IS NOT NULL "
        "ORDER BY node NULLS LAST, source",
        [since, since, until, until] * len(tables),
    )


def newest_at(store: Store, tables: Sequence[str] = SAMPLE_TABLES) -> datetime | None:
    """The newest time in any of ``tables`` (naive UTC), or None when they are empty."""
    union = " UNION ALL ".join(f"SELECT max(ts) AS t FROM {t}" for t in tables)
    value = store.scalar(f"SELECT max(t) FROM ({union})")
    return value if isinstance(value, datetime) else None
