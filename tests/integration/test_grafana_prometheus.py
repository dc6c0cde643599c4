"""Every panel of every generated dashboard returns data from a real Prometheus.

The embedded demo (simulated cluster -> agents -> ``serve``'s app, all on loopback) feeds the
service; a real Prometheus (Debian package) scrapes its ``/metrics`` and every simulated
node's dcgm-exporter every second, adding ``cluster="demo"`` to both as a relabeling or an
external label would; then each panel target expression, with the template variables
substituted as Grafana would (the "All" value ``.*``, and the first value its
``label_values`` query returns), is sent to Prometheus's ``/api/v1/query`` and must return at
least one series. Every failure is listed in one assertion message.

The simulator renders dcgm-exporter's default counters but not ``DCGM_FI_PROF_SM_ACTIVE``
nor ``DCGM_FI_DEV_XID_ERRORS`` (sits_observe/lab/cluster/render.py): the panels reading only
those must run without error but may be empty (:data:`NOT_SIMULATED`). Separately, sits and
DCGM series of the same GPUs must join on the labels both carry.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sits_observe.lab.demo.demo import DEMO_EXPORTER, Demo, DemoSettings
from sits_observe.reports.registry import find_report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.surfaces.grafana import PanelQuery, dashboards, expand, queries
from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.panels import Json

pytestmark = [pytest.mark.slow, pytest.mark.k8s]

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
#: Seconds the demo gets to fill every table the signals read.
FILL_S = 90.0
#: Seconds every panel gets to return data once Prometheus scrapes (a derived-signal pass
#: is cached 15 s, rate() needs two samples in its 1 m window).
ANSWER_S = 90.0
#: dcgm-exporter fields the simulated exporters do not render: a panel whose DCGM fields are
#: all here may return nothing from the demo (it still has to run).
NOT_SIMULATED = frozenset({m.DCGM_SM_ACTIVE, m.DCGM_XID})
#: The cluster label every scraped series gets (as a relabeling or external label would).
CLUSTER = "demo"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    settings = DemoSettings(
        nodes=2,
        gpus_per_node=4,
        db_path=tmp_path / "demo.duckdb",
        workdir=tmp_path / "demo",
        seed=5,
        inventory_interval_s=1,
        controller_interval_s=2,
    )
    with Demo(settings) as running:
        deadline = time.monotonic() + FILL_S
        tables = ("gpu_samples", "container_samples", "requests", "server_windows", "pods")
        while time.monotonic() < deadline:
            counts = running.counts()
            if all(counts[t] > 0 for t in (*tables, "decisions")):
                break
            time.sleep(0.5)
        yield running


@pytest.fixture
def prometheus(demo: Demo, tmp_path: Path) -> Iterator[httpx.Client]:
    if not Path(PROMETHEUS).is_file():
        pytest.skip(f"prometheus not installed at {PROMETHEUS} (Debian package prometheus)")
    target = demo.service_url.removeprefix("http://")
    assert demo.runtime is not None
    dcgm = [e.base_url.removeprefix("http://") for e in demo.runtime.endpoints.values()]
    cluster = [{"target_label": "cluster", "replacement": CLUSTER}]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "sits",
                "static_configs": [{"targets": [target]}],
                "relabel_configs": cluster,
            },
            {
                "job_name": "dcgm",
                "static_configs": [{"targets": dcgm}],
                "relabel_configs": cluster,
            },
        ],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if client.get("/-/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)
        yield client
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
        log.close()


def query(client: httpx.Client, expr: str) -> list[Any]:
    response = client.get("/api/v1/query", params={"query": expr})
    body = response.json()
    if response.status_code != 200 or body.get("status") != "success":
        raise AssertionError(f"{body.get('errorType')}: {body.get('error')}")
    result: list[Any] = body["data"]["result"]
    return result


def wait_for_scrapes(client: httpx.Client, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = query(client, 'count_over_time(up{job="sits"}[5m])')
        if result and float(result[0]["value"][1]) >= count:
            return
        time.sleep(1)
    raise AssertionError(f"prometheus did not scrape the service {count} times")


def variable_values(client: httpx.Client, model: Json) -> dict[str, list[str]]:
    """Each query variable's values, as its ``label_values(metric, label)`` would list."""
    values = {}
    for variable in model["templating"]["list"]:
        if variable["type"] != "query":
            continue
        inner = variable["query"]["query"].removeprefix("label_values(").removesuffix(")")
        metric, label = (part.strip() for part in inner.rsplit(",", 1))
        metric = expand(metric, {"cluster": ".*"})  # the variables it is scoped by
        response = client.get(f"/api/v1/label/{label}/values", params={"match[]": metric})
        values[variable["name"]] = sorted(response.json().get("data") or [])
    return values


def failures(client: httpx.Client) -> list[str]:
    """Every (dashboard, panel, substitution) whose expression returns nothing or fails."""
    problems = []
    for model in dashboards().values():
        values = variable_values(client, model)
        empty = [f"${name}" for name, found in values.items() if not found]
        if empty:
            problems.append(f"{model['title']}: variables without values: {', '.join(empty)}")
        substitutions = {
            "All": dict.fromkeys(values, ".*"),
            "first value": {name: (found or [".*"])[0] for name, found in values.items()},
        }
        for q in queries(model):
            problems.extend(check(client, q, substitutions))
    return problems


def without_absent_knees(problems: list[str], demo: Demo) -> list[str]:
    """``problems`` less the empty knee panels, when the heatmap of the exporter's window
    (the same analysis, run here on the demo's store) finds no knee for any model either:
    whether the demo's load has a knee after three minutes depends on its load wave, and
    an empty panel is then the right answer. A knee the analysis finds must be on the panel."""
    knees = [p for p in problems if "sits_knee_requests_per_second" in p and "empty" in p]
    if not knees:
        return problems
    heat = DEMO_EXPORTER.heatmap
    spec = find_report("heatmap")
    query = spec.validate(
        {
            "bin_s": heat.window_s,
            "throughput_bin_rps": heat.throughput_bin_rps,
            "latency_bin_ms": heat.latency_bin_ms,
            "min_bin_requests": heat.min_bin_requests,
            "slo_ms": heat.slo_ms,
            "by": "model",
            "table": "cells",
        }
    )
    assert demo.store is not None
    request = WindowRequest(since_s=DEMO_EXPORTER.heatmap_since_s)
    limits = run_report(spec, demo.store, request, query).table("limits").records()
    if any(row["knee_rps"] is not None for row in limits):
        return problems
    return [p for p in problems if p not in knees]


def without_absent_dra(problems: list[str], demo: Demo) -> list[str]:
    """``problems`` less the empty DRA panels when the demo's store holds no DRA device: the
    exporter writes no ``sits_dra_*`` series without a DRA snapshot (the demo's nodes serve
    their GPUs through the device plugin), and an empty panel is then the right answer."""
    dra = [p for p in problems if "sits_dra_" in p and "empty" in p]
    if not dra:
        return problems
    assert demo.store is not None
    if demo.store.scalar("SELECT count(*) FROM dra_devices"):
        return problems
    return [p for p in problems if p not in dra]


def check(
    client: httpx.Client, q: PanelQuery, substitutions: dict[str, dict[str, str]]
) -> list[str]:
    problems = []
    fields = set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", q.expr))
    may_be_empty = bool(fields) and fields <= NOT_SIMULATED
    for how, variables in substitutions.items():
        expr = expand(q.expr, variables)
        try:
            if not query(client, expr) and not may_be_empty:
                problems.append(f"{q.dashboard} / {q.panel} [{how}]: empty: {expr}")
        except AssertionError as exc:
            problems.append(f"{q.dashboard} / {q.panel} [{how}]: {exc}: {expr}")
    return problems


def test_every_panel_query_returns_data_from_a_real_prometheus(
    demo: Demo, prometheus: httpx.Client
) -> None:
    wait_for_scrapes(prometheus, 5, 60)
    deadline = time.monotonic() + ANSWER_S
    problems = without_absent_dra(without_absent_knees(failures(prometheus), demo), demo)
    while problems and time.monotonic() < deadline:
        time.sleep(3)
        problems = without_absent_dra(without_absent_knees(failures(prometheus), demo), demo)
    assert not problems, f"{len(problems)} panel queries without data:\n" + "\n".join(problems)
    check_gpu_join(prometheus)


def check_gpu_join(client: httpx.Client) -> None:
    """Every GPU the exporter has framebuffer occupancy for is matched by the simulated
    dcgm-exporter's series of that GPU on (cluster, Hostname, gpu, UUID)."""
    key = ", ".join(m.GPU_KEY)
    sits = f"max by ({key}) ({m.FB_USED})"
    joined = f"count({sits} and on ({key}) max by ({key}) ({m.DCGM_GPU_UTIL}))"
    deadline = time.monotonic() + ANSWER_S
    while True:
        gpus = query(client, f"count({sits})")
        both = query(client, joined)
        if gpus and both and both[0]["value"][1] == gpus[0]["value"][1]:
            break
        assert time.monotonic() < deadline, f"sits GPUs {gpus}, joined with DCGM {both}"
        time.sleep(3)
    assert int(gpus[0]["value"][1]) == 2 * 4  # every GPU of the demo's 2 nodes x 4 GPUs
