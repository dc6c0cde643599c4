"""``serve``'s cold start: what it imports before its port is up, and what it leaves for later.

The scheduler extender's first answer after a restart waits for every import ``serve`` does
before listening (docs/extender.md, cold start; bench/bench_extender_cold_start.py measures
it). The reports, the Kubernetes client (``serve`` without ``--kubeconfig`` /
``--in-cluster`` never needs it), the exporter's slow and cluster builders, the alert
notifier, the agent's shipper (httpx), polars (the analytics that read through it, and
whatever settings ``serve`` takes from their modules), pandas, Parquet, YAML and Rich (the
CLI's consoles) are not
needed before ``serve`` listens and load on first use. Each probe runs in a fresh
interpreter: in the test process everything is imported already, so a first-use import that
broke (a cycle, a wrong name) would show only here.

The extender's first answer builds the first view: its slow signals are SQL run in the store
(:mod:`sits_observe.store.rows`), so it loads neither polars nor pandas, which pyarrow
imports on its first conversion of Python or NumPy values (``pa.array``, ``pa.scalar``,
``to_numpy``); the view reads its number columns from their Arrow buffers instead
(:mod:`sits_observe.domain.arrow_numpy`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from sits_observe.control.extender.clusterview.view import build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.scoring import prioritize
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import host_priority_json, parse_extender_args
from sits_observe.store import Store
from tests.unit.control.extender_payloads import POD_1GPU_JSON, args_by_name
from tests.unit.control.extender_support import write_cluster

#: Loaded on first use, never before ``serve`` listens.
LATER = (
    "kubernetes",
    "httpx",
    "sits_observe.reports.registry",
    "sits_observe.reports.actions.recommend",
    "sits_observe.surfaces.alerts.notify",
    "sits_observe.collectors.agent.loop",
    "sits_observe.surfaces.service.exporter.signals.cluster",
    "sits_observe.surfaces.service.exporter.signals.slow",
    "sits_observe.surfaces.service.exporter.signals.idle",
    # The analyses whose settings serve's flags read: the settings live in analytics.settings.
    "sits_observe.analytics.heatmap.grid",
    "sits_observe.analytics.fragmentation.idle_gpus",
    "sits_observe.analytics.fragmentation.smf",
    "sits_observe.analytics.trends.clusters",
    "polars",
    "pandas",
    "pyarrow.parquet",
    "yaml",
    "rich",  # the CLI's consoles: on the first print (serve prints nothing on a good start)
)
#: Not loaded by the extender's first answer either (the first view build included).
NOT_FOR_THE_FIRST_ANSWER = (
    "polars",  # the slow signals are SQL over the store (sits_observe.store.rows)
    "pandas",
    "pyarrow.parquet",
    "yaml",
    "sits_observe.reports.registry",
)

#: What ``serve`` imports before it listens: its command (the flags' settings models), then
#: what ``run_service`` imports and builds (store, app, servers), then the app itself.
PROBE = """
import json, sys
from sits_observe.surfaces.cli.main import build_app
build_app("serve")
from sits_observe.store import Store
from sits_observe.surfaces.service.app import create_app
from sits_observe.surfaces.service.http.server import Listener, Servers
from sits_observe.surfaces.service.http.sockets import bind
from sits_observe.surfaces.service.settings import ServiceSettings

LATER = {later!r}
NOT_FOR_THE_FIRST_ANSWER = {not_for_the_first_answer!r}
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
    answer = None
    if {prioritize!r} is not None:
        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            called = client.post("/scheduler/prioritize", content={prioritize!r})
        answer = {{
            "status": called.status_code,
            "hosts": called.json(),
            "loaded": sorted(m for m in NOT_FOR_THE_FIRST_ANSWER if m in sys.modules),
            "slow": "sits_observe.analytics.topology.interference" in sys.modules,
        }}
    after = sorted(m for m in LATER if m in sys.modules)
    app.state.exporter.close()
print(json.dumps({{
    "routes": routes, "before": before, "after": after, "first_use": first_use, "answer": answer
}}))
"""


def probe(tmp_path: Path, *, first_use: bool, prioritize: str | None = None) -> dict[str, object]:
    """Run the probe on ``tmp_path / cold.duckdb``; ``first_use``: call a report and scrape
    ``/metrics``; ``prioritize``: POST this body to ``/scheduler/prioritize``."""
    code = PROBE.format(
        later=LATER,
        not_for_the_first_answer=NOT_FOR_THE_FIRST_ANSWER,
        first_use=first_use,
        prioritize=prioritize,
    )
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
    assert "sits_observe.surfaces.service.exporter.signals.cluster" in after


def test_the_first_extender_answer_builds_its_view_without_pandas(tmp_path: Path) -> None:
    with Store.open(tmp_path / "cold.duckdb") as store:
        write_cluster(store, datetime.now(UTC))
        expected = expected_hosts(store)
    found = probe(tmp_path, first_use=False, prioritize=args_by_name(POD_1GPU_JSON))
    assert found["before"] == []
    answer = found["answer"]
    assert isinstance(answer, dict)
    # Not vacuous: the answer is the one a view of the whole store gives (memory, slow
    # signals and all), and that view build ran in the probe: its slow signals' analytics
    # loaded, polars did not.
    assert answer["status"] == 200
    assert answer["hosts"] == expected
    assert {h["Score"] for h in expected} != {0}
    assert answer["slow"] is True
    assert answer["loaded"] == [], f"the first answer imports {answer['loaded']}"


def expected_hosts(store: Store) -> list[dict[str, object]]:
    """What the prioritize handler answers on a view of ``store`` built here, now."""
    view = build_view(store, datetime.now(UTC), ViewSettings())
    call = parse_extender_args(args_by_name(POD_1GPU_JSON).encode())
    result = prioritize(call.pod, view, call.nodes, ScoringSettings())
    hosts: list[dict[str, object]] = json.loads(
        host_priority_json(result.hosts, result.scores.tolist())
    )
    return hosts


#: ``serve --extender-warm-view``'s first stage (:mod:`sits_observe.surfaces.service.http.staged`):
#: its command, the store, the extender's endpoints and app, the staged app and the servers,
#: then one prioritize call; FastAPI (and the service's app) must still be unimported.
STAGE_ONE_PROBE = """
import json, sys
from datetime import UTC, datetime
from sits_observe.surfaces.cli.main import build_app
build_app("serve")
from sits_observe.store import Store
from sits_observe.surfaces.service.extender import (
    ExtenderSettings, create_extender_app, serve_extender
)
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.surfaces.service.http.server import Listener, Servers
from sits_observe.surfaces.service.http.sockets import bind
from sits_observe.surfaces.service.http.limits import HttpLimits
from sits_observe.surfaces.service.http.staged import StagedApp

listening = sorted(m for m in ("fastapi", "sits_observe.surfaces.service.app") if m in sys.modules)
with Store.open(sys.argv[1]) as store:
    metrics = ServiceMetrics()
    serving = serve_extender(store, metrics, None, settings=ExtenderSettings(warm_view=True))
    app = create_extender_app(serving.endpoints, metrics, HttpLimits())
    from starlette.testclient import TestClient

    with TestClient(app) as client:
        called = client.post("/scheduler/prioritize", content=sys.argv[2])
    answered = sorted(m for m in ("fastapi", "sits_observe.surfaces.service.app")
                      if m in sys.modules)
print(json.dumps({"listening": listening, "answered": answered, "status": called.status_code,
                  "hosts": called.json()}))
"""


def test_the_staged_start_answers_the_extender_without_fastapi(tmp_path: Path) -> None:
    """The first stage of a warm ``serve`` (the extender alone on the port) needs neither
    FastAPI nor the service's app, and gives the same answer as the full service."""
    with Store.open(tmp_path / "cold.duckdb") as store:
        write_cluster(store, datetime.now(UTC))
        expected = expected_hosts(store)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            STAGE_ONE_PROBE,
            str(tmp_path / "cold.duckdb"),
            args_by_name(POD_1GPU_JSON),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["listening"] == [] and found["answered"] == []
    assert found["status"] == 200
    assert found["hosts"] == expected and {h["Score"] for h in expected} != {0}
