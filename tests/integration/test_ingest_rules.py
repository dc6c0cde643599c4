"""What the service accepts and stores, over real HTTP: the range rules, future rows, batch
digests, duplicated columns and strict JSON answers (issue 9).

The service runs under uvicorn on loopback over a DuckDB file in ``tmp_path``, with an
injected clock, so "the future" is exactly ``NOW + max_future_skew_s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sits_observe.collectors.agent.wire import CONTENT_TYPE, encode_batch
from sits_observe.store import Store
from sits_observe.surfaces.service.settings import ServiceSettings
from tests.integration.service_support import ServedApp, strict_json

TOKEN = "ingest-rules-token"
NOW = datetime(2026, 11, 1, 12, 5, tzinfo=UTC)
NOW_NAIVE = NOW.replace(tzinfo=None)
T0 = NOW_NAIVE - timedelta(minutes=1)


def settings(**values: Any) -> ServiceSettings:
    return ServiceSettings.model_validate({"token": TOKEN, "retention_interval_s": 0, **values})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "rules.duckdb") as s:
        yield s


@pytest.fixture
def served(store: Store) -> Iterator[ServedApp]:
    with ServedApp(store, settings(), clock=lambda: NOW) as app:
        yield app


def post(served: ServedApp, body: bytes, batch_id: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": CONTENT_TYPE,
        "X-Sits-Batch-Id": batch_id,
        "X-Sits-Node": "n1",
    }
    return httpx.post(served.url + "/api/v1/ingest", content=body, headers=headers, timeout=30)


def read(served: ServedApp, path: str, **params: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.get(served.url + path, params=params, headers=auth, timeout=30)


def requests_table(
    ts: list[datetime | None], latency_s: list[float], **more: list[Any]
) -> pa.Table:
    n = len(ts)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "model": more.pop("model", ["llama"] * n),
            "latency_s": latency_s,
            **more,
        }
    )


def gpu_table(**columns: list[Any]) -> pa.Table:
    n = len(next(iter(columns.values())))
    return pa.table({"ts": pa.array([T0] * n, pa.timestamp("us")), "node": ["n1"] * n, **columns})


# -- item 7: a duplicated column name -----------------------------------------------------


def test_a_duplicated_column_name_is_400_and_counted(served: ServedApp, store: Store) -> None:
    doubled = pa.Table.from_arrays(
        [pa.array([T0], pa.timestamp("us")), pa.array([1]), pa.array([2])],
        names=["ts", "fb_used_bytes", "fb_used_bytes"],
    )
    answer = post(served, encode_batch({"gpu_samples": doubled}), "dup-col")
    assert answer.status_code == 400, answer.text
    body = strict_json(answer.text)
    assert body["reason"] == "schema" and "fb_used_bytes" in body["detail"]
    assert served.metric("sits_ingest_rejected_total", reason="schema") == 1
    assert store.count("gpu_samples") == 0 and store.count("ingest_batches") == 0
    ok = post(served, encode_batch({"gpu_samples": gpu_table(fb_used_bytes=[1])}), "after")
    assert ok.status_code == 200


# -- item 9: the collectors' range rules, applied again at ingest ---------------------------


def test_rows_the_collectors_would_drop_are_dropped_counted_and_reported(
    served: ServedApp, store: Store
) -> None:
    requests = requests_table(
        [T0, T0, T0, T0, None, T0],
        [0.2, math.nan, math.inf, -0.5, 0.3, 0.4],
        ttft_s=[0.05, 0.01, 0.01, 0.01, 0.01, -1.0],
    )
    gpus = gpu_table(
        gpu_uuid=["GPU-a", "GPU-b", "GPU-c"],
        fb_used_bytes=[-(2**30), 2**30, 2**31],
        gpu_util_ratio=[0.5, 55.0, 0.25],
    )
    body = encode_batch({"requests": requests, "gpu_samples": gpus})
    answer = post(served, body, "bad-values")
    assert answer.status_code == 200, answer.text
    dropped = {
        "gpu_samples.fb_used_bytes:negative": 1,
        "gpu_samples.gpu_util_ratio:above_max": 1,
        "requests.latency_s:negative": 1,
        "requests.latency_s:non_finite": 2,
        "requests.ts:missing": 1,
        "requests.ttft_s:negative": 1,
    }
    assert strict_json(answer.text) == {
        "batch_id": "bad-values",
        "rows": 2 + 3 + len(dropped),  # kept requests, GPU rows, one drop row per reason
        "duplicate": False,
        "dropped": dropped,
    }
    # Bad rows are gone; bad optional values are NULL, as the collectors store them.
    kept = store.query("SELECT latency_s, ttft_s FROM requests ORDER BY latency_s").to_pylist()
    assert kept == [{"latency_s": 0.2, "ttft_s": 0.05}, {"latency_s": 0.4, "ttft_s": None}]
    gpu = store.query(
        "SELECT gpu_uuid, fb_used_bytes, gpu_util_ratio FROM gpu_samples ORDER BY gpu_uuid"
    ).to_pylist()
    assert gpu == [
        {"gpu_uuid": "GPU-a", "fb_used_bytes": None, "gpu_util_ratio": 0.5},
        {"gpu_uuid": "GPU-b", "fb_used_bytes": 2**30, "gpu_util_ratio": None},
        {"gpu_uuid": "GPU-c", "fb_used_bytes": 2**31, "gpu_util_ratio": 0.25},
    ]
    drops = store.query(
        "SELECT ts, node, collector, reason, count FROM collector_drops ORDER BY reason"
    ).to_pylist()
    assert drops == [
        {"ts": NOW_NAIVE, "node": "n1", "collector": "ingest", "reason": r, "count": n}
        for r, n in sorted(dropped.items())
    ]
    metric = "sits_ingest_rows_dropped_total"
    assert served.metric(metric, table="requests", reason="latency_s:non_finite") == 2
    assert served.metric(metric, table="gpu_samples", reason="fb_used_bytes:negative") == 1
    # A replay stores nothing, so it neither stores nor counts its drops again.
    again = post(served, body, "bad-values")
    assert strict_json(again.text)["duplicate"] is True
    assert strict_json(again.text)["dropped"] == {}
    assert store.count("collector_drops") == len(dropped)
    assert served.metric(metric, table="requests", reason="latency_s:non_finite") == 2


# -- item 10: rows from the future, and windows that end at now -----------------------------


def test_future_and_epoch_zero_rows_are_dropped(served: ServedApp, store: Store) -> None:
    future = datetime(2100, 1, 1)
    rows = requests_table(
        [future, future, future, NOW_NAIVE + timedelta(seconds=299), datetime(1970, 1, 1), T0],
        [99.0, 99.0, 99.0, 0.1, 0.1, 0.1],
        model=["future-model"] * 3 + ["now-model"] * 3,
    )
    answer = post(served, encode_batch({"requests": rows}), "future")
    assert answer.status_code == 200, answer.text
    assert strict_json(answer.text)["dropped"] == {
        "requests.ts:future": 3,
        "requests.ts:too_old": 1,
    }
    assert store.scalar("SELECT count(*) FROM requests WHERE model = 'future-model'") == 0
    assert store.count("requests") == 2
    scrape = httpx.get(served.url + "/metrics", timeout=30).text
    assert 'model="future-model"' not in scrape


def test_the_future_skew_is_a_setting(store: Store) -> None:
    rows = requests_table([NOW_NAIVE + timedelta(seconds=2), NOW_NAIVE], [0.1, 0.1])
    with ServedApp(store, settings(max_future_skew_s=1), clock=lambda: NOW) as served:
        answer = post(served, encode_batch({"requests": rows}), "skew")
    assert strict_json(answer.text)["dropped"] == {"requests.ts:future": 1}
    assert store.count("requests") == 1


def latency_samples(text: str, model: str) -> list[float]:
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sits_latency_seconds" and sample.labels.get("model") == model
    ]


def test_rows_already_stored_in_the_future_are_in_no_window(store: Store) -> None:
    """Rows stored before the rules existed (or by a local ``ingest``): the exporter's
    windows are [now - window, now], so a 2100 row never holds a latency signal."""
    future = datetime(2100, 1, 1)
    store.append(
        "requests",
        requests_table(
            [future] * 3 + [T0], [99.0] * 3 + [0.25], model=["future-model"] * 3 + ["m"]
        ),
    )
    with ServedApp(store, settings(), clock=lambda: NOW) as served:
        scrape = httpx.get(served.url + "/metrics", timeout=30).text
    assert latency_samples(scrape, "future-model") == []
    assert 0.25 in latency_samples(scrape, "m")


# -- item 12: one batch id, one body --------------------------------------------------------


def test_the_same_batch_id_with_another_body_is_409(served: ServedApp, store: Store) -> None:
    first = encode_batch({"gpu_samples": gpu_table(fb_used_bytes=[1, 2])})
    other = encode_batch({"gpu_samples": gpu_table(fb_used_bytes=[7, 8, 9])})
    assert post(served, first, "b-1").status_code == 200
    assert strict_json(post(served, first, "b-1").text)["duplicate"] is True
    conflict = post(served, other, "b-1")
    assert conflict.status_code == 409, conflict.text
    body = strict_json(conflict.text)
    assert body["reason"] == "conflict" and "b-1" in body["detail"]
    assert served.metric("sits_ingest_rejected_total", reason="conflict") == 1
    assert store.query("SELECT fb_used_bytes FROM gpu_samples ORDER BY 1").column(
        0
    ).to_pylist() == [
        1,
        2,
    ]
    assert store.scalar("SELECT rows FROM ingest_batches WHERE batch_id = 'b-1'") == 2


# -- item 13: strict JSON answers -----------------------------------------------------------


def test_json_rows_with_non_finite_values_are_strict_json(served: ServedApp, store: Store) -> None:
    store.append(  # stored directly: the ingest rules would have NULLed these already
        "gpu_samples",
        gpu_table(gpu_util_ratio=[math.nan, 0.5], power_w=[math.inf, -math.inf]),
    )
    answer = read(served, "/api/v1/tables/gpu_samples", format="json")
    assert answer.status_code == 200
    rows = strict_json(answer.text)
    assert [(r["gpu_util_ratio"], r["power_w"]) for r in rows] == [(None, None), (0.5, None)]
    missing = read(served, "/api/v1/tables/nope")
    assert missing.status_code == 404 and strict_json(missing.text)["reason"] == "unknown_table"


def test_extender_answers_are_strict_json(served: ServedApp) -> None:
    """Node objects are echoed as received; a NaN in one must not break kube-scheduler's
    Go JSON decoder."""
    body = (
        b'{"Pod": {"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": []}},'
        b' "Nodes": {"items": [{"metadata": {"name": "n1"},'
        b' "status": {"x": NaN, "y": -Infinity}}]},'
        b' "NodeNames": null}'
    )
    answer = httpx.post(
        served.url + "/scheduler/filter",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 200
    result = strict_json(answer.text)
    assert result["Nodes"]["items"][0]["status"] == {"x": None, "y": None}
