"""The Streamlit app reading through a real service (uvicorn on loopback) instead of a file.

The service owns the DuckDB file; the app asks it for each report
(``GET /api/v1/reports/{name}``) and must show the same values as when it reads the file.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.reading import ServiceReader, StoreReader, open_reader
from tests.unit.surfaces.test_ui_pages import SINCE, app_on, fill_store, frames, metrics, page

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


def test_the_reader_gives_the_report_the_file_gives(service: str, tmp_path: Path) -> None:
    file = tmp_path / "same.duckdb"
    with Store.open(file) as store:
        fill_store(store)
    remote = UiSettings.model_validate({"service": service, "token": TOKEN})
    local = UiSettings.model_validate({"db": file, "since": SINCE, "until": "newest"})
    request = local.window()  # until the newest sample: both read the same window
    with open_reader(remote, request) as by_service, open_reader(local, request) as by_file:
        assert isinstance(by_service, ServiceReader) and isinstance(by_file, StoreReader)
        for name in ("fleet", "decisions"):
            got, want = by_service.report(name), by_file.report(name)
            assert got.main.records() == want.main.records()
            assert [t.records() for t in got.others] == [t.records() for t in want.others]


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
    # The safe maximum needs an SLO (there is no default one): 1 s, as the fill's servers have.
    at = app_on(
        monkeypatch,
        SITS_UI_SERVICE=service,
        SITS_UI_TOKEN_FILE=str(token_file),
        SITS_UI_SLO_MS="1000",
    )
    at = page(at, "fleet")
    assert metrics(at)["GPU utilisation"] == "37.5%"
    assert metrics(at)["Allocated GPUs"] == "1"
    assert frames(at)[3][["collector", "dropped"]].values.tolist() == [["dcgm", "7"]]
    at = page(at, "heatmap")
    assert metrics(at) == {
        "Requests": "525",
        "Knee": "30/s",
        "Safe max throughput": "40/s",
        "P95 SLO": "1.00s",
    }
    at = page(at, "fragmentation")
    assert metrics(at)["Fragmentation ratio"] == "33.3%"
    assert "50%" in frames(at)[3].to_numpy().ravel().tolist()  # SMF of node-a/0
    at = page(at, "decisions")
    assert frames(at)[1]["decisions"].tolist() == ["1", "2"]
    # One filter value travels as one query parameter, still a list to the report.
    at.multiselect(key="outcomes").set_value(["recommended"]).run()
    assert not at.error, [e.value for e in at.error]
    assert frames(at)[2]["object"].tolist() == ["node/node-b", "node/node-a"]
