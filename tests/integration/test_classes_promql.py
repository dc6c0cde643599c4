"""``classes --view classes`` from kube-state-metrics, dcgm-exporter and vLLM series in a real
VictoriaMetrics, against the DuckDB report on the same cluster and requests.

The cluster is the extender test's nodes (tests/integration/test_extender_view_promql.py)
with pods that carry a QoS class and a priority class: two vLLM replicas of one Deployment in
``government`` (the spec's SLA of 300 ms, a bound of vLLM's e2e buckets), one vLLM server in
``medical`` (120 ms, inside the first bucket), a 4-GPU training Job, a HAMi share and a CPU
pod. Three KSM scrapes and 20 dcgm-exporter scrapes go into DuckDB through the collectors'
parsers and into VictoriaMetrics as the same text at the same times. Every request goes into
DuckDB's ``requests`` table, and each server's ``/metrics`` (cumulative e2e latency, prompt
and generation token histograms of the requests finished before the scrape, starting from a
scrape of zeros) is stamped every 15 s. One replica is served by two engines (summed); the
medical server restarts half-way (its counters drop to 0: the store's ``increase()``).

Expected (analytics/classes/series.py): pods, QoS, priority, GPU requests, memory peaks and
classes, sharing, request counts and the SLA-violation rate at a bucket bound equal to
DuckDB's; the P95 latency at most one bucket above the exact P95; the sequence P95 the P95 of
the rank-paired bucket bounds, between the bounds the docstring states; the SLA-violation
rate inside a bucket too high by at most that bucket's share.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.domain.tables import REQUESTS
from sits_observe.reports import classes
from sits_observe.reports.result import Report
from sits_observe.reports.spec import PromQLReader
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.surfaces.cli.main import app
from tests.integration.promql_support import E2E_BOUNDS, VictoriaMetrics, grid_start, stamped
from tests.integration.test_extender_view_promql import (
    GPUS,
    _dcgm,
    _on_gpus,
    _pod,
    write_inventory,
)

STEP_S = 15
SCRAPES = 20
#: vLLM's token buckets (build_1_2_5_buckets up to a 10k context).
TOKEN_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
MEDICAL_SLA_S = 0.12  # the spec's example for "medical": inside the bucket (0, 0.3]
GOVERNMENT_SLA_S = 0.3  # a bucket bound
#: The spec's namespace SLA example, configured (no namespace has an SLA by default).
SLA_EXAMPLE = ("finance=0.015", f"medical={MEDICAL_SLA_S}", f"government={GOVERNMENT_SLA_S}")
assert GOVERNMENT_SLA_S in E2E_BOUNDS and E2E_BOUNDS[0] > MEDICAL_SLA_S

_RS = ("ReplicaSet", "llm-5d8f7c9b4")


def _with(pod: dict[str, Any], qos: str, priority: str | None) -> dict[str, Any]:
    pod["status"]["qosClass"] = qos
    if priority is not None:
        pod["spec"]["priorityClassName"] = priority
    return pod


def _pods() -> list[dict[str, Any]]:
    def llm(suffix: str) -> dict[str, Any]:
        name = f"llm-5d8f7c9b4-{suffix}"
        pod = _pod(name, "gpu-a", gpus=1, owner=_RS, namespace="government")
        return _with(pod, "Guaranteed", "ultra-low-latency")

    triage = _pod("triage-0", "gpu-d", gpus=1, namespace="medical")
    train = _pod("train-1", "gpu-b", gpus=4, namespace="train")
    return [
        llm("q2x7v"),
        llm("m9k4z"),
        _with(triage, "Burstable", "throughput-guaranteed"),
        _with(train, "Burstable", "best-effort"),
        _with(_pod("share-1", "gpu-c", gpus=1, share=30), "BestEffort", None),
        _with(_pod("web-1", "cpu-1"), "BestEffort", None),
    ]


#: server -> (namespace, pod, engines, restarts after this many scrapes or None)
SERVERS = {
    "a": ("government", "llm-5d8f7c9b4-q2x7v", 2, None),
    "b": ("government", "llm-5d8f7c9b4-m9k4z", 1, None),
    "c": ("medical", "triage-0", 1, SCRAPES // 2),
}


@dataclass
class Requests:
    latency_s: list[float]
    prompt: list[int]
    output: list[int]


def _cumulative(values: list[float], bounds: tuple[float, ...]) -> list[int]:
    array = np.asarray(values, dtype=float)
    return [int((array <= b).sum()) for b in bounds] + [int(array.size)]


def _histogram(name: str, labels: str, values: list[float], bounds: tuple[float, ...]) -> list[str]:
    counts = _cumulative(values, bounds)
    lines = [f"# TYPE {name} histogram"]
    for bound, count in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}')
    lines.append(f"{name}_sum{{{labels}}} {float(sum(values))!r}")
    lines.append(f"{name}_count{{{labels}}} {len(values)}")
    return lines


def _vllm_text(namespace: str, pod: str, engines: list[Requests]) -> str:
    """One server's ``/metrics``: the three histograms per engine (vLLM's names and labels;
    ``namespace`` / ``pod`` as a Kubernetes scrape relabels them)."""
    lines: list[str] = []
    for engine, done in enumerate(engines):
        labels = f'model_name="llama-3-8b",engine="{engine}",namespace="{namespace}",pod="{pod}"'
        lines += _histogram("vllm:e2e_request_latency_seconds", labels, done.latency_s, E2E_BOUNDS)
        lines += _histogram(
            "vllm:request_prompt_tokens", labels, [float(v) for v in done.prompt], TOKEN_BOUNDS
        )
        lines += _histogram(
            "vllm:request_generation_tokens", labels, [float(v) for v in done.output], TOKEN_BOUNDS
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Loaded:
    store: Store
    client: PromQLClient
    vm_url: str
    window: Window
    #: (namespace, pod) -> every request it served in the window
    served: dict[tuple[str, str], Requests]
    scrapes: list[datetime]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("classes_promql")
    vm = VictoriaMetrics(root / "vm")
    start = grid_start(datetime.now(UTC), STEP_S, timedelta(minutes=10))
    times = [start + timedelta(seconds=STEP_S * k) for k in range(SCRAPES)]
    ksm_times = times[::8][:3]
    pods = _pods()
    rng = np.random.default_rng(23)
    body: list[str] = []
    served = {(ns, pod): Requests([], [], []) for ns, pod, _, _ in SERVERS.values()}
    with Store.open(root / "sits.duckdb") as store:
        write_inventory(store, body, [(at, pods) for at in ksm_times])
        placed = _on_gpus(pods)
        for at in times:
            for node in sorted(GPUS):
                text = _dcgm(node, placed[node], rng)
                store.append(
                    "gpu_samples", parse_dcgm(text, now=at, node=None).tables["gpu_samples"]
                )
                body.append(stamped(text, at))
        requests: list[dict[str, Any]] = []
        for namespace, pod, engines, restart in SERVERS.values():
            since_start = [Requests([], [], []) for _ in range(engines)]
            for k, at in enumerate(times):
                if k == restart:  # a new process: its counters start again from 0
                    since_start = [Requests([], [], []) for _ in range(engines)]
                if k > 0:
                    n = int(rng.integers(15, 40))
                    latency = rng.lognormal(np.log(0.5), 0.7, n)
                    prompt = rng.integers(20, 3000, n)
                    output = rng.integers(1, 1500, n)
                    offsets = rng.uniform(0.01, STEP_S - 0.01, n)
                    for i in range(n):
                        done = since_start[i % engines]
                        done.latency_s.append(float(latency[i]))
                        done.prompt.append(int(prompt[i]))
                        done.output.append(int(output[i]))
                        ts = at - timedelta(seconds=STEP_S) + timedelta(seconds=float(offsets[i]))
                        requests.append(
                            {
                                "ts": ts.replace(tzinfo=None),
                                "model": "llama-3-8b",
                                "latency_s": float(latency[i]),
                                "prompt_tokens": int(prompt[i]),
                                "output_tokens": int(output[i]),
                                "ok": True,
                                "namespace": namespace,
                                "pod": pod,
                            }
                        )
                    all_of = served[(namespace, pod)]
                    all_of.latency_s.extend(float(v) for v in latency)
                    all_of.prompt.extend(int(v) for v in prompt)
                    all_of.output.extend(int(v) for v in output)
                body.append(stamped(_vllm_text(namespace, pod, since_start), at))
        store.append("requests", pa.Table.from_pylist(requests, schema=REQUESTS.schema))
    vm.import_text("".join(body))
    window = Window(
        (start - timedelta(seconds=30)).replace(tzinfo=None),
        (times[-1] + timedelta(seconds=10)).replace(tzinfo=None),
        "given",
    )
    store = Store.open(root / "sits.duckdb", read_only=True)
    client = PromQLClient(vm.base)
    try:
        scrapes = [t.replace(tzinfo=None) for t in times]
        yield Loaded(store, client, vm.base, window, served, scrapes)
    finally:
        client.close()
        store.close()
        vm.stop()


def _both(loaded: Loaded, window: Window | None = None, **settings: Any) -> tuple[Report, Report]:
    query = classes.ClassQuery(**{"sla": SLA_EXAMPLE, **settings})
    duck = classes.build(loaded.store, window or loaded.window, query)
    prom = classes.build_promql(PromQLReader(loaded.client), window or loaded.window, query)
    return duck, prom


def _rows(report: Report) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["namespace"], r["name"]): r for r in report.main.rows.to_pylist()}


_EXACT = (
    "pods",
    "qos_class",
    "priority_class",
    "gpu_request",
    "peak_gpu_memory_bytes",
    "peak_total_gpu_memory_bytes",
    "memory_source",
    "shared_gpu",
    "memory_class",
    "fitting_tier",
    "exclusive_gpu",
    "gpu_memory_share_ratio",
    "requests",
    "sla_p99_s",
    "time_slice_s",
    "preemption_policy",
)


def _upper(values: list[float], bounds: tuple[float, ...]) -> npt.NDArray[np.float64]:
    """Each value at its bucket's upper bound, as the histograms place it."""
    index = np.searchsorted(np.asarray(bounds), np.asarray(values), side="left")
    return np.asarray(bounds, dtype=float)[index]


def _widest(values: list[float], bounds: tuple[float, ...]) -> float:
    """Width of the widest bucket holding the two order statistics the P95 lies between."""
    ordered = np.sort(values)
    h = (ordered.size - 1) * 0.95
    edges = np.asarray((0.0, *bounds))
    widths = []
    for i in {int(np.floor(h)), int(np.ceil(h))}:
        j = int(np.searchsorted(edges[1:], ordered[i], side="left"))
        widths.append(edges[j + 1] - edges[j])
    return float(max(widths))


def test_pods_memory_and_counts_are_the_duckdb_rows(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    left, right = _rows(duck), _rows(prom)
    assert (
        set(left)
        == set(right)
        == {
            ("government", "llm-5d8f7c9b4-m9k4z"),
            ("government", "llm-5d8f7c9b4-q2x7v"),
            ("medical", "triage-0"),
            ("serve", "share-1"),
            ("train", "train-1"),
        }
    )  # web-1 asks for no GPU
    for key, row in right.items():
        assert {c: row[c] for c in _EXACT} == {c: left[key][c] for c in _EXACT}, key
    # The data exercise what is compared: QoS, priority, several GPUs, requests per server.
    train = right[("train", "train-1")]
    assert train["peak_total_gpu_memory_bytes"] > train["peak_gpu_memory_bytes"] > 0
    assert right[("medical", "triage-0")]["gpu_memory_share_ratio"] is not None  # Burstable
    for (namespace, pod), served in loaded.served.items():
        assert right[(namespace, pod)]["requests"] == len(served.latency_s) > 0
    assert prom.facts["source"] == "promql" and any("ESTIMATES" in n for n in prom.notes)
    assert any("medical/triage-0" in n for n in prom.notes)  # the restarted server


def test_p95_latency_within_one_bucket_above_the_exact(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    left, right = _rows(duck), _rows(prom)
    for key, served in loaded.served.items():
        exact, estimate = left[key]["p95_latency_s"], right[key]["p95_latency_s"]
        assert exact == pytest.approx(float(np.quantile(served.latency_s, 0.95)))
        assert 0 <= estimate - exact < _widest(served.latency_s, E2E_BOUNDS), key
        placed = np.quantile(_upper(served.latency_s, E2E_BOUNDS), 0.95)
        assert estimate == pytest.approx(float(placed))


def test_sequence_p95_is_the_rank_paired_bounds(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    left, right = _rows(duck), _rows(prom)
    for key, served in loaded.served.items():
        prompt = np.sort(_upper([float(v) for v in served.prompt], TOKEN_BOUNDS))
        output = np.sort(_upper([float(v) for v in served.output], TOKEN_BOUNDS))
        estimate = right[key]["sequence_p95_tokens"]
        assert estimate == pytest.approx(float(np.quantile(prompt + output, 0.95)))
        # The stated bounds of the exact P95 hold on these requests ...
        exact = left[key]["sequence_p95_tokens"]
        lower = max(np.quantile(served.prompt, 0.95), np.quantile(served.output, 0.95))
        upper = np.quantile(served.prompt, 0.975) + np.quantile(served.output, 0.975)
        assert lower <= exact <= upper, key
        # ... and the estimate is never below the lower one.
        assert estimate >= lower


def test_sla_violation_rate_exact_on_a_bound_else_within_its_bucket(loaded: Loaded) -> None:
    duck, prom = _both(loaded)
    left, right = _rows(duck), _rows(prom)
    for key in (("government", "llm-5d8f7c9b4-q2x7v"), ("government", "llm-5d8f7c9b4-m9k4z")):
        assert right[key]["sla_p99_s"] == GOVERNMENT_SLA_S
        assert right[key]["sla_violation_rate"] == pytest.approx(left[key]["sla_violation_rate"])
        assert right[key]["proposed_priority_class"] == left[key]["proposed_priority_class"]
    key = ("medical", "triage-0")
    latency = np.asarray(loaded.served[key].latency_s)
    assert right[key]["sla_p99_s"] == MEDICAL_SLA_S
    exact, estimate = left[key]["sla_violation_rate"], right[key]["sla_violation_rate"]
    assert exact == pytest.approx(float((latency > MEDICAL_SLA_S).mean()))
    share = float((latency <= E2E_BOUNDS[0]).mean())  # the bucket (0, 0.3] holds the SLA
    assert 0 < estimate - exact <= share + 1e-12


def test_a_window_that_starts_between_scrapes_counts_from_the_scrape_before(
    loaded: Loaded,
) -> None:
    """Since 5 ms after the sixth scrape (no request finished in those 5 ms): the counters'
    start values are that scrape's, so the counts are the request log's again, the restarted
    server's included (VictoriaMetrics' increase() starts from the same sample)."""
    since = loaded.scrapes[5] + timedelta(milliseconds=5)
    window = Window(since, loaded.window.until, "given")
    duck, prom = _both(loaded, window)
    left, right = _rows(duck), _rows(prom)
    for key in loaded.served:
        assert right[key]["requests"] == left[key]["requests"] > 0, key
        assert left[key]["requests"] < len(loaded.served[key].latency_s)  # the window cut
        assert 0 <= right[key]["p95_latency_s"] - left[key]["p95_latency_s"] < 5.0
    government = ("government", "llm-5d8f7c9b4-q2x7v")
    assert right[government]["sla_violation_rate"] == pytest.approx(
        left[government]["sla_violation_rate"]
    )


def test_by_workload_pools_the_replicas(loaded: Loaded) -> None:
    duck, prom = _both(loaded, by="workload")
    left, right = _rows(duck), _rows(prom)
    assert set(left) == set(right)
    llm = right[("government", "llm")]
    assert llm["pods"] == left[("government", "llm")]["pods"] == 2
    assert llm["requests"] == left[("government", "llm")]["requests"]


def test_cli_reads_the_promql_store(loaded: Loaded) -> None:
    args = ["classes", "--promql-url", loaded.vm_url, "--since", "2h", "-o", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    names = {(r["namespace"], r["name"]) for r in document["rows"]}
    assert ("train", "train-1") in names and len(names) == 5
    assert any("ESTIMATES" in n for n in document["notes"])
