"""``serve`` binds its ports before it creates anything: a port in use is one line, exit 2,
and no database file (real sockets on loopback, a real file path in tmp_path)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sits_observe.surfaces.cli import serve


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    serve.register(app)

    @app.command("other")
    def other() -> None:  # a second command, so typer keeps the "serve" subcommand
        """Unused."""

    return app


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def run(app: typer.Typer, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"SITS_TOKEN": "abc", "COLUMNS": "200"})
    return result.exit_code, result.output


def test_a_port_in_use_is_one_line_and_leaves_no_database(
    app: typer.Typer, tmp_path: Path, taken_port: int
) -> None:
    db = tmp_path / "new" / "s.duckdb"
    code, output = run(app, "serve", "--db", str(db), "--port", str(taken_port))
    assert code == 2, output
    assert f"cannot listen on 127.0.0.1:{taken_port}" in output and "--port" in output
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output
    assert not db.exists() and not db.parent.exists()


def test_an_extender_port_in_use_is_refused_the_same_way(
    app: typer.Typer, tmp_path: Path, taken_port: int
) -> None:
    db = tmp_path / "s.duckdb"
    args = ["serve", "--db", str(db), "--port", "0", "--extender-port", str(taken_port)]
    code, output = run(app, *args)
    assert code == 2 and "--extender-port" in output, output
    assert not db.exists()


def test_the_extender_port_must_differ_from_the_port(app: typer.Typer, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code, output = run(app, "serve", "--db", str(db), "--port", "8081", "--extender-port", "8081")
    assert code == 2 and "--extender-port must differ from --port" in output
    assert not db.exists()


def test_an_unreadable_token_file_stops_before_binding(app: typer.Typer, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    missing = tmp_path / "nope"
    code, output = run(app, "serve", "--db", str(db), "--ingest-tokens-file", str(missing))
    assert code == 2 and "cannot read ingest tokens file" in output
    assert not db.exists()
