"""Where ``serve``'s extender builds its view from: the store, or a PromQL URL."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sits_observe.control.extender.clusterview.source import DuckViewSource
from sits_observe.control.extender.clusterview.source_promql import PromQLViewSource
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.store import Store
from sits_observe.surfaces.service.app import create_app
from sits_observe.surfaces.service.extender import ExtenderSettings, view_source
from sits_observe.surfaces.service.settings import ServiceSettings


def test_the_service_reads_the_store_unless_given_a_promql_url(tmp_path: Path) -> None:
    with Store.open(tmp_path / "view.duckdb") as store:
        assert isinstance(view_source(store, ViewSettings()), DuckViewSource)
        settings = ViewSettings(promql_url="http://127.0.0.1:9", max_snapshot_age_s=120)
        source = view_source(store, settings)
    assert isinstance(source, PromQLViewSource)
    assert source.client.base_url == "http://127.0.0.1:9"
    source.client.close()


@pytest.mark.parametrize("extender_port", [None, 0], ids=["same-port", "own-port"])
def test_shutdown_closes_the_views_promql_client(tmp_path: Path, extender_port: int | None) -> None:
    extender = ExtenderSettings(view=ViewSettings(promql_url="http://127.0.0.1:9"))
    with Store.open(tmp_path / "view.duckdb") as store:
        app = create_app(
            ServiceSettings(token="t", extender_port=extender_port), store, extender=extender
        )
        holder = app if extender_port is None else app.state.extender_app
        client = holder.state.extender.source.client
        with TestClient(app):
            assert not client.closed
        assert client.closed
