"""Tenant isolation closed loop: the controller's throttle brings a victim back inside its SLA.

34 simulated minutes, minute by minute, against the Kubernetes emulator and a real DuckDB file:

- ``batch`` (the aggressor) is a job queue of one-GPU best-effort pods that each run three
  minutes; it keeps 2 pods running for ten minutes, then wants 8. Each replacement pod goes
  through the emulator's admission, so its ``sits-noncritical`` quota (8 GPUs) bounds it;
- ``finance`` (the victim, SLA 15 ms P99) serves 40 requests a minute on the same node, each
  taking (5 + 1.25 x batch's busy GPUs) ms x U(0.8, 1.2): a model of the interference, P99
  about 9 ms beside 2 busy GPUs and 18 ms beside 8;
- every minute the store gets the minute's requests, GPU samples and a pods snapshot, and the
  controller (``--act``) runs one pass as of the minute's end.

The throttle steps the quota down (8 -> 6 -> 4, five minutes apart: the cooldown), batch's
pods drain to it as they finish (a quota never evicts), and finance's P99 returns under its
SLA while batch still wants 8 pods.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.control.signals.store import signals_from_store
from sits_observe.errors import KubeApiError
from sits_observe.store import Store

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

T0 = datetime(2026, 11, 1, 12, 0)
QUOTA = "sits-noncritical"
GPU = "requests.nvidia.com/gpu"
SLA_S = 0.015
LIFETIME_MIN = 3
MINUTES = 34


def _latency_s(busy_gpus: int, rng: np.random.Generator, n: int) -> list[float]:
    mean_ms = 5.0 + 1.25 * busy_gpus
    return [float(v) for v in mean_ms / 1000 * rng.uniform(0.8, 1.2, n)]


class Batch:
    """The aggressor's job queue: pods of one GPU, each running LIFETIME_MIN minutes."""

    def __init__(self, kube: KubeJson) -> None:
        self.kube = kube
        self.started: dict[str, int] = {}
        self.serial = 0
        self.refused = 0

    def step(self, minute: int, wanted: int) -> None:
        for name, at in list(self.started.items()):
            if minute - at >= LIFETIME_MIN:
                self.kube.request("DELETE", f"/api/v1/namespaces/batch/pods/{name}")
                del self.started[name]
        while len(self.started) < wanted:
            name = f"job-{self.serial}"
            self.serial += 1
            body = {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": "n1",
                    "priorityClassName": "best-effort",
                    "containers": [
                        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            }
            try:
                self.kube.request("POST", "/api/v1/namespaces/batch/pods", body=body)
            except KubeApiError as exc:
                assert exc.status == 403 and "exceeded quota" in str(exc)
                self.refused += 1
                return  # the job controller retries next minute
            self.started[name] = minute


def _minute_rows(minute: int, pods: list[str], rng: np.random.Generator) -> dict[str, pa.Table]:
    start = T0 + timedelta(minutes=minute)
    requests = [
        {"ts": start + timedelta(seconds=1.25 * i), "model": "quotes", "latency_s": v,
         "ok": True, "namespace": "finance", "pod": "quotes-0", "node": "n1"}
        for i, v in enumerate(_latency_s(len(pods), rng, 40))
    ]  # fmt: skip
    gpus = [
        {"ts": start + timedelta(seconds=s), "node": "n1", "gpu_uuid": f"g{i}",
         "namespace": "batch", "pod": pod, "gpu_util_ratio": 0.9}
        for i, pod in enumerate(pods) for s in (15, 45)
    ]  # fmt: skip
    snapshot = start + timedelta(seconds=59)
    inventory = [
        {"ts": snapshot, "pod_uid": f"u-{pod}", "namespace": "batch", "pod": pod,
         "workload": "job", "node": "n1", "phase": "Running", "gpu_request": 1,
         "priority_class": "best-effort"}
        for pod in pods
    ] + [
        {"ts": snapshot, "pod_uid": "u-quotes-0", "namespace": "finance", "pod": "quotes-0",
         "workload": "quotes", "node": "n1", "phase": "Running", "gpu_request": 1,
         "priority_class": "ultra-low-latency"}
    ]  # fmt: skip
    tables = {"requests": requests, "pods": inventory, "gpu_samples": gpus}
    return {k: pa.Table.from_pylist(v) for k, v in tables.items() if v}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(str(tmp_path / "sits.duckdb"))
    try:
        yield store
    finally:
        store.close()


def _p99(db: Store, first: int, last: int) -> float:
    value = db.scalar(
        "SELECT quantile_cont(latency_s, 0.99) FROM requests WHERE ts >= ? AND ts < ?",
        [T0 + timedelta(minutes=first), T0 + timedelta(minutes=last)],
    )
    return float(value)


def test_the_throttle_brings_the_victim_back_inside_its_sla(kube: KubeJson, db: Store) -> None:
    kube.request("POST", "/api/v1/nodes", body={"metadata": {"name": "n1"}})
    for ns in ("batch", "finance"):
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    kube.request(
        "POST",
        "/api/v1/namespaces/batch/resourcequotas",
        body={"metadata": {"name": QUOTA}, "spec": {"hard": {GPU: "8"}}},
    )
    # finance's SLA, the spec's example, configured (no namespace has an SLA by default).
    settings = ControllerSettings(mode="act", sla=("finance=0.015",))
    now = {"at": T0}
    recorder = StoreRecorder(db, ControllerMetrics(CollectorRegistry()), "r1")
    applier = Applier(
        kube,
        settings,
        recorder,
        limiter=TokenBucket(1000, 1000),
        sleep=lambda s: None,
        clock=lambda: now["at"],
    )
    batch, rng = Batch(kube), np.random.default_rng(7)
    quota: list[tuple[int, str]] = []
    running: list[int] = []
    for minute in range(MINUTES):
        batch.step(minute, wanted=2 if minute < 10 else 8)
        running.append(len(batch.started))
        db.append_batch(_minute_rows(minute, sorted(batch.started), rng))
        at = T0 + timedelta(minutes=minute + 1)
        now["at"] = at
        state = read_state(kube, settings)
        signals = signals_from_store(db, at, settings)
        history = load_history(db, at - timedelta(days=1))
        applier.apply(plan(signals, state, settings, history, at=at))
        hard = kube.request("GET", f"/api/v1/namespaces/batch/resourcequotas/{QUOTA}")
        value = hard["spec"]["hard"][GPU]
        if not quota or quota[-1][1] != value:
            quota.append((minute, value))
    before = _p99(db, 10, 14)  # batch at 8 pods, no throttle yet
    after = _p99(db, MINUTES - 10, MINUTES)
    calm = _p99(db, 0, 10)
    assert calm < SLA_S < before, (calm, before)
    assert after < SLA_S, (after, quota, running)
    # Stepped down, never below the GPU bound, each step at least the cooldown after the last.
    values = [int(v) for _, v in quota]
    assert values[0] == 8 and values == sorted(values, reverse=True) and values[-1] >= 1
    minutes = [m for m, _ in quota]
    assert all(b - a >= settings.min_change_interval_s / 60 for a, b in pairwise(minutes[1:]))
    assert len(values) >= 2 and batch.refused > 0
    # Pods started before a step run out their three minutes (a quota never evicts); from
    # then on batch runs no more pods than the quota holds.
    for (m, v), nxt in zip(quota[1:], [*minutes[2:], MINUTES], strict=True):
        assert max(running[m + LIFETIME_MIN : nxt + 1], default=0) <= int(v), (quota, running)
    decisions = db.query(
        "SELECT outcome, current, proposed FROM decisions WHERE action = 'tenant-throttle' "
        "AND outcome = 'applied' ORDER BY ts"
    ).to_pylist()
    assert [(d["current"], d["proposed"]) for d in decisions] == [
        (a, b) for (_, a), (_, b) in pairwise(quota)
    ]
