"""Typed settings of the central service; the ``serve`` CLI builds them from its flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from sits_observe.errors import ConfigError
from sits_observe.store import RetentionSettings

MIB = 1024 * 1024


class ServiceSettings(BaseModel):
    """Where the service listens, what it accepts, and how it keeps the store bounded."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("127.0.0.1", min_length=1, description="address to listen on")
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on (0 = any free)")
    db_path: Path = Field(Path("sits.duckdb"), description="DuckDB file the service owns")
    token: SecretStr | None = Field(
        None, description="bearer token every client must send (or use token_file)"
    )
    token_file: Path | None = Field(
        None, description="file holding the bearer token (whitespace around it is ignored)"
    )
    max_body_bytes: int = Field(
        8 * MIB,
        ge=1024,
        le=1024 * MIB,
        description="largest ingest body accepted, in bytes; larger ones get HTTP 413",
    )
    retention_interval_s: float = Field(
        300.0, ge=0, le=86400, description="seconds between retention runs (0 = never)"
    )
    retention: RetentionSettings = Field(
        default_factory=RetentionSettings, description="how long each kind of data is kept"
    )
    read_max_rows: int = Field(
        1_000_000, ge=1, le=100_000_000, description="most rows one read request returns"
    )

    def resolved_token(self) -> str:
        """The bearer token, from ``token`` or ``token_file``; raises :class:`ConfigError`."""
        if self.token is not None and self.token_file is not None:
            raise ConfigError("give the token or a token file, not both")
        if self.token is not None:
            token = self.token.get_secret_value().strip()
        elif self.token_file is not None:
            try:
                token = self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read token file {self.token_file}: {exc.strerror or exc}"
                ) from exc
        else:
            raise ConfigError(
                "no bearer token: pass --token-file FILE or set SITS_TOKEN; "
                "the service never accepts unauthenticated writes"
            )
        if not token or any(c.isspace() for c in token):
            raise ConfigError("the bearer token must be non-empty and contain no whitespace")
        return token
