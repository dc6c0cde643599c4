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

import typer

import sits_observe
from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli.common import err, run_cli
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
    return command


def register(app: typer.Typer) -> None:
    """Add ``ui`` to ``app``."""

    @app.command("ui")
    def ui(
        *,
        db: Path | None = typer.Option(None, "--db", help="DuckDB file (read-only)"),
        service: str | None = typer.Option(
            None, "--service", help="URL of a running `sits-observe serve` (reads through it)"
        ),
        token_file: Path | None = typer.Option(
            None, "--token-file", help=f"the service's bearer token file; else ${TOKEN_ENV}"
        ),
        port: int = typer.Option(8501, "--port", min=1, max=65535, help="port of the app"),
        host: str = typer.Option("127.0.0.1", "--host", help="address the app listens on"),
        since: str | None = typer.Option(
            None,
            "--since",
            help=f"{_FIELDS['since'].description} [default: {_FIELDS['since'].default}]",
        ),
        until: str | None = typer.Option(
            None,
            "--until",
            help=f"{_FIELDS['until'].description} [default: {_FIELDS['until'].default}]",
        ),
        slo_ms: float | None = typer.Option(None, "--slo-ms", help=_FIELDS["slo_ms"].description),
        app_path: Path = typer.Option(DEFAULT_APP, "--app", help="the Streamlit script"),
    ) -> None:
        """Serve the Streamlit app: fleet, heatmap, fragmentation, what-if, decisions."""

        def go() -> None:
            command = streamlit_command(
                app_path,
                port=port,
                host=host,
                db=db,
                service=service,
                token_file=token_file,
                since=since,
                until=until,
                slo_ms=slo_ms,
            )
            err.print(f"serving the app on http://{host}:{port} (Ctrl-C stops it)")
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(command[0], command)

        run_cli(go)
