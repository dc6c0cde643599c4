"""Windows from every serving engine of the mapping table, stored in a DuckDB file and read
by the ``latency`` report (--source estimate): the reports read server_windows the same way
whichever engine wrote it (fixtures: tests/engine_expositions.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from sits_observe.collectors.inference.engine import EngineCollector
from sits_observe.domain.tables import SERVER_WINDOWS
from sits_observe.reports.serving import latency
from sits_observe.reports.window import Window
from sits_observe.store import Store
from tests.engine_expositions import LAYOUTS, FakeEngine

T0 = datetime(2026, 6, 1, 8, 0, 0)


def test_the_latency_report_reads_every_engines_windows(tmp_path: Path) -> None:
    truth: dict[str, float] = {}
    with Store.open(tmp_path / "obs.duckdb") as store:
        for engine, layout in sorted(LAYOUTS.items()):
            model = f"{engine}-model"
            fake = FakeEngine(layout, model=model)
            collector = EngineCollector("http://unused", engine)
            fake.serve(100)
            collector.collect_text(fake.exposition(), T0)
            e2e, _, _ = fake.serve(300)
            result = collector.collect_text(fake.exposition(), T0 + timedelta(seconds=30))
            store.append(SERVER_WINDOWS.name, result.tables[SERVER_WINDOWS.name])
            truth[model] = float(np.quantile(e2e, 0.95, method="inverted_cdf"))
        query = latency.LatencyQuery(source=latency.LatencySource.estimate)
        report = latency.build(store, Window(None, T0 + timedelta(minutes=1), "given"), query)
    rows = {r["model"]: r for r in report.main.rows.to_pylist()}
    assert set(rows) == set(truth)
    for model, p95 in truth.items():
        row = rows[model]
        assert row["count"] == 300
        assert abs(row["p95_s"] - p95) <= row["error_bound_s"], (model, row)
        assert row["estimate"] is True
