"""Every report gives the same answer from inventory stored as changes (schema version 6) as
from full snapshots in plain tables (every version before 6).

One generated cluster history, 40 minutes of it: three nodes (one goes NotReady for five
minutes), a training job, inference replicas (one replaced half-way), an idle notebook and
short batch pods that come and go, each Pending for one snapshot before it runs; GPU samples
attributed to the pods, cgroup samples and requests. It is written twice: through
``Store.append`` (pods and nodes stored as versions, a full snapshot every 10 minutes) and
into a store whose ``pods`` / ``nodes`` are plain tables the same rows are inserted into (its
``pod_snapshots`` / ``node_snapshots`` are the distinct times of those tables' rows, its
``pod_versions`` / ``node_versions`` each row valid until the next snapshot time). Each
report of the registry is then run on both, over the whole history and over windows that end
inside it, and the documents (or the errors) must be equal.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from sits_observe.domain.tables import conform
from sits_observe.errors import SitsError
from sits_observe.lab.catalog import all_reports
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.store.inventory import InventorySettings

REPORTS = all_reports()

T0 = datetime(2026, 11, 2, 8, 0, 0)
MINUTES = 40
GIB = 1024**3
#: Reports that need settings to run at all (capacity sizes one model's target load).
REQUIRED: dict[str, dict[str, Any]] = {
    "capacity": {"model": "llm-a", "target_rps": 5, "slo_ms": 60000},
}
#: Values that measure the machine, not the data (the what-if replay's speed): left out.
TIMING = {"pods_per_s"}
#: DuckDB's parallel aggregates sum in no fixed order: a mean may differ in its last bits
#: between two runs on one store, so floats are compared to 12 significant digits.
DIGITS = 12
#: Reports whose answer reads the inventory: each must give a real answer, not an error.
READERS = ("fleet", "capacity", "classes", "timeline", "fragmentation", "recommend", "whatif")


def _nodes(t: datetime, minute: float) -> list[dict[str, Any]]:
    def node(name: str, gpus: int, product: str, mem_gib: int) -> dict[str, Any]:
        return {
            "ts": t,
            "node": name,
            "gpu_allocatable": gpus,
            "gpu_product": product,
            "gpu_memory_bytes": mem_gib * GIB,
            "cpu_allocatable_milli": 64000,
            "memory_allocatable_bytes": 512 * GIB,
            "ready": not (name == "n2" and 20 <= minute < 25),
            "labels_json": json.dumps({"nvidia.com/gpu.product": product}),
        }

    return [node("n1", 8, "H100", 80), node("n2", 8, "H100", 80), node("n3", 4, "A10", 24)]


def _pods(t: datetime, minute: float) -> list[dict[str, Any]]:
    """The pods at ``minute``: (uid, name, workload, node, gpus, start minute)."""
    specs = [
        ("t0", "train-0", "train", "n1", 4, -10.0),
        ("t1", "train-1", "train", "n1", 4, -10.0),
        ("i0", "infer-0", "infer", "n2", 1, -5.0),
        ("i1", "infer-1", "infer", "n2", 1, -5.0),
        ("nb", "notebook", "notebook", "n3", 1, 2.0),
    ]
    specs.append(("i2", "infer-2", "infer", "n2", 1, -5.0) if minute < 18 else
                 ("i3", "infer-3", "infer", "n3", 1, 18.0))  # fmt: skip
    for j in range(0, MINUTES, 4):  # a batch pod every 4 minutes, each for 5 minutes
        if j <= minute < j + 5:
            specs.append((f"b{j}", f"batch-{j}", "batch", "n3", 1, float(j)))
    rows = []
    for uid, name, workload, node, gpus, start in specs:
        started = T0 + timedelta(minutes=start)
        running = minute - start >= 0.5
        rows.append(
            {
                "ts": t,
                "pod_uid": uid,
                "namespace": "ml",
                "pod": name,
                "node": node,
                "phase": "Running" if running else "Pending",
                "qos_class": "Burstable",
                "owner_kind": "ReplicaSet",
                "owner_name": f"{workload}-7d4",
                "workload": workload,
                "gpu_request": gpus,
                "cpu_request_milli": 4000,
                "memory_request_bytes": 16 * GIB,
                "containers_json": json.dumps([{"name": "c", "container_id": f"cid-{uid}"}]),
                "created_at": started,
                "scheduled_at": started + timedelta(seconds=5),
                "ready_at": started + timedelta(seconds=30) if running else None,
                "gpu_milli": 1000,
            }
        )
    return rows


def _samples(rnd: random.Random) -> dict[str, list[dict[str, Any]]]:
    gpu, cgroup, requests = [], [], []
    for step in range(MINUTES * 6):  # every 10 s
        t = T0 + timedelta(seconds=10 * step)
        minute = step / 6
        slots: dict[str, int] = {}
        for pod in _pods(t, minute):
            if pod["phase"] != "Running":
                continue
            for _ in range(pod["gpu_request"]):
                index = slots.get(pod["node"], 0)
                slots[pod["node"]] = index + 1
                busy = pod["workload"] not in ("notebook",)
                gpu.append(
                    {
                        "ts": t,
                        "node": pod["node"],
                        "gpu_uuid": f"GPU-{pod['node']}-{index}",
                        "gpu_index": index,
                        "model_name": "H100" if pod["node"] != "n3" else "A10",
                        "namespace": "ml",
                        "pod": pod["pod"],
                        "container": "c",
                        "fb_used_bytes": int((20 + 40 * rnd.random()) * GIB) if busy else GIB,
                        "fb_total_bytes": (80 if pod["node"] != "n3" else 24) * GIB,
                        "gpu_util_ratio": rnd.uniform(0.4, 0.95) if busy else 0.0,
                        "sm_active_ratio": rnd.uniform(0.3, 0.9) if busy else 0.0,
                        "power_w": rnd.uniform(200, 600) if busy else 60.0,
                        "source": "sim",
                    }
                )
            cgroup.append(
                {
                    "ts": t,
                    "node": pod["node"],
                    "pod_uid": pod["pod_uid"],
                    "container_id": f"cid-{pod['pod_uid']}",
                    "qos_class": "Burstable",
                    "namespace": "ml",
                    "pod": pod["pod"],
                    "container": "c",
                    "memory_current_bytes": int((4 + 8 * rnd.random()) * GIB),
                    "memory_max_bytes": 16 * GIB,
                    "cpu_usage_s": 10.0 * step,
                }
            )
            if pod["workload"] == "infer":
                for k in range(3):
                    requests.append(
                        {
                            "ts": t + timedelta(seconds=3 * k),
                            "model": "llm-a",
                            "latency_s": rnd.uniform(0.2, 2.0),
                            "ok": True,
                            "namespace": "ml",
                            "pod": pod["pod"],
                            "node": pod["node"],
                        }
                    )
    return {"gpu_samples": gpu, "container_samples": cgroup, "requests": requests}


def _inventory() -> list[dict[str, pa.Table]]:
    snaps = []
    for step in range(MINUTES * 2):  # every 30 s
        t = T0 + timedelta(seconds=30 * step)
        snaps.append(
            {
                "nodes": conform("nodes", pa.Table.from_pylist(_nodes(t, step / 2))),
                "pods": conform("pods", pa.Table.from_pylist(_pods(t, step / 2))),
            }
        )
    return snaps


@pytest.fixture(scope="module")
def stores() -> tuple[Store, Store]:
    rnd = random.Random(14)
    samples = {
        name: conform(name, pa.Table.from_pylist(rows)) for name, rows in _samples(rnd).items()
    }
    inventory = _inventory()
    changes = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=600))
    plain = Store.open(":memory:")
    with plain.transaction() as con:
        for name in ("pods", "nodes"):
            con.execute(f"CREATE TABLE {name}_plain AS SELECT * FROM {name} LIMIT 0")
            con.execute(f"DROP VIEW {name}")
            con.execute(f"ALTER TABLE {name}_plain RENAME TO {name}")
            # What the readers that need only the latest time read: here, as before version
            # 6, the times of the plain table's rows (each its own epoch: every snapshot full).
            con.execute(
                f"CREATE OR REPLACE VIEW {name[:-1]}_snapshots AS "
                f"SELECT DISTINCT ts, ts AS epoch_at FROM {name}"
            )
            # What the readers that go to the versions read (store.inventory_reads, the
            # timeline's): each plain row a version of its own, valid until the next snapshot.
            con.execute(f"DROP TABLE {name[:-1]}_versions")
            con.execute(
                f"CREATE VIEW {name[:-1]}_versions AS "
                f"WITH t AS (SELECT ts, lead(ts) OVER (ORDER BY ts) AS next_ts "
                f"FROM (SELECT DISTINCT ts FROM {name})) "
                f"SELECT p.ts AS epoch_at, p.ts AS valid_from, t.next_ts AS valid_to, "
                f"p.* EXCLUDE (ts) FROM {name} AS p JOIN t ON t.ts = p.ts"
            )
    for store in (changes, plain):
        store.append_batch(samples)
    for i, snapshot in enumerate(inventory):
        if i % 10 == 3:  # a batch of several snapshots in one append
            continue
        batch = [snapshot, *([inventory[i - 1]] if i % 10 == 4 else [])]
        changes.append_batch(
            {name: pa.concat_tables([b[name] for b in batch]) for name in ("pods", "nodes")}
        )
    for snapshot in inventory:
        with plain.transaction() as con:
            for name, table in snapshot.items():
                con.register("_t", table)
                con.execute(f"INSERT INTO {name} SELECT * FROM _t")
                con.unregister("_t")
    assert changes.count("pods") == plain.count("pods")
    assert changes.scalar("SELECT count(*) FROM pod_versions") < plain.count("pods") / 5
    return changes, plain


def _answer(store: Store, name: str, request: WindowRequest) -> Any:
    spec = REPORTS[name]
    try:
        report = run_report(spec, store, request, spec.validate(REQUIRED.get(name, {})), now=T0)
    except SitsError as exc:
        return f"{type(exc).__name__}: {exc}"
    return _without_timing(report.document())


def _without_timing(doc: Any) -> Any:
    """``doc`` without :data:`TIMING` values, floats to :data:`DIGITS` digits."""
    if isinstance(doc, dict):
        return {k: _without_timing(v) for k, v in doc.items() if k not in TIMING}
    if isinstance(doc, list):
        return [_without_timing(v) for v in doc]
    if isinstance(doc, float):
        return float(f"{doc:.{DIGITS}g}")
    return doc


REQUESTS = {
    "whole history": WindowRequest(None, "newest"),
    "last 10 min": WindowRequest(600, "newest"),
    "ending at 22 min (n2 NotReady)": WindowRequest(300, T0 + timedelta(minutes=22)),
    "ending at 17 min 45 s": WindowRequest(900, T0 + timedelta(minutes=17, seconds=45)),
}


@pytest.mark.parametrize("request_name", list(REQUESTS))
@pytest.mark.parametrize("name", sorted(REPORTS))
def test_each_report_answers_the_same_from_changes(
    stores: tuple[Store, Store], name: str, request_name: str
) -> None:
    changes, plain = stores
    request = REQUESTS[request_name]
    expected = _answer(plain, name, request)
    assert _answer(changes, name, request) == expected
    if name in READERS and request_name == "whole history":
        assert not isinstance(expected, str), expected  # a real answer, not an error
