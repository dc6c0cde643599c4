"""``GET /scheduler/readyz``, the extender's readiness, on a real ``serve`` process on loopback.

The scheduler-sidecar deployment (deploy/overlays/scheduler-sidecar) starts kube-scheduler
only once this endpoint answers 200 on the extender port (the sidecar's startupProbe), so it
must not answer 200 before a call would be scored from the store: before the cluster view is
built, without an inventory snapshot, or with one older than ``max_snapshot_age_s``. The
store is a DuckDB file in ``tmp_path`` written before the service opens it.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from sits_observe.store import Store
from tests.integration.serve_process import ServeProcess, free_port, wait_until
from tests.unit.control.extender_payloads import POD_1GPU_JSON, args_by_name
from tests.unit.control.extender_support import NODES, write_cluster

pytestmark = pytest.mark.slow

READY = "/scheduler/readyz"
PRIORITIZE = "/scheduler/prioritize"
JSON = {"Content-Type": "application/json"}
SCORED = ("sits_extender_calls_total", {"verb": "prioritize", "outcome": "scored"})


def service_over(
    tmp_path: Path, written_at: datetime | None, *flags: str
) -> tuple[ServeProcess, str]:
    """A ``serve`` (not started) on a store holding the test cluster as seen at
    ``written_at`` (None: an empty store), and the URL of its extender port: the extender on
    a port of its own, as the sidecar runs it."""
    port = free_port()
    service = ServeProcess(tmp_path, "--extender-port", str(port), *flags)
    with Store.open(service.db) as store:
        if written_at is not None:
            write_cluster(store, written_at)
    return service, f"http://127.0.0.1:{port}"


def test_not_ready_until_the_view_is_built_then_ready_and_scored(tmp_path: Path) -> None:
    """Without ``--extender-warm-view`` nothing builds the view before the first request:
    the probe's first answer is 503 (it starts the build), a later one 200, and a call made
    then is scored from the store."""
    service, url = service_over(tmp_path, datetime.now(UTC))
    try:
        service.start()
        first = httpx.get(url + READY, timeout=10)
        assert first.status_code == 503, first.text
        assert first.json()["detail"] == "the extender's cluster view is not built yet"
        wait_until(lambda: httpx.get(url + READY).status_code == 200, 30, "a warm view")
        ready = httpx.get(url + READY).json()
        assert ready["status"] == "ready" and ready["nodes"] == len(NODES)
        assert 0 <= ready["snapshot_age_s"] < 60
        answer = httpx.post(url + PRIORITIZE, content=args_by_name(POD_1GPU_JSON), headers=JSON)
        assert answer.status_code == 200 and any(s["Score"] > 0 for s in answer.json())
        assert service.metric(SCORED[0], **SCORED[1]) == 1
        # Not the service's /readyz: that one says the store takes writes.
        assert httpx.get(service.url + "/readyz").json()["status"] == "ready"
    finally:
        service.stop()


@pytest.mark.parametrize(
    ("age", "why"),
    [
        (None, "the store holds no inventory snapshot yet"),
        (timedelta(hours=1), "the inventory snapshot is 36"),
    ],
    ids=["no-inventory", "stale-inventory"],
)
def test_a_built_view_without_a_fresh_inventory_is_not_ready(
    tmp_path: Path, age: timedelta | None, why: str
) -> None:
    """A view is built (warm start) but every call would fail open: still 503."""
    written_at = None if age is None else datetime.now(UTC) - age
    service, url = service_over(tmp_path, written_at, "--extender-warm-view")
    try:
        service.start()
        wait_until(
            lambda: service.metric("sits_extender_view_builds_total", result="ok") >= 1,
            30,
            "the first view",
        )
        answer = httpx.get(url + READY)
        assert answer.status_code == 503 and answer.json()["detail"].startswith(why)
    finally:
        service.stop()


def test_with_a_warm_view_every_ready_answer_comes_after_the_view(tmp_path: Path) -> None:
    """As the sidecar runs: ``--extender-warm-view``, the probe polled from the spawn. Once
    it says 200 the next call is scored, never failed open or left to wait for the view."""
    service, url = service_over(tmp_path, datetime.now(UTC), "--extender-warm-view")
    with service.log.open("ab") as log:  # started here, not by start(): polled from the spawn
        service.proc = subprocess.Popen(service.args(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, service.logs()
            assert service.proc.poll() is None, service.logs()
            try:
                if httpx.get(url + READY, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(0.005)
        answer = httpx.post(url + PRIORITIZE, content=args_by_name(POD_1GPU_JSON), headers=JSON)
        assert answer.status_code == 200 and any(s["Score"] > 0 for s in answer.json())
        wait_until(lambda: httpx.get(service.url + "/readyz").status_code == 200, 60, "serve")
        assert service.metric(SCORED[0], **SCORED[1]) == 1
        assert (
            service.metric("sits_extender_calls_total", verb="prioritize", outcome="fail_open") == 0
        )
    finally:
        service.stop()
