"""Shared pieces of the ``--promql-url`` flag of the analysis commands (docs/scaling.md).

With ``--promql-url`` an analysis reads GPU samples (dcgm-exporter series) or latency
histograms (vLLM series) from a Prometheus-compatible store instead of ``--db``. The window is
``--since DUR`` back from now (a PromQL store has no "newest row" to count from cheaply), and
``--promql-step-s`` chooses raw samples (default) or the store's step grid (cheaper for long
windows, see the step-alignment note in docs/scaling.md).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from sits_observe.errors import ConfigError
from sits_observe.store.promql import PromQLClient
from sits_observe.surfaces.cli.common import err, parse_duration_s

URL_HELP = (
    "read the series from this Prometheus-compatible query URL (VictoriaMetrics, Thanos, "
    "Mimir, Prometheus) instead of --db; needs --since"
)
STEP_HELP = "with --promql-url: read one point per STEP seconds instead of every raw sample"
MATCHERS_HELP = 'with --promql-url: extra label matchers for every series, e.g. job="dcgm"'


#: The options (typer accepts one option object in several commands, as ``--db`` does).
PROMQL_URL = typer.Option(None, "--promql-url", help=URL_HELP)
PROMQL_STEP_S = typer.Option(None, "--promql-step-s", min=0.001, help=STEP_HELP)
PROMQL_MATCHERS = typer.Option("", "--promql-matchers", help=MATCHERS_HELP)


def check_db_or_url(db: Path | None, url: str | None) -> None:
    """Exactly one of ``--db`` and ``--promql-url``."""
    if (db is None) == (url is None):
        raise ConfigError("give exactly one of --db (a DuckDB file) and --promql-url (a URL)")


def promql_window(since: str | None, now: datetime | None = None) -> tuple[datetime, datetime]:
    """``[now - since, now)`` as naive UTC; ``--since`` is required with ``--promql-url``."""
    if since is None:
        raise ConfigError("--promql-url needs --since DUR (e.g. 1h): the window to read")
    until = (now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    start = until - timedelta(seconds=parse_duration_s(since))
    err.print(f"window: {start.isoformat(sep=' ')} .. {until.isoformat(sep=' ')} UTC (PromQL)")
    return start, until


def open_promql(url: str) -> PromQLClient:
    """A client of ``url`` (closed by the caller, e.g. ``with open_promql(url) as c``)."""
    return PromQLClient(url)
