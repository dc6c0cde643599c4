"""The agent's ``--server-url ENGINE=URL`` builds the engine's collector from the mapping
table, refuses a malformed flag or an unknown engine at start, and loads nothing the agent
must not (the store, the service, the Kubernetes client)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import httpx
import pytest

from sits_observe.collectors.inference.engine import EngineCollector
from sits_observe.collectors.inference.triton import TritonCollector
from sits_observe.errors import ConfigError, UnknownNameError
from sits_observe.surfaces.cli.agent import collector_factories
from tests.engine_expositions import LAYOUTS, FakeEngine
from tests.unit.collectors.test_agent_imports import PROBE


def build(*specs: str) -> list[object]:
    factories = collector_factories("n1", [], None, False, [], server_urls=list(specs))
    with httpx.Client() as client:
        return [make(client) for make in factories]


def test_each_flag_builds_its_engines_collector_stamped_with_the_node() -> None:
    sglang, triton, epp = build(
        "sglang=http://10.0.0.7:30000/metrics",
        "triton=http://10.0.0.8:8002/metrics",
        "llm-d-epp=http://epp:9090/metrics?x=1",
    )
    assert isinstance(sglang, EngineCollector) and sglang.name == "sglang"
    assert isinstance(triton, TritonCollector)
    assert isinstance(epp, EngineCollector) and epp.url == "http://epp:9090/metrics?x=1"
    assert sglang.node == triton.node == epp.node == "n1"


def test_a_built_collector_reads_its_engine() -> None:
    (collector,) = build("trtllm=http://unused/metrics")
    assert isinstance(collector, EngineCollector)
    fake = FakeEngine(LAYOUTS["trtllm"])
    fake.serve(5)
    collector.collect_text(fake.exposition(), datetime(2026, 6, 1, tzinfo=UTC))
    fake.serve(7)
    result = collector.collect_text(fake.exposition(), datetime(2026, 6, 1, 0, 0, 9, tzinfo=UTC))
    assert result.rows == 1


@pytest.mark.parametrize("spec", ["http://no-engine/metrics", "sglang=", "=http://x"])
def test_a_malformed_flag_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match="ENGINE=URL"):
        build(spec)


def test_an_unknown_engine_is_refused_with_the_known_names() -> None:
    with pytest.raises(UnknownNameError, match="known: vllm, triton, sglang"):
        build("tgi=http://x/metrics")


def test_the_engine_collector_loads_nothing_the_agent_must_not() -> None:
    module = "sits_observe.collectors.inference.engine"
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert json.loads(out) == []
