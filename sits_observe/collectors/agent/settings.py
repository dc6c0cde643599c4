"""Typed settings of the node agent: collection cadence, delivery and the spool's bounds.

The CLI builds one :class:`AgentSettings` from its flags (help texts come from the field
descriptions) and hands the values to :class:`~.loop.AgentLoop`, :class:`~.shipper.Shipper`
and :class:`~.spool.Spool`; nothing reads a global.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class AgentSettings(BaseModel):
    """How the agent collects, ships and spools."""

    model_config = ConfigDict(frozen=True)

    interval_s: float = Field(1.0, ge=0.1, le=3600, description="seconds between two collections")
    ship_every: int = Field(
        1,
        ge=1,
        le=60,
        description="ship one batch every n-th collection, holding the rows of the ones "
        "between (1 = every collection); fewer, larger requests let one service take more "
        "nodes, at n intervals of delay",
        json_schema_extra={"unit": "collections"},
    )
    cgroup_slow_every: int = Field(
        5,
        ge=1,
        le=3600,
        description="read cgroup limits, OOM events and PSI on every n-th collection only",
    )
    ship_timeout_s: float = Field(
        5.0, gt=0, le=300, description="seconds one delivery may take (connect, send, answer)"
    )
    ship_retries: int = Field(
        2, ge=0, le=10, description="retries of a delivery on 5xx, 408, 429 or no answer"
    )
    backoff_s: float = Field(
        0.25, ge=0, le=60, description="seconds before the first retry; doubles per retry"
    )
    backoff_max_s: float = Field(5.0, ge=0, le=300, description="longest wait between retries")
    spool_max_bytes: int = Field(
        256 * MIB, ge=64 * 1024, description="bytes of unacknowledged batches kept on disk"
    )
    spool_max_files: int = Field(
        100_000, ge=1, description="unacknowledged batch files kept on disk"
    )
    dead_letter_max_files: int = Field(
        100, ge=1, description="rejected batch files kept for inspection (oldest dropped)"
    )
    quarantine_after_failures: int = Field(
        5,
        ge=1,
        le=100,
        description="ticks in which one spooled batch got a 5xx while the service stored "
        "others, before it is moved to quarantine",
    )
    quarantine_max_files: int = Field(
        100, ge=1, description="quarantined batch files kept for inspection (oldest dropped)"
    )
    replay_max_per_tick: int = Field(
        50, ge=1, le=100_000, description="spooled batches sent per collection at most"
    )
    compression: Literal["lz4", "zstd"] | None = Field(
        None, description="Arrow IPC buffer compression (none: uncompressed)"
    )
