"""The agent runs on every GPU node: it must not load the store (DuckDB) or the service.

Nor the Kubernetes client: the agent has no API access (collectors/rbac.yaml binds no role to
its account and mounts no token), so none of the collectors it builds may need one.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', 'fastapi',
      'uvicorn', 'polars', 'streamlit', 'kubernetes') or m.startswith(('sits_observe.store',
      'sits_observe.surfaces.service')))))
"""


@pytest.mark.parametrize(
    "module",
    [
        "sits_observe.collectors.agent",
        "sits_observe.surfaces.cli.agent",
        # What surfaces.cli.agent.collector_factories builds, and the client they share.
        "sits_observe.collectors.dcgm",
        "sits_observe.collectors.cgroup.collector",
        "sits_observe.collectors.nvml",
        "sits_observe.collectors.inference.vllm",
        "sits_observe.collectors.cgroup.numa",
        "sits_observe.collectors.topology",
        "sits_observe.collectors.sync_delay",
        "sits_observe.collectors.http",
    ],
)
def test_agent_modules_do_not_load_the_store_or_the_service(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert json.loads(out) == []
