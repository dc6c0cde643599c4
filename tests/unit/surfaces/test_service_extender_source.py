"""Where ``serve``'s extender builds its view from: the store, or a PromQL URL."""

from __future__ import annotations

from pathlib import Path

from sits_observe.control.extender_source import DuckViewSource
from sits_observe.control.extender_source_promql import PromQLViewSource
from sits_observe.control.extender_view import ViewSettings
from sits_observe.store import Store
from sits_observe.surfaces.service.extender import view_source


def test_the_service_reads_the_store_unless_given_a_promql_url(tmp_path: Path) -> None:
    with Store.open(tmp_path / "view.duckdb") as store:
        assert isinstance(view_source(store, ViewSettings()), DuckViewSource)
        settings = ViewSettings(promql_url="http://127.0.0.1:9", max_snapshot_age_s=120)
        source = view_source(store, settings)
    assert isinstance(source, PromQLViewSource)
    assert source.client.base_url == "http://127.0.0.1:9"
    source.client.close()
