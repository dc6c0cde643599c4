"""``sits-observe ui``: the Streamlit command line it runs, and its refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli.ui import DEFAULT_APP, streamlit_command


def test_the_command_serves_the_app_on_the_port_with_the_source(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    db.touch()
    command = streamlit_command(
        DEFAULT_APP, port=8600, host="127.0.0.1", db=db, service=None, token_file=None
    )
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(DEFAULT_APP)]
    assert command[command.index("--server.port") + 1] == "8600"
    assert command[command.index("--") + 1 :] == ["--db", str(db)]
    remote = streamlit_command(
        DEFAULT_APP,
        port=1,
        host="0.0.0.0",
        db=None,
        service="http://svc:8080",
        token_file=Path("t"),
        since="1h",
        until="newest",
    )
    assert remote[remote.index("--") + 1 :] == [
        "--service", "http://svc:8080", "--token-file", "t", "--since", "1h", "--until", "newest",
    ]  # fmt: skip


def test_one_source_exactly_and_it_must_exist(tmp_path: Path) -> None:
    kw = {"port": 1, "host": "h", "token_file": None}
    with pytest.raises(ConfigError, match="exactly one"):
        streamlit_command(DEFAULT_APP, db=None, service=None, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="does not exist"):
        streamlit_command(DEFAULT_APP, db=tmp_path / "no", service=None, **kw)  # type: ignore[arg-type]


def test_a_bad_window_is_refused_before_streamlit_starts(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    db.touch()
    kw = {"port": 1, "host": "h", "db": db, "service": None, "token_file": None}
    with pytest.raises(ConfigError, match="--since 'soon' is not a positive duration"):
        streamlit_command(DEFAULT_APP, since="soon", **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--until 'later' is not now, newest"):
        streamlit_command(DEFAULT_APP, until="later", **kw)  # type: ignore[arg-type]
