"""Typed settings of the central service; the ``serve`` CLI builds them from its flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from sits_observe.collectors.agent.wire import DecodeLimits
from sits_observe.errors import ConfigError
from sits_observe.store import GroupCommitSettings, RetentionSettings
from sits_observe.surfaces.service.http.auth import (
    Tokens,
    build_tokens,
    read_ingest_tokens,
    read_token_file,
)
from sits_observe.surfaces.service.http.limits import HttpLimits

MIB = 1024 * 1024

#: The extender port's limits: kube-scheduler sends one call at a time per scheduling cycle
#: and gives up after its ``httpTimeout`` (2 s in deploy/scheduler-config.yaml), so a few
#: calls in flight and short timeouts are plenty; a call over them is refused at once (the
#: extender is ``ignorable``: kube-scheduler goes on without it) rather than queued.
EXTENDER_LIMITS = HttpLimits(
    header_timeout_s=5.0,
    body_timeout_s=10.0,
    max_connections=64,
    max_concurrent_requests=8,
    queue_timeout_s=0.0,
)


class ServiceSettings(BaseModel):
    """Where the service listens, what it accepts, and how it keeps the store bounded."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("127.0.0.1", min_length=1, description="address to listen on")
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on (0 = any free)")
    extender_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve the scheduler extender (/scheduler/*) on this port only, so a "
        "NetworkPolicy can admit just kube-scheduler to it (default: on --port)",
    )
    db_path: Path = Field(
        Path("sits.duckdb"),
        description="DuckDB file the service owns",
        json_schema_extra={"flag": "--db"},
    )
    token: SecretStr | None = Field(
        None, description="bearer token of every role (or use token_file)"
    )
    token_file: Path | None = Field(
        None,
        description="file holding the bearer token of every role: ingest, read and scrape "
        "(whitespace around it is ignored); without it `serve` reads $SITS_TOKEN",
    )
    read_token_file: Path | None = Field(
        None, description="file holding a token that may only read (/api/v1/tables*)"
    )
    ingest_tokens_file: Path | None = Field(
        None,
        description="file of ingest tokens, one 'token [node]' per line; a token with a node "
        "may only send that node's rows",
    )
    scrape_token_file: Path | None = Field(
        None,
        description="file holding the token /metrics then requires (without it /metrics is open)",
    )
    api_docs: bool = Field(
        False, description="serve /docs and /openapi.json (no token; off by default)"
    )
    max_body_bytes: int = Field(
        8 * MIB,
        ge=1024,
        le=1024 * MIB,
        description="largest ingest body accepted, in bytes; larger ones get HTTP 413",
    )
    max_batch_rows: int = Field(
        500_000,
        ge=1,
        le=100_000_000,
        description="most rows one ingest batch may declare over all its tables (read from the "
        "Arrow headers before decoding); more get HTTP 413 'max_batch_rows'",
    )
    max_table_rows: int = Field(
        250_000,
        ge=1,
        le=100_000_000,
        description="most rows one table of an ingest batch may declare; more get HTTP 413 "
        "'max_table_rows'",
    )
    max_decoded_bytes: int = Field(
        128 * MIB,
        ge=1024,
        le=16 * 1024 * MIB,
        description="most bytes one ingest batch may take once decoded (its Arrow buffers "
        "decompressed, 8 bytes per row and column for the store's conversion, dictionary "
        "strings expanded); more get HTTP 413 'max_decoded_bytes'",
    )
    db_memory_limit: str | None = Field(
        None,
        pattern=r"^\d+(\.\d+)?\s*(%|[KMGT]i?B)$",
        description="DuckDB's memory limit for the store: its cache of the file's blocks and "
        "the queries' working memory, a size (2GiB) or a share of the machine's memory (25%); "
        "past it queries spill to disk or fail with an out-of-memory error (default: DuckDB's, "
        "80% of the memory)",
    )
    group_commit: GroupCommitSettings = Field(
        default_factory=GroupCommitSettings,
        description="how agents' batches share DuckDB transactions (POST /api/v1/ingest)",
    )
    http: HttpLimits = Field(
        default_factory=HttpLimits, description="timeouts and caps of the main port"
    )
    extender_http: HttpLimits = Field(
        default_factory=lambda: EXTENDER_LIMITS,
        description="timeouts and caps of the extender port (with extender_port)",
    )
    shutdown_grace_s: int = Field(
        5,
        ge=0,
        le=6,
        description="seconds in-flight requests get to finish after SIGTERM",
    )
    background_stop_s: float = Field(
        2.0,
        ge=0,
        le=3,
        description="seconds background work (a derived-signal pass, retention, alerting) "
        "gets to stop after the requests; the process exits without waiting longer",
    )
    retention_interval_s: float = Field(
        300.0, ge=0, le=86400, description="seconds between retention runs (0 = never)"
    )
    store_unhealthy_after_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="seconds the store may fail every write (full disk, damaged file; an "
        "invalidated database is reopened, a checkpoint retried, once a second at most) before "
        "/healthz answers 503 so Kubernetes restarts the service (0 = never)",
    )
    inventory_interval_s: float = Field(
        10.0,
        ge=1,
        le=86400,
        description="seconds between Kubernetes inventory snapshots (with API access: "
        "--kubeconfig / --in-cluster); the extender's view of free GPUs is as fresh as the "
        "last one",
    )
    retention: RetentionSettings = Field(
        default_factory=RetentionSettings, description="how long each kind of data is kept"
    )
    read_max_rows: int = Field(
        1_000_000, ge=1, le=100_000_000, description="most rows one read request returns"
    )
    max_future_skew_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="seconds a row's ts may lie ahead of the service's clock; later rows "
        "(ingest and OTLP) are dropped and counted as ts:future",
    )

    def decode_limits(self) -> DecodeLimits:
        """What one ingest batch may cost once decoded."""
        return DecodeLimits(
            max_batch_rows=self.max_batch_rows,
            max_table_rows=self.max_table_rows,
            max_decoded_bytes=self.max_decoded_bytes,
        )

    def resolved_token(self) -> str | None:
        """The all-roles token, from ``token`` or ``token_file`` (None when neither is
        given); raises :class:`ConfigError`."""
        if self.token is not None and self.token_file is not None:
            raise ConfigError("give the token or a token file, not both")
        if self.token_file is not None:
            return read_token_file(self.token_file, "token file")
        if self.token is None:
            return None
        token = self.token.get_secret_value().strip()
        if not token or any(c.isspace() for c in token):
            raise ConfigError("the bearer token must be non-empty and contain no whitespace")
        return token

    def resolved_tokens(self) -> Tokens:
        """Every configured token and its role; raises :class:`ConfigError` (unreadable
        file, no token that may write, one token given two roles)."""
        return build_tokens(
            all_roles=self.resolved_token(),
            read=_maybe(self.read_token_file, "read token file"),
            scrape=_maybe(self.scrape_token_file, "scrape token file"),
            ingest=(
                read_ingest_tokens(self.ingest_tokens_file)
                if self.ingest_tokens_file is not None
                else None
            ),
        )


def _maybe(path: Path | None, what: str) -> str | None:
    return None if path is None else read_token_file(path, what)
