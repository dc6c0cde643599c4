"""Replicas and GPUs at the SLO from the heatmap's safe maximum and the observed peak."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.grid import HeatmapSettings
from sits_observe.analytics.rightsizing.replicas import ReplicaSettings, peak_rate, replicas_at_slo
from sits_observe.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)
SECONDS = 600
#: 1 s windows, 1 rps throughput bins; a bin counts from 20 requests.
HEAT = HeatmapSettings(window_s=1.0, throughput_bin_rps=1.0, latency_bin_ms=10.0)


def load(rate: int) -> float:
    """Latency of a request on a replica serving ``rate`` requests/s: 0.1 s + 50 ms per rps,
    so P95 is 0.5 s at 8 rps and 0.55 s at 9 rps."""
    return 0.1 + 0.05 * rate


def requests(pods: tuple[str, ...], model: str = "llama") -> list[dict[str, object]]:
    """Each pod serves 1, 2, ... 10 requests in successive seconds (every pod in step)."""
    rows: list[dict[str, object]] = []
    for k in range(SECONDS):
        rate = k % 10 + 1
        for pod in pods:
            for j in range(rate):
                at = T0 + timedelta(seconds=k + (j + 0.5) / rate)
                rows.append(
                    {
                        "ts": at,
                        "model": model,
                        "latency_s": load(rate),
                        "ok": True,
                        "namespace": "serve",
                        "pod": pod,
                        "source": "sim",
                    }
                )
    return rows


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "replicas.duckdb") as s:
        pods = [
            {
                "ts": T0,
                "pod_uid": f"u{i}",
                "namespace": "serve",
                "pod": f"llama-{i}",
                "workload": "llama",
                "gpu_request": 2,
                "phase": "Running",
                "node": "n1",
            }
            for i in range(2)
        ]
        s.append_batch(
            {
                "requests": pa.Table.from_pylist(requests(("llama-0", "llama-1"))),
                "pods": pa.Table.from_pylist(pods),
            }
        )
        yield s


def test_peak_rate_is_the_busiest_window(store: Store) -> None:
    until = T0 + timedelta(seconds=SECONDS)
    one_s = ReplicaSettings(peak_window_s=1.0)
    assert peak_rate(store, "llama", T0, until, one_s) == 20.0  # both pods at 10 rps
    # A 10 s window holds one whole cycle: 2 x (1 + ... + 10) = 110 requests -> 11 rps.
    assert peak_rate(store, "llama", T0, until, ReplicaSettings(peak_window_s=10.0)) == 11.0
    assert peak_rate(store, "other", T0, until, one_s) == 0.0


def test_replicas_and_gpus_from_the_safe_maximum(store: Store) -> None:
    """Safe maximum per replica at a 0.5 s SLO: the 8 rps bin; peak 20 rps in 1 s windows:
    ceil(20 / 8) = 3 replicas x 2 GPUs."""
    settings = ReplicaSettings(slo_ms=500, peak_window_s=1.0, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), settings)
    assert (rec.model, rec.pods, rec.workloads) == ("llama", ("llama-0", "llama-1"), ("llama",))
    assert (rec.current_replicas, rec.gpus_per_replica, rec.current_gpus) == (2, 2, 4)
    assert (rec.safe_max_rps, rec.peak_rps) == (8.0, 20.0)
    assert (rec.proposed_replicas, rec.proposed_gpus, rec.upper_bound) == (3, 6, False)
    assert rec.pods_measured == 2
    assert "peak 20 rps" in rec.reason and "safe maximum 8 rps" in rec.reason


def test_a_slo_held_everywhere_gives_an_upper_bound(store: Store) -> None:
    settings = ReplicaSettings(slo_ms=2000, peak_window_s=10.0, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), settings)
    assert (rec.safe_max_rps, rec.proposed_replicas, rec.upper_bound) == (10.0, 2, True)
    assert "upper bound" in rec.reason


def test_no_safe_maximum_is_not_enough_data(store: Store) -> None:
    """At a 0.1 s SLO even the lowest bin (P95 0.15 s) breaks it: no proposal, the reason."""
    settings = ReplicaSettings(slo_ms=100, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), settings)
    assert rec.proposed_replicas is None and rec.proposed_gpus is None
    assert rec.reason.startswith("not enough data: no safe maximum")


def test_replicas_are_held_to_the_gpus_the_cluster_has_for_the_model(store: Store) -> None:
    """The peak needs 3 replicas x 2 GPUs (test above); a 6-GPU cluster where another pod
    holds 2 GPUs has room for 4 of them: the proposal stays at the 2 replicas that fit, and
    the reason gives the 3 the peak needs."""
    store.append_batch(
        {
            "nodes": pa.Table.from_pylist(
                [{"ts": T0, "node": "n1", "gpu_allocatable": 6, "ready": True}]
            ),
            "pods": pa.Table.from_pylist(
                [{"ts": T0, "pod_uid": "o", "namespace": "train", "pod": "job-0",
                  "gpu_request": 2, "phase": "Running", "node": "n1"}]
            ),
        }
    )  # fmt: skip
    settings = ReplicaSettings(slo_ms=500, peak_window_s=1.0, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), settings)
    assert (rec.needed_replicas, rec.proposed_replicas, rec.proposed_gpus) == (3, 2, 4)
    assert "held at 2 replica(s): the cluster has 4 GPU(s) for the model" in rec.reason


def test_the_history_behind_a_proposal_is_the_span_of_its_requests(store: Store) -> None:
    settings = ReplicaSettings(slo_ms=500, peak_window_s=1.0, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), settings)
    assert SECONDS - 1 < rec.history_s < SECONDS


def test_no_slo_set_is_a_row_that_says_how_to_set_one(store: Store) -> None:
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), ReplicaSettings())
    assert rec.slo_s is None and rec.proposed_replicas is None
    assert rec.current_replicas == 2 and rec.gpus_per_replica == 2
    assert rec.reason.startswith("no P95 SLO set for llama: set one with --slo llama=SECONDS")
    own = ReplicaSettings(slo_ms=100, slo=("llama=0.5",), peak_window_s=1.0, heatmap=HEAT)
    (rec,) = replicas_at_slo(store, T0, T0 + timedelta(seconds=SECONDS), own)
    assert rec.slo_s == 0.5 and rec.proposed_replicas == 3  # its own SLO wins over slo_ms
