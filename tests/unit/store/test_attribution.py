"""Container attribution against a real DuckDB store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sits_observe.domain.tables import CONTAINER_SAMPLES, PODS
from sits_observe.store import Store
from sits_observe.store.attribution import PodRef, attribute_containers, pod_for_uid

T0 = datetime(2024, 5, 1, 10, 0, 0)


def pods(*rows: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=PODS.schema)


def samples(*rows: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=CONTAINER_SAMPLES.schema)


def containers(**ids: str | None) -> str:
    return json.dumps([{"name": n, "container_id": c} for n, c in ids.items()])


def attributed(store: Store) -> list[tuple[Any, ...]]:
    table = store.query(
        "SELECT pod_uid, container_id, namespace, pod, container FROM container_samples "
        "ORDER BY ts, pod_uid, container_id NULLS FIRST"
    )
    return [tuple(r.values()) for r in table.to_pylist()]


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def test_fills_namespace_pod_and_container(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {
                "ts": T0,
                "pod_uid": "u1",
                "namespace": "serving",
                "pod": "vllm-0",
                "node": "n1",
                "workload": "vllm",
                "containers_json": containers(vllm="c1", sc="c2"),
            },
            {
                "ts": T0,
                "pod_uid": "u2",
                "namespace": "train",
                "pod": "job-0",
                "containers_json": containers(main="c3"),
            },
        ),
    )
    store.append(
        "container_samples",
        samples(
            {"ts": T0, "pod_uid": "u1", "container_id": "c1", "memory_current_bytes": 1},
            {"ts": T0, "pod_uid": "u1", "container_id": "c2"},
            {"ts": T0, "pod_uid": "u2", "container_id": "c3"},
            {"ts": T0, "pod_uid": "u1", "container_id": "c-unknown"},  # pod known only
            {"ts": T0, "pod_uid": "u1", "container_id": None},  # pod-level cgroup
            {"ts": T0, "pod_uid": "u9", "container_id": "c9"},  # not in the inventory
        ),
    )
    assert attribute_containers(store) == 5
    assert attributed(store) == [
        ("u1", None, "serving", "vllm-0", None),
        ("u1", "c-unknown", "serving", "vllm-0", None),
        ("u1", "c1", "serving", "vllm-0", "vllm"),
        ("u1", "c2", "serving", "vllm-0", "sc"),
        ("u2", "c3", "train", "job-0", "main"),
        ("u9", "c9", None, None, None),
    ]
    # Nothing left to change: a second run touches no row.
    assert attribute_containers(store) == 0
    # The metric columns were not disturbed.
    assert store.scalar("SELECT sum(memory_current_bytes) FROM container_samples") == 1


def test_uses_each_pods_latest_row(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {
                "ts": T0,
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "p",
                "containers_json": containers(main=None),
            },
            {
                "ts": T0 + timedelta(minutes=1),
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "p",
                "containers_json": containers(main="c1"),
            },
            # u2 vanished from later snapshots (deleted pod): its last row still counts.
            {
                "ts": T0 - timedelta(hours=1),
                "pod_uid": "u2",
                "namespace": "old",
                "pod": "gone",
                "containers_json": containers(x="c2"),
            },
        ),
    )
    store.append(
        "container_samples",
        samples(
            {"ts": T0, "pod_uid": "u1", "container_id": "c1"},
            {"ts": T0, "pod_uid": "u2", "container_id": "c2"},
        ),
    )
    assert attribute_containers(store) == 2
    assert attributed(store) == [
        ("u1", "c1", "ns", "p", "main"),
        ("u2", "c2", "old", "gone", "x"),
    ]


def test_never_overwrites_values_already_set(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {
                "ts": T0,
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "p",
                "containers_json": containers(main="c1"),
            }
        ),
    )
    store.append(
        "container_samples",
        samples(
            {
                "ts": T0,
                "pod_uid": "u1",
                "container_id": "c1",
                "namespace": "from-agent",
                "pod": None,
                "container": "kept",
            }
        ),
    )
    assert attribute_containers(store) == 1
    assert attributed(store) == [("u1", "c1", "from-agent", "p", "kept")]


def test_unreadable_containers_json_still_fills_the_pod(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {"ts": T0, "pod_uid": "u1", "namespace": "ns", "pod": "p", "containers_json": "{"},
            {
                "ts": T0,
                "pod_uid": "u2",
                "namespace": "ns",
                "pod": "q",
                "containers_json": '{"name": "a"}',
            },
        ),
    )
    store.append(
        "container_samples",
        samples(
            {"ts": T0, "pod_uid": "u1", "container_id": "c1"},
            {"ts": T0, "pod_uid": "u2", "container_id": "c1"},
        ),
    )
    assert attribute_containers(store) == 2
    assert attributed(store) == [("u1", "c1", "ns", "p", None), ("u2", "c1", "ns", "q", None)]


def test_since_limits_the_rows(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {
                "ts": T0,
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "p",
                "containers_json": containers(main="c1"),
            }
        ),
    )
    store.append(
        "container_samples",
        samples(
            {"ts": T0 - timedelta(hours=2), "pod_uid": "u1", "container_id": "c1"},
            {"ts": T0, "pod_uid": "u1", "container_id": "c1"},
        ),
    )
    since = (T0 - timedelta(hours=1)).replace(tzinfo=UTC)
    assert attribute_containers(store, since=since) == 1
    assert attributed(store) == [("u1", "c1", None, None, None), ("u1", "c1", "ns", "p", "main")]


def test_empty_store(store: Store) -> None:
    assert attribute_containers(store) == 0


def test_on_a_file_store(tmp_path: Path) -> None:
    db = tmp_path / "obs.duckdb"
    with Store.open(db) as store:
        store.append(
            "pods",
            pods(
                {
                    "ts": T0,
                    "pod_uid": "u1",
                    "namespace": "ns",
                    "pod": "p",
                    "containers_json": containers(main="c1"),
                }
            ),
        )
        store.append(
            "container_samples", samples({"ts": T0, "pod_uid": "u1", "container_id": "c1"})
        )
        assert attribute_containers(store) == 1
    with Store.open(db, read_only=True) as store:
        assert attributed(store) == [("u1", "c1", "ns", "p", "main")]


def test_pod_for_uid(store: Store) -> None:
    store.append(
        "pods",
        pods(
            {
                "ts": T0,
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "old-name",
                "containers_json": containers(main=None),
            },
            {
                "ts": T0 + timedelta(minutes=1),
                "pod_uid": "u1",
                "namespace": "ns",
                "pod": "p",
                "node": "n1",
                "workload": "w",
                "containers_json": containers(main="c1", sc=None),
            },
        ),
    )
    assert pod_for_uid(store, "u1") == PodRef(
        pod_uid="u1",
        namespace="ns",
        pod="p",
        node="n1",
        workload="w",
        containers={"main": "c1", "sc": None},
    )
    assert pod_for_uid(store, "nope") is None
