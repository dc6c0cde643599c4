"""Exact quantiles against LLMPerf's own published summaries (ray-project/llmperf-leaderboard).

The flat CSV is imported with the production request-log reader into a DuckDB file; every
published end-to-end, time-to-first-token and inter-token quantile (P25 ... P99) of every
provider must come back to the last bit, or within one unit in the last place where numpy
(which LLMPerf used) rounds the interpolation from the other side (see
sits_observe.analytics.serving.latency). SOURCES.md of the trace: a request with a non-empty
``error_code`` failed and is outside the summaries.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sits_observe.analytics.serving.latency import Metric, exact_quantiles, quantile_column
from sits_observe.collectors.inference.request_log import read_request_log
from sits_observe.store import Store

pytestmark = pytest.mark.shared_data

QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
METRICS: dict[str, Metric] = {
    "end_to_end_latency_s": "latency_s",
    "ttft_s": "ttft_s",
    "inter_token_latency_s": "inter_token_s",
}


@pytest.fixture
def llmperf_store(shared_data: Path, tmp_path: Path) -> Store:
    trace = shared_data / "traces" / "llmperf-leaderboard" / "llmperf_requests_flat_7b.csv"
    result = read_request_log(
        trace,
        model_column="provider",
        latency_column="end_to_end_latency_s",
        status_column="error_code",
        ttft_column="ttft_s",
        inter_token_column="inter_token_latency_s",
        now=datetime(2024, 1, 9, tzinfo=UTC),
    )
    assert not result.dropped
    store = Store.open(tmp_path / "llmperf.duckdb")
    store.append("requests", result.tables["requests"])
    return store


def summaries(shared_data: Path) -> dict[str, dict[str, object]]:
    folder = shared_data / "traces" / "llmperf-leaderboard" / "summary"
    out = {}
    for path in sorted(folder.glob("*.json")):
        summary = json.loads(path.read_text())
        out[str(summary["framework"])] = summary
    return out


def test_every_published_quantile_is_reproduced(llmperf_store: Store, shared_data: Path) -> None:
    published = summaries(shared_data)
    assert set(published) == {"anyscale", "fireworks", "lepton", "replicate", "together"}
    compared = bit_equal = 0
    for column, metric in METRICS.items():
        rows = exact_quantiles(llmperf_store, metric=metric, quantiles=QUANTILES).to_pylist()
        by_provider = {r["model"]: r for r in rows}
        assert set(by_provider) == set(published)
        for provider, summary in published.items():
            ours = by_provider[provider]
            assert ours["count"] == summary["results_num_completed_requests"]
            for q in QUANTILES:
                theirs = float(summary[f"results_{column}_quantiles_p{round(q * 100)}"])
                got = ours[quantile_column(q)]
                assert abs(got - theirs) <= math.ulp(theirs), (provider, column, q, got, theirs)
                compared += 1
                bit_equal += got == theirs
    assert compared == 5 * 3 * 6
    # numpy rounds from the upper neighbour for weights >= 0.5; a handful differ in the last bit
    assert bit_equal >= compared - 10


def test_failed_requests_are_the_published_errors(llmperf_store: Store, shared_data: Path) -> None:
    published = summaries(shared_data)
    failed = llmperf_store.query(
        "SELECT model, count(*) FILTER (WHERE NOT ok) AS errors FROM requests GROUP BY model"
    ).to_pylist()
    assert {r["model"]: r["errors"] for r in failed} == {
        p: s["results_number_errors"] for p, s in published.items()
    }
