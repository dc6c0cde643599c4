"""Device affinity over real HTTP on loopback: kube-scheduler-shaped filter calls to the
service app (uvicorn in a thread) and to ``sits-observe serve --extender-scoring-affinity-file``
(a child process), on the cluster of :mod:`tests.unit.control.extender_support`.

The pod is a 1-GPU pod declaring ``sits.io/gpu-memory: 20Gi`` (so the L40S node's 47 GiB free
is enough) and ``sits.io/model: llama-70b-instruct`` at ``fp8``; the rule keeps that model to
Hopper. Without the rule gpu-c (L40S, Ada) passes; with it gpu-c is refused as unresolvable
(preemption cannot change a node's GPU) with a message naming the product and the rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.extender import ExtenderSettings
from tests.integration.serve_process import cli_command, free_port
from tests.integration.test_extender_http import (
    FILTER,
    KUBE_SCHEDULER_HEADERS,
    TOKEN,
    ServedApp,
)
from tests.unit.control.extender_payloads import (
    CANDIDATES,
    POD_1GPU_JSON,
    args_by_name,
    args_with_nodes,
)
from tests.unit.control.extender_support import NOW, write_cluster

RULES_YAML = "rules:\n  - model_pattern: 'llama-70b.*'\n    generations: [hopper]\n"
GPU_C_MESSAGE = (
    "node's GPU product NVIDIA L40S (ada) is not one the device affinity rule "
    "llama-70b.* -> generations hopper allows for model llama-70b-instruct at fp8"
)


def llama_pod() -> str:
    pod = json.loads(POD_1GPU_JSON)
    pod["metadata"]["labels"]["sits.io/precision"] = "fp8"
    pod["metadata"]["annotations"] = {
        "sits.io/model": "llama-70b-instruct",
        "sits.io/gpu-memory": "20Gi",
    }
    return json.dumps(pod)


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "affinity-rules.yaml"
    path.write_text(RULES_YAML, encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "affinity.duckdb") as s:
        write_cluster(s)
        yield s


def served(store: Store, scoring: ScoringSettings) -> ServedApp:
    settings = ServiceSettings(token=TOKEN, retention_interval_s=0)
    extender = ExtenderSettings(scoring=scoring)
    return ServedApp(create_app(settings, store, clock=lambda: NOW, extender=extender))


def post(client: httpx.Client, body: str) -> dict[str, object]:
    response = client.post(FILTER, content=body.encode(), headers=KUBE_SCHEDULER_HEADERS)
    assert response.status_code == 200
    result: dict[str, object] = response.json()
    return result


def test_mismatched_node_is_refused_over_http(store: Store, rules: Path) -> None:
    with served(store, ScoringSettings()) as client:
        plain = post(client, args_by_name(llama_pod()))
    assert plain["NodeNames"] == ["gpu-a", "gpu-b", "gpu-c", "new-node"]

    with served(store, ScoringSettings(affinity_file=rules)) as client:
        result = post(client, args_by_name(llama_pod()))
        with_nodes = post(client, args_with_nodes(llama_pod()))
    assert result["Error"] == ""
    assert result["NodeNames"] == ["gpu-a", "gpu-b", "new-node"]
    assert result["FailedAndUnresolvableNodes"] == {
        "cpu-1": "node has no allocatable nvidia.com/gpu",
        "gpu-c": GPU_C_MESSAGE,
    }
    failed = result["FailedNodes"]
    assert isinstance(failed, dict) and set(failed) == {"gpu-d"}  # full, as without rules
    # nodeCacheCapable: false: the node objects come back without gpu-c.
    nodes = with_nodes["Nodes"]
    assert isinstance(nodes, dict)
    names = [item["metadata"]["name"] for item in nodes["items"]]
    assert names == [n for n in CANDIDATES if n not in ("gpu-c", "cpu-1", "gpu-d")]
    assert with_nodes["FailedAndUnresolvableNodes"] == result["FailedAndUnresolvableNodes"]


@pytest.mark.slow
def test_serve_flag_enforces_the_rules_file(tmp_path: Path, rules: Path) -> None:
    db = tmp_path / "serve.duckdb"
    with Store.open(db) as s:
        write_cluster(s, datetime.now(UTC))
    port = free_port()
    log_path = tmp_path / "serve.log"
    command = [
        *cli_command(),
        "serve",
        "--db",
        str(db),
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--extender-scoring-affinity-file",
        str(rules),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SITS_TOKEN": TOKEN}
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "serve not ready"
                time.sleep(0.1)
            body = args_by_name(llama_pod()).encode()
            result = httpx.post(url + FILTER, content=body, headers=KUBE_SCHEDULER_HEADERS).json()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert result["NodeNames"] == ["gpu-a", "gpu-b", "new-node"]
    assert result["FailedAndUnresolvableNodes"]["gpu-c"] == GPU_C_MESSAGE


def test_serve_refuses_a_missing_rules_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = subprocess.run(
        [
            *cli_command(),
            "serve",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--port",
            str(free_port()),
            "--extender-scoring-affinity-file",
            str(missing),
        ],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "SITS_TOKEN": TOKEN},
        timeout=60,
    )
    assert done.returncode != 0
    assert f"cannot read affinity rules {missing}" in done.stderr
