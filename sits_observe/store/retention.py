"""Retention and one-minute rollups, so a long-running store stays bounded.

Raw GPU and container samples older than ``raw_retention_s`` are folded into the
``*_1m`` tables and deleted, in one transaction. Rollups keep sums, counts and maxima (not
averages), so rows that arrive late for a minute already rolled merge exactly through
``ON CONFLICT``. Rollups older than ``rollup_retention_s`` and request records older than
``requests_retention_s`` are deleted. Request records are not rolled up: exact quantiles
need the raw latencies. The ingest ledger's batch ids (``ingest_batches``) are kept for
``ledger_retention_s``, long enough for an agent's replays. Server windows, GPU processes,
inventory snapshots and collector drops are kept for ``other_retention_s``: for the
inventory (stored as changes since schema version 6, :mod:`sits_observe.store.inventory`)
that deletes the snapshot times before the cutoff and the versions no remaining snapshot
reads (closed before it, or of an epoch with no snapshot left), and counts the ``pods`` /
``nodes`` rows the views lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store
from sits_observe.store.inventory import VERSIONS


class RetentionSettings(BaseModel):
    """How long each kind of data is kept."""

    raw_retention_s: float = Field(
        6 * 3600, gt=0, description="seconds of raw GPU / container samples kept before rollup"
    )
    rollup_retention_s: float = Field(
        30 * 86400, gt=0, description="seconds of one-minute rollups kept"
    )
    requests_retention_s: float = Field(
        7 * 86400, gt=0, description="seconds of per-request records kept"
    )
    other_retention_s: float = Field(
        7 * 86400,
        gt=0,
        description="seconds kept of server windows, GPU processes, inventory snapshots and "
        "collector drops",
    )
    ledger_retention_s: float = Field(
        86400,
        gt=0,
        description="seconds a stored batch id is remembered (ingest_batches): a replay "
        "within it is acknowledged as a duplicate, a later one is stored again",
    )


@dataclass(frozen=True)
class RetentionReport:
    """Rows moved or removed by one :func:`enforce_retention` run."""

    gpu_rows_rolled: int
    container_rows_rolled: int
    rollup_rows_deleted: int
    request_rows_deleted: int
    other_rows_deleted: int = 0
    ledger_rows_deleted: int = 0


#: Tables kept raw for ``other_retention_s`` and then deleted (no rollup).
_OTHER_TABLES = (
    "server_windows",
    "gpu_processes",
    "collector_drops",
    "decisions",
    "numa_samples",
    "container_numa_samples",
    "gpu_topology",
    "gpu_links",
    "sync_delays",
    "gpu_attribution",
)

_GPU_ROLLUP = """
INSERT INTO gpu_samples_1m
SELECT date_trunc('minute', ts), coalesce(node, ''), coalesce(gpu_uuid, ''),
       coalesce(mig_instance_id, -1), count(*),
       sum(fb_used_bytes), max(fb_used_bytes), max(fb_total_bytes),
       sum(gpu_util_ratio), max(gpu_util_ratio), sum(power_w), max(power_w)
FROM gpu_samples WHERE ts < ?
GROUP BY ALL
ON CONFLICT DO UPDATE SET
    samples = samples + excluded.samples,
    fb_used_bytes_sum = fb_used_bytes_sum + excluded.fb_used_bytes_sum,
    fb_used_bytes_max = greatest(fb_used_bytes_max, excluded.fb_used_bytes_max),
    fb_total_bytes_max = greatest(fb_total_bytes_max, excluded.fb_total_bytes_max),
    gpu_util_ratio_sum = gpu_util_ratio_sum + excluded.gpu_util_ratio_sum,
    gpu_util_ratio_max = greatest(gpu_util_ratio_max, excluded.gpu_util_ratio_max),
    power_w_sum = power_w_sum + excluded.power_w_sum,
    power_w_max = greatest(power_w_max, excluded.power_w_max)
"""

_CONTAINER_ROLLUP = """
INSERT INTO container_samples_1m
SELECT date_trunc('minute', ts), coalesce(node, ''), coalesce(pod_uid, ''),
       coalesce(container_id, ''), count(*),
       sum(memory_current_bytes), max(memory_current_bytes), max(memory_max_bytes),
       max(cpu_usage_s)
FROM container_samples WHERE ts < ?
GROUP BY ALL
ON CONFLICT DO UPDATE SET
    samples = samples + excluded.samples,
    memory_current_bytes_sum = memory_current_bytes_sum + excluded.memory_current_bytes_sum,
    memory_current_bytes_max = greatest(memory_current_bytes_max,
                                        excluded.memory_current_bytes_max),
    memory_max_bytes_max = greatest(memory_max_bytes_max, excluded.memory_max_bytes_max),
    cpu_usage_s_max = greatest(cpu_usage_s_max, excluded.cpu_usage_s_max)
"""


def enforce_retention(
    store: Store, now: datetime, settings: RetentionSettings | None = None
) -> RetentionReport:
    """Roll up and delete what is past its retention, as of ``now`` (UTC)."""
    settings = settings or RetentionSettings()
    now = utc_naive(now)
    raw_cutoff = now - timedelta(seconds=settings.raw_retention_s)
    rollup_cutoff = now - timedelta(seconds=settings.rollup_retention_s)
    requests_cutoff = now - timedelta(seconds=settings.requests_retention_s)
    other_cutoff = now - timedelta(seconds=settings.other_retention_s)
    ledger_cutoff = now - timedelta(seconds=settings.ledger_retention_s)
    with store.transaction() as con:

        def rows_before(table: str, cutoff: datetime, column: str = "ts") -> int:
            sql = f"SELECT count(*) FROM {table} WHERE {column} < ?"
            row = con.execute(sql, [cutoff]).fetchone()
            return int(row[0]) if row else 0

        gpu_rows = rows_before("gpu_samples", raw_cutoff)
        container_rows = rows_before("container_samples", raw_cutoff)
        request_rows = rows_before("requests", requests_cutoff)
        if gpu_rows:
            con.execute(_GPU_ROLLUP, [raw_cutoff])
            con.execute("DELETE FROM gpu_samples WHERE ts < ?", [raw_cutoff])
        if container_rows:
            con.execute(_CONTAINER_ROLLUP, [raw_cutoff])
            con.execute("DELETE FROM container_samples WHERE ts < ?", [raw_cutoff])
        rollups_deleted = 0
        for table in ("gpu_samples_1m", "container_samples_1m"):
            row = con.execute(
                f"SELECT count(*) FROM {table} WHERE minute < ?", [rollup_cutoff]
            ).fetchone()
            rollups_deleted += int(row[0]) if row else 0
            con.execute(f"DELETE FROM {table} WHERE minute < ?", [rollup_cutoff])
        if request_rows:
            con.execute("DELETE FROM requests WHERE ts < ?", [requests_cutoff])
        other_rows = 0
        for table in _OTHER_TABLES:
            other_rows += rows_before(table, other_cutoff)
            con.execute(f"DELETE FROM {table} WHERE ts < ?", [other_cutoff])
        for kind, versions in VERSIONS.items():
            other_rows += rows_before(kind, other_cutoff)  # the view's rows: what a reader lost
            con.execute(
                "DELETE FROM inventory_snapshots WHERE kind = ? AND ts < ?", [kind, other_cutoff]
            )
            con.execute(
                f"DELETE FROM {versions} AS v WHERE v.valid_to <= ? OR NOT EXISTS ("
                "SELECT 1 FROM inventory_snapshots AS s WHERE s.kind = ? "
                "AND s.epoch_at = v.epoch_at)",
                [other_cutoff, kind],
            )
        # The ledger gains a row per agent batch (17 M a day from 1,000 agents shipping every
        # 5 s, about 1.8 GB of file): it only has to outlive the replays of a batch.
        ledger_rows = rows_before("ingest_batches", ledger_cutoff, column="received_at")
        if ledger_rows:
            con.execute("DELETE FROM ingest_batches WHERE received_at < ?", [ledger_cutoff])
    return RetentionReport(
        gpu_rows, container_rows, rollups_deleted, request_rows, other_rows, ledger_rows
    )
