"""Who may call what: roles, node-bound ingest tokens, authentication before validation,
the optional scrape token and the API docs switch (token files are real files in tmp_path)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from sits_observe.collectors.agent.wire import CONTENT_TYPE, encode_batch
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app

ALL = "all-roles-token"
READ = "read-only-token"
SCRAPE = "scrape-only-token"
SHARED_INGEST = "ingest-any-node"
NODE_A = "ingest-node-a"
NOW = datetime.now(UTC).replace(tzinfo=None)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "auth.duckdb") as s:
        yield s


def settings(tmp_path: Path, **extra: object) -> ServiceSettings:
    values: dict[str, object] = {
        "token_file": write(tmp_path / "token", ALL + "\n"),
        "read_token_file": write(tmp_path / "read", READ),
        "ingest_tokens_file": write(
            tmp_path / "ingest", f"# shared and node-bound tokens\n{SHARED_INGEST}\n{NODE_A} a\n"
        ),
        "retention_interval_s": 0,
        **extra,
    }
    return ServiceSettings.model_validate(values)


@pytest.fixture
def client(tmp_path: Path, store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path), store)) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ingest(client: TestClient, token: str, *, node: str | None, rows_of: list[str | None]):
    table = pa.table(
        {
            "ts": pa.array(
                [NOW - timedelta(seconds=i) for i in range(len(rows_of))], pa.timestamp("us")
            ),
            "node": pa.array(rows_of, pa.string()),
            "gpu_uuid": [f"GPU-{i}" for i in range(len(rows_of))],
            "fb_used_bytes": list(range(len(rows_of))),
        }
    )
    headers = {**bearer(token), "Content-Type": CONTENT_TYPE, "X-Sits-Batch-Id": uuid.uuid4().hex}
    if node is not None:
        headers["X-Sits-Node"] = node
    return client.post(
        "/api/v1/ingest", content=encode_batch({"gpu_samples": table}), headers=headers
    )


def metric(client: TestClient, name: str, **labels: str) -> float:
    text = client.get("/metrics", headers=bearer(ALL)).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


# -- item 15: authenticate before FastAPI validates anything ------------------------------

BAD_PARAMS = [
    ("GET", "/api/v1/tables?limit=0"),
    ("GET", "/api/v1/tables/gpu_samples?limit=0"),
    ("GET", "/api/v1/tables/gpu_samples?since=not-a-time"),
    ("GET", "/api/v1/tables/gpu_samples?format=xml"),
    ("GET", "/api/v1/tables/no_such_table?limit=-5"),
    ("GET", "/api/v1/no-such-route?x=1"),
    ("POST", "/api/v1/ingest"),
    ("POST", "/v1/traces"),
]


@pytest.mark.parametrize(("method", "url"), BAD_PARAMS)
def test_every_protected_route_answers_401_whatever_its_parameters(
    client: TestClient, method: str, url: str
) -> None:
    answer = client.request(method, url, headers={"Content-Type": "text/plain"}, content=b"x")
    assert answer.status_code == 401, answer.text
    assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="sits_observe"')
    wrong = client.request(method, url, headers=bearer("not-a-token"), content=b"x")
    assert wrong.status_code == 401, wrong.text


def test_validation_still_applies_once_authenticated(client: TestClient) -> None:
    answer = client.get("/api/v1/tables/gpu_samples?limit=0", headers=bearer(READ))
    assert answer.status_code == 422


def test_read_refusals_are_counted(client: TestClient) -> None:
    client.get("/api/v1/tables?limit=0")
    client.get("/api/v1/tables", headers=bearer(SHARED_INGEST))
    assert metric(client, "sits_auth_refused_total", role="read", reason="unauthorized") == 1
    assert metric(client, "sits_auth_refused_total", role="read", reason="forbidden") == 1


# -- item 25: separate roles ------------------------------------------------------------


def test_each_token_does_only_its_role(client: TestClient, store: Store) -> None:
    assert client.get("/api/v1/tables", headers=bearer(READ)).status_code == 200
    assert client.get("/api/v1/tables", headers=bearer(ALL)).status_code == 200
    refused = client.get("/api/v1/tables", headers=bearer(SHARED_INGEST))
    assert refused.status_code == 403 and refused.json()["reason"] == "forbidden"
    as_reader = ingest(client, READ, node="a", rows_of=["a"])
    assert as_reader.status_code == 403 and as_reader.json()["reason"] == "forbidden"
    assert ingest(client, SHARED_INGEST, node="b", rows_of=["a", "b"]).status_code == 200
    assert ingest(client, ALL, node="a", rows_of=["c"]).status_code == 200
    assert store.count("gpu_samples") == 3
    assert metric(client, "sits_ingest_rejected_total", reason="forbidden") == 1


def test_a_node_token_writes_only_its_own_rows(client: TestClient, store: Store) -> None:
    ok = ingest(client, NODE_A, node="a", rows_of=["a", None, "a"])
    assert ok.status_code == 200, ok.text
    other_rows = ingest(client, NODE_A, node="a", rows_of=["a", "b"])
    assert other_rows.status_code == 403
    assert other_rows.json()["reason"] == "node_mismatch" and "'b'" in other_rows.json()["detail"]
    other_header = ingest(client, NODE_A, node="b", rows_of=["b"])
    assert other_header.status_code == 403 and other_header.json()["reason"] == "node_mismatch"
    no_header = ingest(client, NODE_A, node=None, rows_of=["a"])
    assert no_header.status_code == 403 and no_header.json()["reason"] == "node_mismatch"
    assert store.count("gpu_samples") == 3  # only the first batch
    assert metric(client, "sits_ingest_rejected_total", reason="node_mismatch") == 3
    assert NODE_A not in other_rows.text  # the token never appears in an answer


def test_a_node_token_cannot_send_request_spans_of_another_node(client: TestClient) -> None:
    span = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "k8s.node.name", "value": {"stringValue": "b"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "chat",
                                "kind": 2,
                                "startTimeUnixNano": str(
                                    int(NOW.replace(tzinfo=UTC).timestamp() * 1e9) - 10**9
                                ),
                                "endTimeUnixNano": str(
                                    int(NOW.replace(tzinfo=UTC).timestamp() * 1e9)
                                ),
                                "attributes": [
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "m"}}
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    headers = {**bearer(NODE_A), "Content-Type": "application/json"}
    refused = client.post("/v1/traces", json=span, headers=headers)
    assert refused.status_code == 403, refused.text
    headers = {**bearer(SHARED_INGEST), "Content-Type": "application/json"}
    assert client.post("/v1/traces", json=span, headers=headers).status_code == 200


# -- item 14: /metrics, /docs, /openapi.json ---------------------------------------------


def test_docs_and_openapi_are_off_by_default(client: TestClient) -> None:
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert client.get(path).status_code == 404, path
        assert client.get(path, headers=bearer(ALL)).status_code == 404, path


def test_docs_can_be_turned_on(tmp_path: Path, store: Store) -> None:
    with TestClient(create_app(settings(tmp_path, api_docs=True), store)) as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/docs").status_code == 200


def test_metrics_stay_open_without_a_scrape_token(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 200


def test_a_scrape_token_protects_metrics(tmp_path: Path, store: Store) -> None:
    configured = settings(tmp_path, scrape_token_file=write(tmp_path / "scrape", SCRAPE))
    with TestClient(create_app(configured, store)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer("wrong")).status_code == 401
        assert client.get("/metrics", headers=bearer(READ)).status_code == 403
        answer = client.get("/metrics", headers=bearer(SCRAPE))
        assert answer.status_code == 200 and "sits_ingest_batches_total" in answer.text
        assert client.get("/metrics", headers=bearer(ALL)).status_code == 200
        assert client.get("/api/v1/tables", headers=bearer(SCRAPE)).status_code == 403
        assert client.get("/healthz").status_code == 200  # probes never need a token
        assert metric(client, "sits_auth_refused_total", role="scrape", reason="forbidden") == 1


# -- configuration ------------------------------------------------------------------------


def test_one_token_keeps_meaning_every_role(tmp_path: Path, store: Store) -> None:
    only = ServiceSettings(token_file=write(tmp_path / "t", ALL), retention_interval_s=0)
    with TestClient(create_app(only, store)) as client:
        assert ingest(client, ALL, node="a", rows_of=["z"]).status_code == 200
        assert client.get("/api/v1/tables", headers=bearer(ALL)).status_code == 200


def test_ingest_tokens_alone_are_enough_to_start(tmp_path: Path, store: Store) -> None:
    only = ServiceSettings(
        ingest_tokens_file=write(tmp_path / "i", f"{NODE_A} a\n"), retention_interval_s=0
    )
    with TestClient(create_app(only, store)) as client:
        assert ingest(client, NODE_A, node="a", rows_of=["a"]).status_code == 200
        assert client.get("/api/v1/tables", headers=bearer(NODE_A)).status_code == 403


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tok a b\n", "line 1: expected 'token [node]'"),
        ("# nothing\n\n", "holds no token"),
        ("tok-1 a\ntok-1 b\n", "line 2: this token is already on an earlier line"),
        ("tok-1 bad/node\n", "line 1: node 'bad/node' is not a node name"),
    ],
)
def test_a_bad_ingest_tokens_file_is_one_clear_error(
    tmp_path: Path, store: Store, text: str, message: str
) -> None:
    bad = ServiceSettings(ingest_tokens_file=write(tmp_path / "i", text))
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        create_app(bad, store)
    assert "tok-1" not in str(caught.value)  # token values never appear in messages


def test_one_token_in_two_roles_is_refused(tmp_path: Path, store: Store) -> None:
    twice = ServiceSettings(
        token_file=write(tmp_path / "t", ALL), read_token_file=write(tmp_path / "r", ALL)
    )
    with pytest.raises(ConfigError, match="give each role its own token"):
        create_app(twice, store)


def test_a_read_token_alone_cannot_start_the_service(tmp_path: Path, store: Store) -> None:
    with pytest.raises(ConfigError, match="no bearer token"):
        create_app(ServiceSettings(read_token_file=write(tmp_path / "r", READ)), store)
