"""CLI: ``sits-observe ui`` — run the Streamlit app (``dashboards/app.py``) on a data source.

The composition root of the app's process: it checks the flags, then replaces itself
(``exec``) with ``python -m streamlit run dashboards/app.py --server.port P ... -- --db FILE``
(or ``-- --service URL --token-file F``), so signals (Ctrl-C, SIGTERM) reach Streamlit
directly and no child is left behind. The token is passed
as a file name (or inherited through ``SITS_TOKEN``), never on the command line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict, Field

import sits_observe
from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli.common import err, run_cli
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags
from sits_observe.surfaces.ui.config import TOKEN_ENV, UiSettings, window_request

_FIELDS = UiSettings.model_fields
#: Where the app lives in a checkout (``pip install -e .``, as ``make`` does).
DEFAULT_APP = Path(sits_observe.__file__).resolve().parents[1] / "dashboards" / "app.py"


def streamlit_command(
    app: Path,
    *,
    port: int,
    host: str,
    db: Path | None,
    service: str | None,
    token_file: Path | None,
    since: str | None = None,
    until: str | None = None,
    slo_ms: float | None = None,
    trace_nodes: Path | None = None,
    trace_pods: Path | None = None,
) -> list[str]:
    """The command line that serves ``app`` on ``host:port`` reading ``db`` or ``service``."""
    if (db is None) == (service is None):
        raise ConfigError("give exactly one data source: --db FILE or --service URL")
    if db is not None and not db.exists():
        raise ConfigError(f"database {db} does not exist; give the --db of an ingest or serve")
    window_request(  # refused here, in one line, rather than on every page
        _FIELDS["since"].default if since is None else since,
        _FIELDS["until"].default if until is None else until,
    )
    if not app.is_file():
        raise ConfigError(f"Streamlit app {app} not found; pass --app PATH/TO/dashboards/app.py")
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--",
    ]
    if db is not None:
        command += ["--db", str(db)]
    else:
        assert service is not None
        command += ["--service", service]
        if token_file is not None:
            command += ["--token-file", str(token_file)]
    if since is not None:
        command += ["--since", since]
    if until is not None:
        command += ["--until", until]
    if slo_ms is not None:
        command += ["--slo-ms", str(slo_ms)]
    for flag, path in (("--trace-nodes", trace_nodes), ("--trace-pods", trace_pods)):
        if path is not None:
            command += [flag, str(path)]
    return command


class UiServerSettings(BaseModel):
    """Where the app's Streamlit server listens and which script it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(8501, ge=1, le=65535, description="port of the app (Streamlit's own)")
    host: str = Field("127.0.0.1", min_length=1, description="address the app listens on")
    app_path: Path = Field(
        DEFAULT_APP, description="the Streamlit script", json_schema_extra={"flag": "--app"}
    )


#: ``ui``'s settings flags: the server's, and the pages' defaults (the app reads the same
#: model; the data source is the command's own --db / --service).
SERVER = SettingFlags(UiServerSettings)
PAGES = SettingFlags(
    UiSettings, only=("since", "until", "slo_ms", "trace_nodes", "trace_pods"), panel="Pages"
)


def register(app: typer.Typer) -> None:
    """Add ``ui`` to ``app``."""
    app.command("ui", cls=SectionedCommand)(ui)


@with_flags(SERVER, PAGES)
def ui(
    *,
    db: Path | None = typer.Option(None, "--db", help="DuckDB file (read-only)"),
    service: str | None = typer.Option(
        None, "--service", help="URL of a running `sits-observe serve` (reads through it)"
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", help=f"the service's bearer token file; else ${TOKEN_ENV}"
    ),
    **flags: Any,
) -> None:
    """Serve the Streamlit app: fleet, heatmap, fragmentation, what-if, decisions."""

    def go() -> None:
        server = SERVER.validate(flags, what="ui")
        pages = PAGES.values(flags)  # validated by the app (UiSettings), with the source
        command = streamlit_command(
            server.app_path,
            port=server.port,
            host=server.host,
            db=db,
            service=service,
            token_file=token_file,
            since=pages["since"],
            until=pages["until"],
            slo_ms=pages["slo_ms"],
            trace_nodes=pages["trace_nodes"],
            trace_pods=pages["trace_pods"],
        )
        err.print(f"serving the app on http://{server.host}:{server.port} (Ctrl-C stops it)")
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(command[0], command)

    run_cli(go)
