"""Settings of the long-running processes themselves (``serve``, ``agent``, ``controller``):
how they log and where they serve their own ``/metrics``.

Pure pydantic, so the node agent's slim install can build its flags from them too; the
commands take them through :mod:`.flags` like any other settings model.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LogLevel = Literal["debug", "info", "warning", "error"]


class LogSettings(BaseModel):
    """How a process writes its diagnostics (stderr, one line each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    log_level: LogLevel = Field("info", description="lowest level of the lines logged")

    def configure(self) -> None:
        """Diagnostics to stderr, one line each, with the time, level and logger name."""
        logging.basicConfig(
            level=self.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )


class MetricsEndpointSettings(BaseModel):
    """Where a process serves its own Prometheus ``/metrics`` (off unless a port is given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve this process's own Prometheus /metrics on this port (none or 0: off)",
    )
    metrics_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="address of that /metrics (0.0.0.0 to be scraped from other pods)",
    )

    @property
    def enabled(self) -> bool:
        """Whether a port was given (0 means off, as it always has for ``controller``)."""
        return bool(self.metrics_port)
