"""The service app, built with an injected store and clock, driven in-process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from sits_observe.collectors.agent.wire import CONTENT_TYPE, decode_batch, encode_batch
from sits_observe.errors import ConfigError
from sits_observe.store import RetentionSettings, Store
from sits_observe.surfaces.service import ServiceSettings, create_app

TOKEN = "t0ken-for-tests"
T0 = datetime(2026, 11, 1, 12, 0)


def gpu_table(n: int, start: datetime = T0, node: str = "n1") -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([start + timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
            "node": [node] * n,
            "gpu_uuid": [f"GPU-{i}" for i in range(n)],
            "fb_used_bytes": list(range(n)),
        }
    )


def headers(batch_id: str | None = None, **extra: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": CONTENT_TYPE,
        "X-Sits-Batch-Id": batch_id or uuid.uuid4().hex,
        "X-Sits-Node": "n1",
        **extra,
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def make_client(store: Store, **settings: object) -> TestClient:
    values: dict[str, object] = {"token": TOKEN, "retention_interval_s": 0, **settings}
    return TestClient(create_app(ServiceSettings.model_validate(values), store))


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with make_client(store, max_body_bytes=64 * 1024) as c:
        yield c


def metric(client: TestClient, name: str, **labels: str) -> float:
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


# -- probes ------------------------------------------------------------------------------


def test_health_and_readiness(client: TestClient, store: Store) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["db"] == store.path


def test_not_ready_before_startup(store: Store) -> None:
    client = make_client(store)  # no `with`: the lifespan has not run
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200


def test_not_ready_on_a_read_only_store(tmp_path: Path) -> None:
    Store.open(tmp_path / "ro.duckdb").close()
    with Store.open(tmp_path / "ro.duckdb", read_only=True) as ro, make_client(ro) as client:
        assert client.get("/readyz").status_code == 503
        body = encode_batch({"gpu_samples": gpu_table(1)})
        answer = client.post("/api/v1/ingest", content=body, headers=headers())
        assert answer.status_code == 503 and answer.json()["reason"] == "store"


def test_a_token_is_required_to_build_the_app(store: Store) -> None:
    with pytest.raises(ConfigError, match="SITS_TOKEN"):
        create_app(ServiceSettings(), store)


# -- ingest ------------------------------------------------------------------------------


def test_batch_is_stored_and_acknowledged_after_commit(client: TestClient, store: Store) -> None:
    requests = pa.table({"ts": [T0], "model": ["m"], "latency_s": [0.1]})
    body = encode_batch({"gpu_samples": gpu_table(3), "requests": requests})
    answer = client.post("/api/v1/ingest", content=body, headers=headers("b-1"))
    assert answer.status_code == 200
    assert answer.json() == {"batch_id": "b-1", "rows": 4, "duplicate": False, "dropped": {}}
    assert store.count("gpu_samples") == 3 and store.count("requests") == 1
    assert store.query("SELECT batch_id, node, rows FROM ingest_batches").to_pylist() == [
        {"batch_id": "b-1", "node": "n1", "rows": 4}
    ]
    assert metric(client, "sits_ingest_batches_total", result="stored") == 1
    assert metric(client, "sits_ingest_rows_total", table="gpu_samples") == 3
    assert metric(client, "sits_ingest_bytes_total") == len(body)
    assert metric(client, "sits_store_rows", table="gpu_samples") == 3


def test_bodies_are_decoded_on_one_thread_that_stops_with_the_service(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every body is decoded on the service's one decoding thread (not a pool thread per
    request, which made the group-commit writer wait longer for the GIL), and the thread
    ends when the app shuts down."""
    from sits_observe.surfaces.service import ingest

    seen: list[str] = []

    def recording(body: bytes, limits: object) -> dict[str, pa.Table]:
        seen.append(threading.current_thread().name)
        return decode_batch(body, limits)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "decode_batch", recording)
    with make_client(store) as client:
        for i in range(3):
            body = encode_batch({"gpu_samples": gpu_table(2, T0 + timedelta(minutes=i))})
            assert client.post("/api/v1/ingest", content=body, headers=headers()).status_code == 200
        decoders = [t for t in threading.enumerate() if t.name.startswith("ingest-decode")]
        assert len(decoders) == 1
    assert seen == [decoders[0].name] * 3
    decoders[0].join(timeout=5)
    assert not decoders[0].is_alive()
    assert store.count("gpu_samples") == 6


def test_a_replayed_batch_is_acknowledged_but_stored_once(client: TestClient, store: Store) -> None:
    body = encode_batch({"gpu_samples": gpu_table(2)})
    first = client.post("/api/v1/ingest", content=body, headers=headers("same"))
    again = client.post("/api/v1/ingest", content=body, headers=headers("same"))
    assert first.json()["duplicate"] is False
    assert again.status_code == 200 and again.json() == {
        "batch_id": "same",
        "rows": 2,
        "duplicate": True,
        "dropped": {},
    }
    assert store.count("gpu_samples") == 2
    assert metric(client, "sits_ingest_batches_total", result="duplicate") == 1


@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"]
)
def test_missing_or_wrong_token_is_401_with_a_challenge(
    client: TestClient, store: Store, auth: str | None
) -> None:
    h = headers()
    del h["Authorization"]
    if auth is not None:
        h["Authorization"] = auth
    answer = client.post("/api/v1/ingest", content=encode_batch({}), headers=h)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.json()["reason"] == "unauthorized"
    assert store.count("ingest_batches") == 0
    assert metric(client, "sits_ingest_rejected_total", reason="unauthorized") == 1


def test_declared_oversize_body_is_413_and_the_service_keeps_serving(
    client: TestClient, store: Store
) -> None:
    answer = client.post("/api/v1/ingest", content=b"x" * (64 * 1024 + 1), headers=headers())
    assert answer.status_code == 413 and answer.json()["reason"] == "too_large"
    assert "65536" in answer.json()["detail"]
    ok = client.post(
        "/api/v1/ingest", content=encode_batch({"gpu_samples": gpu_table(1)}), headers=headers()
    )
    assert ok.status_code == 200
    assert store.count("ingest_batches") == 1


def test_streamed_oversize_body_without_length_is_413(client: TestClient, store: Store) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b"y" * 4096

    answer = client.post("/api/v1/ingest", content=chunks(), headers=headers())
    assert answer.status_code == 413
    assert store.count("ingest_batches") == 0
    assert metric(client, "sits_ingest_rejected_total", reason="too_large") == 1


@pytest.mark.parametrize(
    ("tables", "compression", "reason"),
    [
        # 10,000,000 rows of null-type columns: a few hundred bytes on the wire
        (
            {"requests": pa.table({"ts": pa.nulls(10_000_000), "model": pa.nulls(10_000_000)})},
            None,
            "max_table_rows",
        ),
        (
            {
                name: pa.table({"ts": pa.nulls(100_000)})
                for name in ("requests", "gpu_samples", "container_samples", "numa_samples")
            },
            None,
            "max_batch_rows",
        ),
        # 2 GB of dictionary-encoded strings in a 2 KB zstd body
        (
            {
                "requests": pa.table(
                    {
                        "model": pa.DictionaryArray.from_arrays(
                            pa.array([0] * 100_000, pa.int8()), pa.array(["m" * 20_000])
                        )
                    }
                )
            },
            "zstd",
            "max_decoded_bytes",
        ),
    ],
    ids=["null-rows", "rows-over-tables", "dictionary"],
)
def test_batches_over_a_decode_limit_are_413_before_decoding(
    store: Store, tables: dict[str, pa.Table], compression: str | None, reason: str
) -> None:
    limits = {"max_table_rows": 150_000, "max_batch_rows": 300_000, "max_decoded_bytes": 2**30}
    body = encode_batch(tables, compression=compression)
    assert len(body) < 4096
    with make_client(store, **limits) as client:
        before = pa.total_allocated_bytes()
        answer = client.post("/api/v1/ingest", content=body, headers=headers())
        assert pa.total_allocated_bytes() - before < 1 << 20
        assert answer.status_code == 413
        assert answer.json()["reason"] == reason
        assert f"--{reason.replace('_', '-')}" in answer.json()["detail"]
        assert metric(client, "sits_ingest_rejected_total", reason=reason) == 1
        ok = client.post(
            "/api/v1/ingest", content=encode_batch({"gpu_samples": gpu_table(3)}), headers=headers()
        )
        assert ok.status_code == 200
    assert store.count("ingest_batches") == 1 and store.count("requests") == 0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not arrow at all", "undecodable"),
        (encode_batch({"gpu_samples": gpu_table(2)})[:-20], "undecodable"),
        (encode_batch({"gpu_sample": gpu_table(1)}), "unknown_table"),
        # controller decisions and inventory are the service's own, never an agent's
        (encode_batch({"decisions": pa.table({"action": ["x"]})}), "unknown_table"),
        (encode_batch({"pods": pa.table({"pod": ["p"]})}), "unknown_table"),
        (
            encode_batch({"gpu_samples": gpu_table(1).append_column("fb_usd", pa.array([1]))}),
            "schema",
        ),
        (encode_batch({"gpu_samples": pa.table({"fb_used_bytes": ["lots"]})}), "schema"),
    ],
    ids=[
        "garbage",
        "truncated",
        "unknown-table",
        "decisions-table",
        "pods-table",
        "unknown-column",
        "bad-type",
    ],
)
def test_bad_bodies_are_400_and_store_nothing(
    client: TestClient, store: Store, body: bytes, reason: str
) -> None:
    answer = client.post("/api/v1/ingest", content=body, headers=headers())
    assert answer.status_code == 400
    assert answer.json()["reason"] == reason
    assert store.count("ingest_batches") == 0 and store.count("gpu_samples") == 0
    assert metric(client, "sits_ingest_rejected_total", reason=reason) == 1


def test_a_bad_table_in_a_batch_rejects_the_whole_batch(client: TestClient, store: Store) -> None:
    body = encode_batch(
        {"gpu_samples": gpu_table(2), "requests": pa.table({"latency_s": ["slow"]})}
    )
    assert client.post("/api/v1/ingest", content=body, headers=headers()).status_code == 400
    assert store.count("gpu_samples") == 0


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"X-Sits-Batch-Id": ""}, 422),
        ({"X-Sits-Batch-Id": "../../etc"}, 422),
        ({"X-Sits-Batch-Id": "x" * 129}, 422),
        ({"X-Sits-Node": "node with spaces"}, 422),
        ({"Content-Type": "application/json"}, 415),
    ],
)
def test_bad_headers_and_media_types_are_refused(
    client: TestClient, store: Store, change: dict[str, str], status: int
) -> None:
    h = headers() | change
    answer = client.post("/api/v1/ingest", content=encode_batch({}), headers=h)
    assert answer.status_code == status
    assert store.count("ingest_batches") == 0


def test_missing_batch_id_header_is_422(client: TestClient) -> None:
    h = headers()
    del h["X-Sits-Batch-Id"]
    answer = client.post("/api/v1/ingest", content=encode_batch({}), headers=h)
    assert answer.status_code == 422 and "X-Sits-Batch-Id" in answer.json()["detail"]


def test_request_latency_is_observed_by_route_template(client: TestClient) -> None:
    client.get("/healthz")
    client.post("/api/v1/ingest", content=b"", headers=headers())
    assert (
        metric(client, "sits_http_request_duration_seconds_count", route="/healthz", status="2xx")
        >= 1
    )
    assert (
        metric(
            client,
            "sits_http_request_duration_seconds_count",
            route="/api/v1/ingest",
            method="POST",
            status="4xx",
        )
        == 1
    )


# -- reads -------------------------------------------------------------------------------


def test_reads_need_the_token_and_return_arrow_or_json(client: TestClient) -> None:
    client.post(
        "/api/v1/ingest", content=encode_batch({"gpu_samples": gpu_table(5)}), headers=headers()
    )
    assert client.get("/api/v1/tables").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/api/v1/tables", headers=auth).json()["tables"]["gpu_samples"] == 5
    answer = client.get(
        "/api/v1/tables/gpu_samples",
        params={"since": (T0 + timedelta(seconds=1)).isoformat(), "until": "2026-11-01T12:00:04Z"},
        headers=auth,
    )
    table = pa.ipc.open_stream(answer.content).read_all()
    assert table.column("fb_used_bytes").to_pylist() == [1, 2, 3]
    rows = client.get(
        "/api/v1/tables/gpu_samples", params={"format": "json", "limit": 2}, headers=auth
    ).json()
    assert [r["fb_used_bytes"] for r in rows] == [0, 1]
    none = client.get("/api/v1/tables/gpu_samples", params={"node": "n2"}, headers=auth)
    assert pa.ipc.open_stream(none.content).read_all().num_rows == 0
    assert client.get("/api/v1/tables/nope", headers=auth).status_code == 404
    assert client.get("/api/v1/tables/gpu_samples?limit=0", headers=auth).status_code == 422


# -- retention ---------------------------------------------------------------------------


def test_retention_runs_in_the_background_and_survives_a_failed_run(store: Store) -> None:
    store.append("gpu_samples", gpu_table(4))
    calls = 0

    def clock() -> datetime:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("clock broke once")
        return datetime(2026, 11, 2, tzinfo=UTC)

    settings = ServiceSettings(
        token=TOKEN,
        retention_interval_s=0.01,
        retention=RetentionSettings(raw_retention_s=3600),
    )
    with TestClient(create_app(settings, store, clock=clock)) as client:
        deadline = time.monotonic() + 30
        while store.count("gpu_samples") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.count("gpu_samples") == 0
        assert store.scalar("SELECT sum(samples) FROM gpu_samples_1m") == 4
        assert metric(client, "sits_retention_runs_total", result="error") == 1
        assert metric(client, "sits_retention_runs_total", result="ok") >= 1
        assert metric(client, "sits_retention_rows_total", kind="gpu_rolled") == 4


# -- settings ----------------------------------------------------------------------------


def test_token_comes_from_a_file_or_the_value_never_both(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(" abc123 \n")
    assert ServiceSettings(token_file=token_file).resolved_token() == "abc123"
    assert ServiceSettings(token="xyz").resolved_token() == "xyz"
    with pytest.raises(ConfigError, match="not both"):
        ServiceSettings(token="a", token_file=token_file).resolved_token()
    with pytest.raises(ConfigError, match="cannot read"):
        ServiceSettings(token_file=tmp_path / "missing").resolved_token()
    with pytest.raises(ConfigError, match="whitespace"):
        ServiceSettings(token="a b").resolved_token()


def test_decoded_bodies_match_what_the_store_returns(client: TestClient) -> None:
    """The service and agent share one codec; what goes in comes back out."""
    original = gpu_table(3)
    body = encode_batch({"gpu_samples": original})
    assert decode_batch(body)["gpu_samples"].equals(original)
    client.post("/api/v1/ingest", content=body, headers=headers())
    auth = {"Authorization": f"Bearer {TOKEN}"}
    back = pa.ipc.open_stream(client.get("/api/v1/tables/gpu_samples", headers=auth).content)
    assert back.read_all().select(original.column_names).equals(original)
