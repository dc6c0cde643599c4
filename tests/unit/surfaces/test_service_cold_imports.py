"""``serve``'s cold start: what it imports before its port is up, and what it leaves for later.

The scheduler extender's first answer after a restart waits for every import ``serve`` does
before listening (docs/extender.md, cold start; bench/bench_extender_cold_start.py measures
it). The reports, the Kubernetes client (``serve`` without ``--kubeconfig`` /
``--in-cluster`` never needs it), the exporter's slow and cluster builders, the alert
notifier and the agent's shipper (httpx) are not needed for that answer and load on first
use. Each probe runs in a fresh interpreter: in the test process
everything is imported already, so a first-use import that broke (a cycle, a wrong name)
would show only here.

Not in the list: pandas and polars. pyarrow imports pandas itself on its first conversion
of Python or NumPy values (``pa.array``, ``to_numpy``), which the extender's view build
does, and the view's slow signals read through polars; both load before the first answer
however ``serve`` is wired.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Loaded on first use, never before ``serve`` listens.
LATER = (
    "kubernetes",
    "httpx",
    "sits_observe.reports.registry",
    "sits_observe.reports.recommend",
    "sits_observe.surfaces.alerts.notify",
    "sits_observe.collectors.agent.loop",
    "sits_observe.surfaces.service.exporter_signals_cluster",
    "sits_observe.surfaces.service.exporter_signals_slow",
    "sits_observe.surfaces.service.exporter_signals_idle",
)

#: What ``serve`` imports before it listens: its command (the flags' settings models), then
#: what ``run_service`` imports and builds (store, app, servers), then the app itself.
PROBE = """
import json, sys
from sits_observe.surfaces.cli.main import build_app
build_app("serve")
from sits_observe.store import Store
from sits_observe.surfaces.service.app import create_app
from sits_observe.surfaces.service.server import Listener, Servers, bind
from sits_observe.surfaces.service.settings import ServiceSettings

LATER = {later!r}
settings = ServiceSettings.model_validate({{"token": "t", "retention_interval_s": 0}})
with Store.open(sys.argv[1]) as store:
    app = create_app(settings, store)
    routes = sorted(r.path for r in app.routes)
    before = sorted(m for m in LATER if m in sys.modules)
    first_use = {{}}
    if {first_use!r}:
        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            auth = {{"Authorization": "Bearer t"}}
            unknown = client.get("/api/v1/reports/no-such-report", headers=auth)
            fleet = client.get("/api/v1/reports/fleet", headers=auth)
            metrics = client.get("/metrics")
        first_use = {{
            "unknown": [unknown.status_code, unknown.json()],
            "fleet": [fleet.status_code, fleet.json()],
            "metrics": [metrics.status_code, metrics.text],
        }}
    after = sorted(m for m in LATER if m in sys.modules)
    app.state.exporter.close()
print(json.dumps({{"routes": routes, "before": before, "after": after, "first_use": first_use}}))
"""


def probe(tmp_path: Path, *, first_use: bool) -> dict[str, object]:
    code = PROBE.format(later=LATER, first_use=first_use)
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "cold.duckdb")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)
    return found


def test_serve_listens_without_the_reports_kubernetes_or_the_slow_signals(
    tmp_path: Path,
) -> None:
    found = probe(tmp_path, first_use=False)
    assert found["before"] == [], f"serve imports {found['before']} before it listens"
    # Not vacuous: the app is the full service, extender included.
    routes = found["routes"]
    assert isinstance(routes, list)
    for path in ("/scheduler/prioritize", "/api/v1/reports/{name}", "/metrics", "/v1/traces"):
        assert path in routes


def test_the_reports_and_the_exporter_load_on_their_first_request(tmp_path: Path) -> None:
    found = probe(tmp_path, first_use=True)
    assert found["before"] == []
    answers = found["first_use"]
    assert isinstance(answers, dict)
    status, body = answers["unknown"]
    assert status == 404 and body["reason"] == "unknown_report"
    assert "fleet" in body["detail"]  # the registry loaded and listed the valid names
    status, body = answers["fleet"]
    assert (status, body["reason"]) == (404, "no_data")  # an empty store: the report ran
    status, text = answers["metrics"]
    assert status == 200
    # The first scrape's fast pass ran the cluster builders, imported on that call.
    for signal in ("fragmentation", "smf", "quotas", "pod_start"):
        assert f'sits_exporter_errors_total{{signal="{signal}"}} 0.0' in text
    after = found["after"]
    assert isinstance(after, list)
    assert "sits_observe.reports.registry" in after
    assert "sits_observe.surfaces.service.exporter_signals_cluster" in after
