"""The Streamlit app reading through a real service (uvicorn on loopback) instead of a file.

The service owns the DuckDB file; the app copies its tables over ``GET /api/v1/tables`` into
memory and must show the same values as when it reads the file directly.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.ui.source import fetch_table, snapshot_from_service
from tests.unit.surfaces.test_ui_pages import (
    T0,
    app_on,
    fill_store,
    frames,
    metrics,
    page,
    request_rows,
)

pytestmark = pytest.mark.slow
TOKEN = "ui-token-123"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[str]:
    store = Store.open(tmp_path / "service.duckdb")
    fill_store(store)
    settings = ServiceSettings.model_validate({"token": TOKEN, "retention_interval_s": 0})
    config = uvicorn.Config(create_app(settings, store), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    sock = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "service did not start"
        time.sleep(0.05)
    host, port = sock.getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        store.close()


def test_paged_reads_lose_and_double_nothing(service: str) -> None:
    """Pages of 7 rows split the 1 ms-spaced request times: every row arrives once."""
    with httpx.Client(timeout=30) as client:
        got = fetch_table(client, service, TOKEN, "requests", since=T0, page_rows=7)
    expected = request_rows()
    assert got.num_rows == len(expected)
    key = sorted((r["ts"], r["model"], r["latency_s"]) for r in expected)
    assert (
        sorted(zip(*(got.column(c).to_pylist() for c in ("ts", "model", "latency_s")), strict=True))
        == key
    )


def test_snapshot_copies_every_table_the_pages_read(service: str) -> None:
    snap = snapshot_from_service(service, TOKEN, since=T0, now=T0)
    try:
        assert snap.rows["requests"] == len(request_rows())
        assert snap.rows["gpu_samples"] == 120
        assert snap.store.count("decisions") == 3
    finally:
        snap.store.close()


def test_a_wrong_token_is_one_line_on_the_page(
    service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "bad-token"
    token_file.write_text("wrong\n")
    at = app_on(monkeypatch, SITS_UI_SERVICE=service, SITS_UI_TOKEN_FILE=str(token_file))
    assert not at.exception
    assert "HTTP 401" in at.error[0].value


def test_pages_read_through_the_service_show_the_file_values(
    service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    at = app_on(monkeypatch, SITS_UI_SERVICE=service, SITS_UI_TOKEN_FILE=str(token_file))
    at = page(at, "fleet")
    assert metrics(at)["Mean GPU utilisation"] == "37.5%"
    assert frames(at)[4][["collector", "dropped"]].values.tolist() == [["dcgm", 7]]
    at = page(at, "heatmap")
    assert metrics(at) == {"Requests": "525", "Knee": "30 rps", "Safe max throughput": "40 rps"}
    at = page(at, "fragmentation")
    assert metrics(at)["Fragmentation ratio"] == "33.33%"
    assert frames(at)[2]["mean_smf"].tolist() == [0.5]
    at = page(at, "decisions")
    assert frames(at)[1]["decisions"].sum() == 3
