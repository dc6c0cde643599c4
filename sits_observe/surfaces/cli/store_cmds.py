"""CLI: store upkeep (``export``, ``retention``, ``tables``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from sits_observe.store import RetentionSettings, Store, enforce_retention
from sits_observe.surfaces.cli.common import OutputFormat, out, print_rows, run_cli

_DB = typer.Option(..., "--db", help="DuckDB file")


def register(app: typer.Typer) -> None:
    """Add the store commands to ``app``."""

    @app.command("export")
    def export(
        table: str = typer.Argument(..., help="table to export, e.g. gpu_samples"),
        dest: Path = typer.Argument(..., help="Parquet file to write"),
        db: Path = _DB,
    ) -> None:
        """Write one table of the store to a Parquet file."""

        def go() -> None:
            with Store.open(db, read_only=True) as store:
                rows = store.export_parquet(table, dest)
            out.print(f"wrote {rows} rows of {table} to {dest}")

        run_cli(go)

    @app.command("tables")
    def tables(
        db: Path = _DB,
        fmt: OutputFormat = typer.Option(OutputFormat.table, "--format"),
    ) -> None:
        """List the store's tables and row counts."""

        def go() -> None:
            with Store.open(db, read_only=True) as store:
                from sits_observe.domain.tables import TABLES
                from sits_observe.store.duck import EXTRA_TABLES

                rows = [
                    {"table": name, "rows": store.count(name)} for name in [*TABLES, *EXTRA_TABLES]
                ]
            print_rows(rows, fmt, title=str(db))

        run_cli(go)

    @app.command("schema")
    def schema() -> None:
        """Print the store's table contract as Markdown (the body of docs/schema.md)."""
        from sits_observe.domain.schema.describe import schema_markdown

        typer.echo(schema_markdown())

    @app.command("retention")
    def retention(
        db: Path = _DB,
        *,
        raw_retention_s: float = typer.Option(
            RetentionSettings().raw_retention_s, help="seconds of raw samples kept"
        ),
        rollup_retention_s: float = typer.Option(
            RetentionSettings().rollup_retention_s, help="seconds of 1-minute rollups kept"
        ),
        requests_retention_s: float = typer.Option(
            RetentionSettings().requests_retention_s, help="seconds of request records kept"
        ),
        other_retention_s: float = typer.Option(
            RetentionSettings().other_retention_s,
            help=RetentionSettings.model_fields["other_retention_s"].description,
        ),
        ledger_retention_s: float = typer.Option(
            RetentionSettings().ledger_retention_s,
            help=RetentionSettings.model_fields["ledger_retention_s"].description,
        ),
    ) -> None:
        """Roll raw samples up to one-minute rows and delete what is past retention."""

        def go() -> None:
            settings = RetentionSettings(
                raw_retention_s=raw_retention_s,
                rollup_retention_s=rollup_retention_s,
                requests_retention_s=requests_retention_s,
                other_retention_s=other_retention_s,
                ledger_retention_s=ledger_retention_s,
            )
            with Store.open(db) as store:
                report = enforce_retention(store, datetime.now(UTC), settings)
            out.print(report)

        run_cli(go)
