"""The kube-state-metrics inventory source's rules, on a fake Prometheus API.

The transport is a fake (httpx.MockTransport) holding a few KSM series with their samples; it
answers a range selector with the raw samples in the range and ``last_over_time`` with the
newest value, as the Prometheus API documents. The agreement with DuckDB on a real
VictoriaMetrics is tests/integration/test_promql_kube.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from sits_observe.errors import StoreError
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import KsmInventory, PromQLKubeSource

T = datetime(2026, 11, 1, 12, 0)
S = 30.0  # seconds between scrapes
_EXPR = re.compile(r"^(last_over_time\()?([a-z_]+)\{([^}]*)\}\[(\d+)ms\]\)?( == 1)?$")

Series = tuple[dict[str, str], list[tuple[float, float]]]


def _at(k: int) -> float:
    """Unix seconds of scrape ``k`` (0 = the newest, at T)."""
    return T.replace(tzinfo=UTC).timestamp() - k * S


def _series() -> dict[str, list[Series]]:
    pod = {"namespace": "ml", "pod": "train", "uid": "u1"}
    late = {"namespace": "ml", "pod": "late", "uid": "u2"}
    gone = {"namespace": "ml", "pod": "gone", "uid": "u3"}
    every = [(_at(k), 1.0) for k in (2, 1, 0)]

    def req(who: dict[str, str], container: str, resource: str, value: float,
            node: str = "n1", ks: tuple[int, ...] = (2, 1, 0)) -> Series:  # fmt: skip
        labels = {**who, "container": container, "node": node, "resource": resource}
        return labels, [(_at(k), value) for k in ks]

    return {
        "kube_node_status_allocatable": [
            ({"node": "n1", "resource": "cpu"}, [(_at(0), 31.5)]),
            ({"node": "n1", "resource": "nvidia_com_gpu"}, [(_at(0), 8.0)]),
        ],
        "kube_node_status_condition": [
            ({"node": "n1", "condition": "Ready", "status": s}, [(_at(0), float(s == "unknown"))])
            for s in ("true", "false", "unknown")
        ],
        "kube_node_labels": [({"node": "n1", "label_nvidia_com_gpu_product": "L4"}, every)],
        "kube_pod_info": [
            ({**pod, "node": "n1", "created_by_kind": "Job"}, every),
            ({**late, "node": ""}, [(_at(2), 1.0)]),  # Pending, then bound to n1
            ({**late, "node": "n1"}, [(_at(1), 1.0), (_at(0), 1.0)]),
            ({**gone, "node": "n1"}, [(_at(2), 1.0), (_at(1), 1.0)]),  # deleted before T
        ],
        "kube_pod_status_phase": [
            ({**pod, "phase": p}, [(_at(0), float(p == "Running"))]) for p in ("Pending", "Running")
        ],
        "kube_pod_container_resource_requests": [
            req(pod, "main", "cpu", 2.5),
            req(pod, "main", "nvidia_com_gpu", 1.0),
            req(pod, "main", "nvidia_com_gpucores", 30.0),
            req(pod, "main", "nvidia_com_gpumem_percentage", 25.0),
            req(late, "main", "nvidia_com_gpu", 2.0, node="", ks=(2,)),
            req(late, "main", "nvidia_com_gpu", 2.0, ks=(1, 0)),
            req(late, "main", "nvidia_com_gpucores", 50.0, ks=(1, 0)),  # a share of 2 GPUs
            req(gone, "main", "cpu", 9.0, ks=(2, 1)),
        ],
        "kube_pod_init_container_resource_requests": [
            req(pod, "proxy", "cpu", 0.25),
            req(pod, "fetch", "cpu", 4.0),
        ],
        "kube_pod_init_container_info": [
            ({**pod, "container": "proxy", "restart_policy": "Always"}, every)
        ],
    }


def _source(
    series: dict[str, list[Series]], seen: list[str], matchers: str = ""
) -> PromQLKubeSource:
    def handler(request: httpx.Request) -> httpx.Response:
        expr, at = request.url.params["query"], float(request.url.params["time"])
        seen.append(expr)
        match = _EXPR.match(expr)
        assert match, expr
        last, family, matchers, span_ms, is_one = match.groups()
        start = at - int(span_ms) / 1000
        result = []
        for labels, points in series.get(family, []):
            kept = [(t, v) for t, v in points if start < t <= at]
            if not kept or not all(_matches(labels, m) for m in matchers.split(",") if m):
                continue
            if is_one and kept[-1][1] != 1:
                continue
            metric = {"__name__": family, **labels}
            if last:
                result.append({"metric": labels, "value": [at, str(kept[-1][1])]})
            else:
                result.append({"metric": metric, "values": [[t, str(v)] for t, v in kept]})
        kind = "vector" if last else "matrix"
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": kind, "result": result}}
        )

    transport = httpx.MockTransport(handler)
    client = PromQLClient("http://prom:9090", client=httpx.Client(transport=transport))
    return PromQLKubeSource(client, matchers=matchers)


def _matches(labels: dict[str, str], matcher: str) -> bool:
    name, op, value = re.match(r'(\w+)(=~|=)"(.*)"', matcher).groups()  # type: ignore[union-attr]
    got = labels.get(name, "")
    return bool(re.fullmatch(value, got)) if op == "=~" else got == value


def _read() -> KsmInventory:
    source = _source(_series(), [])
    return source.inventory(T - timedelta(minutes=5), T + timedelta(seconds=1), lookback_s=300)


def test_nodes_from_allocatable_condition_and_labels() -> None:
    ksm = _read()
    (node,) = ksm.nodes.to_pylist()
    assert node["node"] == "n1" and node["ts"] == T == ksm.nodes_at
    assert node["cpu_allocatable_milli"] == 31500 and node["gpu_allocatable"] == 8
    assert node["gpu_product"] == "L4"
    assert node["ready"] is False  # Ready is unknown: not schedulable, as the collector reads it


def test_pods_of_the_newest_scrape_with_the_inventory_rules() -> None:
    ksm = _read()
    pods = {p["pod"]: p for p in ksm.pods.to_pylist()}
    assert sorted(pods) == ["late", "train"]  # "gone" ended a scrape before T
    train = pods["train"]
    # max(app 2500 + sidecar 250, init 4000 + sidecar 250)
    assert train["cpu_request_milli"] == 4250
    assert (train["gpu_request"], train["gpu_milli"]) == (1, 300)  # HAMi: the larger percent
    assert (train["node"], train["phase"], train["owner_kind"]) == ("n1", "Running", "Job")
    late = pods["late"]
    assert (late["node"], late["gpu_request"], late["gpu_milli"]) == ("n1", 2, 1000)
    assert late["phase"] is None  # no phase series
    assert {p["pod"] for p in ksm.workload.to_pylist()} == {"train", "late", "gone"}
    gone = next(p for p in ksm.workload.to_pylist() if p["pod"] == "gone")
    assert gone["cpu_request_milli"] == 9000
    assert "kube_pod_annotations" in ksm.absent and "kube_node_labels" not in ksm.absent


def test_matchers_reach_every_selector() -> None:
    seen: list[str] = []
    source = _source(_series(), seen, matchers='job="ksm"')
    ksm = source.inventory(None, T + timedelta(seconds=1), lookback_s=300)
    assert ksm.nodes.num_rows == 0  # no series carries job="ksm"
    assert seen and all('job="ksm"' in e for e in seen)


def test_an_empty_range_is_refused() -> None:
    source = _source({}, [])
    with pytest.raises(StoreError, match="must be positive"):
        source.inventory(None, T, lookback_s=0)
    with pytest.raises(StoreError, match="empty time range"):
        source.inventory(T, T, lookback_s=60)
