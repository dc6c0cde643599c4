"""The signals added to the exporter: each against rows written to a real DuckDB store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sits_observe.analytics.fragmentation.smf import smf_value
from sits_observe.analytics.trends.clusters import cluster_trends
from sits_observe.analytics.trends.series import read_occupancy_series
from sits_observe.collectors.exposition import Exposition, parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.registry import REGISTRY

NOW = datetime(2026, 11, 1, 12, 0)
TS = pa.timestamp("us")
GIB = 1024**3


def ts(values: list[datetime]) -> pa.Array:
    return pa.array(values, TS)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def inline(job: Callable[[], None]) -> None:
    job()


class Tick:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def exporter(store: Store, spawn: Callable[[Callable[[], None]], None] = inline, **kw: object):
    tick = Tick()
    collector = DerivedSignals(
        store, ExporterSettings.model_validate(kw), clock=lambda: NOW, monotonic=tick, spawn=spawn
    )
    registry = CollectorRegistry()
    registry.register(collector)
    return collector, registry, tick


def scrape(store: Store, **kw: object) -> Exposition:
    _, registry, _ = exporter(store, **kw)
    return parse_exposition(generate_latest(registry).decode())


def series(expo: Exposition, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels)): s.value for s in expo.samples if s.name == name}


def one(expo: Exposition, name: str, **labels: str) -> float:
    found = [
        s.value
        for s in expo.samples
        if s.name == name and all(s.label(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def no_errors(expo: Exposition) -> bool:
    return all(v == 0 for v in series(expo, "sits_exporter_errors_total").values())


# -- SMF and framebuffer -------------------------------------------------------------------


H100 = "NVIDIA H100 80GB HBM3"


def gpu_key(uuid: str, index: int, node: str = "n1") -> tuple[tuple[str, str], ...]:
    """dcgm-exporter's labels of a GPU (Hostname, gpu index, UUID, modelName), sorted."""
    return (("Hostname", node), ("UUID", uuid), ("gpu", str(index)), ("modelName", H100))


def add_smf_samples(store: Store) -> None:
    """n1/GPU-0 used by ns1/p1/c1, n1/GPU-1 by ns2/p2/c2; GPU and cgroup samples at the same
    times (skew 0). GPU-0's occupancy: 0.25 and 0.5 in the newest minute, 1.0 before."""
    gpu_rows = {
        "ts": [ago(100), ago(10), ago(5), ago(10), ago(5)],
        "node": ["n1"] * 5,
        "gpu_uuid": ["GPU-0", "GPU-0", "GPU-0", "GPU-1", "GPU-1"],
        "gpu_index": pa.array([0, 0, 0, 1, 1], pa.int16()),
        "model_name": [H100] * 5,
        "namespace": ["ns1", "ns1", "ns1", "ns2", "ns2"],
        "pod": ["p1", "p1", "p1", "p2", "p2"],
        "container": ["c1", "c1", "c1", "c2", "c2"],
        "fb_used_bytes": [80 * GIB, 20 * GIB, 40 * GIB, 60 * GIB, 60 * GIB],
        "fb_free_bytes": [0, 60 * GIB, 40 * GIB, 20 * GIB, 20 * GIB],
        "fb_total_bytes": [80 * GIB] * 5,
        "source": ["dcgm"] * 5,
    }
    store.append("gpu_samples", pa.table({**gpu_rows, "ts": ts(gpu_rows["ts"])}))
    store.append(
        "container_samples",
        pa.table(
            {
                "ts": ts([ago(10), ago(5), ago(10), ago(5)]),
                "node": ["n1"] * 4,
                "container_id": ["cid1", "cid1", "cid2", "cid2"],
                "namespace": ["ns1", "ns1", "ns2", "ns2"],
                "pod": ["p1", "p1", "p2", "p2"],
                "container": ["c1", "c1", "c2", "c2"],
                "memory_current_bytes": [8 * GIB, 8 * GIB, 4 * GIB, 4 * GIB],
            }
        ),
    )


def test_smf_per_gpu_node_and_namespace(store: Store) -> None:
    add_smf_samples(store)
    expo = scrape(store)
    gpu0 = smf_value(40 * GIB, 8 * GIB, 80 * GIB)  # the latest aligned sample: 0.4
    gpu1 = smf_value(20 * GIB, 4 * GIB, 80 * GIB)  # 0.2
    assert series(expo, "sits_smf_ratio") == {
        gpu_key("GPU-0", 0): pytest.approx(gpu0),
        gpu_key("GPU-1", 1): pytest.approx(gpu1),
    }
    assert one(expo, "sits_smf_node_ratio", Hostname="n1") == pytest.approx((gpu0 + gpu1) / 2)
    assert one(expo, "sits_smf_namespace_ratio", namespace="ns1") == pytest.approx(gpu0)
    assert one(expo, "sits_smf_namespace_ratio", namespace="ns2") == pytest.approx(gpu1)
    # The newest minute's mean occupancy; the older full sample is in another minute.
    assert one(expo, "sits_gpu_framebuffer_used_ratio", gpu="0") == pytest.approx(0.375)
    assert one(expo, "sits_gpu_framebuffer_used_ratio", UUID="GPU-1") == pytest.approx(0.75)
    assert no_errors(expo)


def test_gpu_caps_keep_the_most_fragmented(store: Store) -> None:
    add_smf_samples(store)
    expo = scrape(store, max_gpus=1)
    assert list(series(expo, "sits_smf_ratio")) == [gpu_key("GPU-0", 0)]
    assert list(series(expo, "sits_gpu_framebuffer_used_ratio")) == [gpu_key("GPU-1", 1)]


# -- requests: estimates, SLO, gauge histogram --------------------------------------------


def test_estimates_slo_and_latency_histogram(store: Store) -> None:
    latency = [0.004, 0.2, 0.2, 0.7, 3.0, 45.0, 100.0]
    store.append(
        "requests",
        pa.table(
            {
                "ts": ts([ago(1 + i) for i in range(len(latency))] + [ago(2)]),
                "model": ["a"] * len(latency) + ["a"],
                "latency_s": [*latency, 0.1],
                "ok": [True] * len(latency) + [False],  # the failed one never counts
            }
        ),
    )
    store.append(
        "server_windows",
        pa.table(
            {
                "ts": ts([ago(30), ago(15), ago(20)]),
                "window_s": [15.0, 15.1, 60.0],
                "model": ["a", "a", "b"],
                "completed": [5.0, 7.0, 3.0],
                "latency_p50_s": [9.0, 0.3, 1.0],
                "latency_p95_s": [9.0, 0.8, 2.0],
                "latency_p99_s": [9.0, 1.1, 3.0],
                "estimate": [True, True, True],
            }
        ),
    )
    expo = scrape(store, latency_slo_s=0.5, latency_slo_by_model_s={"b": 2.0})
    # The newest window of each model, labelled with that window's length.
    assert series(expo, "sits_latency_estimate_seconds") == {
        (("model", "a"), ("quantile", "0.5"), ("window", "15s")): 0.3,
        (("model", "a"), ("quantile", "0.95"), ("window", "15s")): 0.8,
        (("model", "a"), ("quantile", "0.99"), ("window", "15s")): 1.1,
        (("model", "b"), ("quantile", "0.5"), ("window", "1m")): 1.0,
        (("model", "b"), ("quantile", "0.95"), ("window", "1m")): 2.0,
        (("model", "b"), ("quantile", "0.99"), ("window", "1m")): 3.0,
    }
    assert series(expo, "sits_latency_slo_seconds") == {
        (("model", "a"),): 0.5,
        (("model", "b"),): 2.0,
    }
    bounds = ExporterSettings().latency_buckets_s
    buckets = {
        dict(s.labels)["le"]: s.value
        for s in expo.samples
        if s.name == "sits_request_latency_window_seconds_bucket"
    }
    expected = {repr(b): float(np.sum(np.asarray(latency) <= b)) for b in bounds}
    assert buckets == {**expected, "+Inf": float(len(latency))}
    assert buckets["0.25"] == 3.0 and buckets["60.0"] == 6.0
    assert one(expo, "sits_request_latency_window_seconds_gcount", model="a") == len(latency)
    gsum = one(expo, "sits_request_latency_window_seconds_gsum", model="a")
    assert gsum == pytest.approx(sum(latency))
    assert expo.types["sits_request_latency_window_seconds"] == "histogram"
    assert no_errors(expo)


# -- inventory: FGD per node, pod start ----------------------------------------------------


def add_inventory(store: Store) -> None:
    """Node A (4000 mCPU, 2 GPUs) with p1 (1 GPU, all its CPU): A's free GPU is fragmented
    for the workload (p1's shape); node B (2 idle GPUs) is not."""
    store.append(
        "nodes",
        pa.table(
            {
                "ts": ts([NOW, NOW]),
                "node": ["A", "B"],
                "gpu_allocatable": pa.array([2, 2], pa.int32()),
                "cpu_allocatable_milli": [4000, 8000],
                "ready": [True, True],
            }
        ),
    )
    start = ago(600)
    store.append(
        "pods",
        pa.table(
            {
                "ts": ts([NOW, NOW, NOW]),
                "pod_uid": ["u1", "u2", "u3"],
                "namespace": ["ns", "ns", "other"],
                "pod": ["p1", "p2", "p3"],
                "workload": ["w1", "w2", "w3"],
                "node": ["A", None, None],
                "phase": ["Running", "Succeeded", "Succeeded"],
                "gpu_request": pa.array([1, 0, 0], pa.int32()),
                "cpu_request_milli": [4000, 0, 0],
                "created_at": ts([start] * 3),
                "scheduled_at": ts([start + timedelta(seconds=s) for s in (1, 1, 2)]),
                "initialized_at": ts([start + timedelta(seconds=s) for s in (2, 3, 3)]),
                "containers_ready_at": ts([start + timedelta(seconds=s) for s in (5, 7, 4)]),
                "ready_at": ts([start + timedelta(seconds=s) for s in (5, 8, 4)]),
            }
        ),
    )


def test_fgd_per_node_and_pod_start(store: Store) -> None:
    add_inventory(store)
    expo = scrape(store)
    # Workload M: p1's shape (1 GPU, 4000 mCPU) 1/3, CPU-only (p2, p3) 2/3. A CPU-only pod
    # fragments all idle GPU milli of any node: A = 1/3 x 1000 + 2/3 x 1000 milli,
    # B = 1/3 x 0 + 2/3 x 2000 milli.
    assert series(expo, "sits_fgd_node_fragmentation_gpus") == {
        (("Hostname", "A"),): pytest.approx(1.0),
        (("Hostname", "B"),): pytest.approx(4 / 3),
    }
    # scheduled -> ready: ns has 4 s and 7 s, other 2 s.
    assert series(expo, "sits_pod_start_seconds") == {
        (("namespace", "ns"),): 5.5,
        (("namespace", "other"),): 2.0,
    }
    assert no_errors(expo)


# -- controller: quotas, errors, last decision ---------------------------------------------


def test_quotas_errors_and_last_decision(store: Store) -> None:
    rows = [
        # (ts, kind, namespace, name, action, current, proposed, outcome)
        (ago(90), "ResourceQuota", "ns", "sits", "quota-cpu", "2000", "3000", "recommended"),
        (ago(60), "ResourceQuota", "ns", "sits", "quota-cpu", "4000", "6000", "failed:http-409"),
        (ago(60), "Namespace", None, "ns2", "quota-gpu", None, "3", "recommended"),
        (ago(50), "ResourceQuota", "ns", "sits", "quota-memory", "1073741824", "2147483648", "ok"),
        (ago(40), "Node", None, "A", "fragmentation", "low", "high", "failed:unreachable"),
        (ago(30), "Pod", "ns", "p", "priority-class", None, "x", "failed:http-409"),
    ]
    cols = list(zip(*rows, strict=True))
    store.append(
        "decisions",
        pa.table(
            {
                "ts": ts(list(cols[0])),
                "kind": list(cols[1]),
                "namespace": list(cols[2]),
                "name": list(cols[3]),
                "action": list(cols[4]),
                "current": list(cols[5]),
                "proposed": list(cols[6]),
                "outcome": list(cols[7]),
            }
        ),
    )
    expo = scrape(store)
    assert series(expo, "sits_quota") == {
        (("kind", "current"), ("namespace", "ns"), ("resource", "requests.cpu")): 4.0,
        (("kind", "recommended"), ("namespace", "ns"), ("resource", "requests.cpu")): 6.0,
        (("kind", "current"), ("namespace", "ns"), ("resource", "requests.memory")): GIB,
        (("kind", "recommended"), ("namespace", "ns"), ("resource", "requests.memory")): 2 * GIB,
        (
            ("kind", "recommended"),
            ("namespace", "ns2"),
            ("resource", "requests.nvidia.com/gpu"),
        ): 3.0,
    }
    assert series(expo, "sits_controller_errors_total") == {
        (("reason", "http-409"),): 2.0,
        (("reason", "internal"),): 0.0,
        (("reason", "unreachable"),): 1.0,
    }
    last = one(expo, "sits_controller_last_decision_timestamp_seconds")
    assert last == ago(30).replace(tzinfo=UTC).timestamp()
    assert no_errors(expo)


def test_collector_last_seen_per_node_and_source(store: Store) -> None:
    store.append(
        "gpu_samples",
        pa.table({"ts": ts([ago(50), ago(5), ago(7)]), "node": ["n1", "n1", "n2"]}),
    )
    store.append("requests", pa.table({"ts": ts([ago(3)]), "node": ["n2"], "latency_s": [0.1]}))
    expo = scrape(store)
    assert series(expo, "sits_collector_last_seen_timestamp_seconds") == {
        (("Hostname", "n1"), ("source", "gpu_samples")): ago(5).replace(tzinfo=UTC).timestamp(),
        (("Hostname", "n2"), ("source", "gpu_samples")): ago(7).replace(tzinfo=UTC).timestamp(),
        (("Hostname", "n2"), ("source", "requests")): ago(3).replace(tzinfo=UTC).timestamp(),
    }
    # Capped to one node: the stalest (n2's oldest source is older than n1's) is kept.
    capped = scrape(store, max_nodes=1)
    nodes = {
        s.label("Hostname")
        for s in capped.samples
        if s.name == "sits_collector_last_seen_timestamp_seconds"
    }
    assert nodes == {"n2"}


# -- slow signals ---------------------------------------------------------------------------


def add_heatmap_requests(store: Store) -> None:
    """Model m: 1 s windows of 10k + 5 requests (throughput bin k of 10 rps), 3 windows per
    bin for k = 1..5, every request of bin k with latency P95 = ``P95[k]``."""
    p95 = {1: 0.1, 2: 0.11, 3: 0.12, 4: 0.5, 5: 1.5}
    times, lat = [], []
    second = 0
    for k, value in p95.items():
        for _ in range(3):
            second += 1
            start = ago(1000) + timedelta(seconds=second)
            n = 10 * k + 5
            times += [start + timedelta(microseconds=1000 * i) for i in range(n)]
            lat += [value] * n
    store.append(
        "requests",
        pa.table(
            {"ts": ts(times), "model": ["m"] * len(lat), "latency_s": lat, "ok": [True] * len(lat)}
        ),
    )


def test_knee_and_safe_max_from_the_heatmap(store: Store) -> None:
    add_heatmap_requests(store)
    # Chord from (10 rps, 0.1 s) to (50 rps, 1.5 s): the 30 rps bin lies deepest below it.
    expo = scrape(store, latency_slo_s=1.0)
    assert one(expo, "sits_knee_requests_per_second", model="m") == 30.0
    # P95 meets 1 s up to the 40 rps bin; the 50 rps bin breaks it.
    assert one(expo, "sits_safe_max_requests_per_second", model="m") == 40.0
    # A model's own SLO moves its safe maximum: 0.2 s breaks at the 40 rps bin.
    tight = scrape(store, latency_slo_s=1.0, latency_slo_by_model_s={"m": 0.2})
    assert one(tight, "sits_safe_max_requests_per_second", model="m") == 30.0
    assert no_errors(expo)


def add_classes(store: Store) -> None:
    """Four GPU workloads on node A: peaks of 1, 4 and 10 GiB, and one never measured."""
    store.append(
        "nodes",
        pa.table({"ts": ts([NOW]), "node": ["A"], "gpu_allocatable": pa.array([4], pa.int32())}),
    )
    pods = ["small", "mid", "big", "blind"]
    store.append(
        "pods",
        pa.table(
            {
                "ts": ts([NOW] * 4),
                "pod_uid": [f"u-{p}" for p in pods],
                "namespace": ["ns"] * 4,
                "pod": pods,
                "workload": pods,
                "node": ["A"] * 4,
                "phase": ["Running"] * 4,
                "gpu_request": pa.array([1] * 4, pa.int32()),
            }
        ),
    )
    peaks = {"small": 1 * GIB, "mid": 4 * GIB, "big": 10 * GIB}
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": ts([ago(60)] * 3),
                "node": ["A"] * 3,
                "gpu_uuid": ["G0", "G1", "G2"],
                "namespace": ["ns"] * 3,
                "pod": list(peaks),
                "fb_used_bytes": list(peaks.values()),
            }
        ),
    )


def test_memory_classes_per_workload(store: Store) -> None:
    add_classes(store)
    expo = scrape(store)
    assert series(expo, "sits_memory_class_workloads") == {
        (("class", "L1"),): 1.0,
        (("class", "L2"),): 1.0,
        (("class", "L3"),): 1.0,
        (("class", "unmeasured"),): 1.0,
    }


def test_gpu_trend_clusters_match_the_analysis(store: Store) -> None:
    """Two GPUs: one steady, one leaking; each its own cluster, as ``trends`` says. G0's
    index and model are known only from samples older than the fast window (the slow signal
    looks them up over its own window); G1's never: ``unknown``."""
    times = [ago(3600 - 60 * i) for i in range(60)]
    used = {"G0": [40 * GIB] * 60, "G1": [int(GIB * (10 + i)) for i in range(60)]}
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": ts(times * 2),
                "node": ["A"] * 120,
                "gpu_uuid": ["G0"] * 60 + ["G1"] * 60,
                "gpu_index": pa.array([2] * 60 + [None] * 60, pa.int16()),
                "model_name": [H100] * 60 + [None] * 60,
                "fb_used_bytes": used["G0"] + used["G1"],
                "fb_total_bytes": [80 * GIB] * 120,
            }
        ),
    )
    expo = scrape(store)
    got = series(expo, "sits_gpu_trend_cluster")
    result = cluster_trends(read_occupancy_series(store, since=ago(6 * 3600)))
    names = {"G0": ("2", H100), "G1": ("unknown", "unknown")}
    want = {
        (
            ("Hostname", m.node),
            ("UUID", m.key),
            ("gpu", names[m.key][0]),
            ("modelName", names[m.key][1]),
        ): float(c.label)
        for c in (*result.clusters, *result.noise)
        for m in c.members
    }
    assert got == want and len(got) == 2
    assert len(set(got.values())) == 2


# -- the slow cache ---------------------------------------------------------------------------


def test_slow_signals_run_in_the_background_and_are_cached(store: Store) -> None:
    add_heatmap_requests(store)
    add_inventory(store)
    add_smf_samples(store)  # every slow signal has data: none is retried early
    jobs: list[Callable[[], None]] = []
    collector, registry, tick = exporter(store, spawn=jobs.append, cache_s=15, slow_cache_s=300)

    def knee() -> list[float]:
        expo = parse_exposition(generate_latest(registry).decode())
        return [s.value for s in expo.samples if s.name == "sits_knee_requests_per_second"]

    assert knee() == []  # the scrape did not wait for the slow pass
    assert len(jobs) == 1
    assert knee() == [] and len(jobs) == 1  # one slow pass at a time
    jobs.pop()()
    assert knee() == [30.0]
    assert collector.slow_computations == 1
    tick.now_s += 299
    assert knee() == [30.0] and len(jobs) == 1  # the fast pass is due (cache_s), in the background
    jobs.pop()()
    assert collector.computations == 2
    assert collector.slow_computations == 1  # the slow one is cached for slow_cache_s
    tick.now_s += 1
    assert knee() == [30.0] and len(jobs) == 1  # due again: served stale meanwhile
    assert collector.close(timeout_s=0) is False  # a pass is pending
    jobs.pop()()
    assert collector.close(timeout_s=0) is True


def test_an_empty_slow_signal_is_retried_at_the_fast_cadence(store: Store) -> None:
    collector, registry, tick = exporter(store, cache_s=15, slow_cache_s=300)
    generate_latest(registry)
    assert collector.slow_computations == 1
    add_heatmap_requests(store)
    tick.now_s += 15
    expo = parse_exposition(generate_latest(registry).decode())
    assert collector.slow_computations == 2
    assert one(expo, "sits_knee_requests_per_second", model="m") == 30.0


def test_every_signal_is_described_once() -> None:
    names = [name for s in REGISTRY for name, _ in s.families]
    assert len(names) == len(set(names))
    assert {s.name for s in REGISTRY if s.slow} == {
        "heatmap",
        "memory_classes",
        "gpu_trends",
        "gpu_idle",
    }
