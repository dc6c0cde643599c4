"""Alerts end to end: the in-process evaluator -> a real Alertmanager (Debian package
prometheus-alertmanager) -> its webhook_configs receiver on loopback, firing then resolved;
and ``serve``'s app with real data -> a signed webhook directly."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Gauge

from sits_observe.store import Store
from sits_observe.surfaces.alerts import (
    AlertingSettings,
    AlertSettings,
    NotifySettings,
    start_alerting,
)
from sits_observe.surfaces.alerts.receiver import Received, WebhookReceiver
from sits_observe.surfaces.service import ServiceSettings, create_app

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
WAIT_S = 30.0  # upper bound for a notification to arrive (not a speed assertion)
SECRET = "0123456789abcdef-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET.encode()) as receiver:
        yield receiver


@pytest.fixture
def alertmanager(tmp_path: Path, hook: WebhookReceiver) -> Iterator[str]:
    """A real Alertmanager routing everything to ``hook`` with short group timers."""
    if ALERTMANAGER is None:
        pytest.skip("prometheus-alertmanager not installed (Debian package)")
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        "route:\n"
        "  receiver: hook\n"
        "  group_by: [alertname]\n"
        "  group_wait: 200ms\n"
        "  group_interval: 500ms\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: hook\n"
        "    webhook_configs:\n"
        f"      - url: {hook.url}/am\n"
        "        send_resolved: true\n",
        encoding="utf-8",
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                stderr = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"alertmanager did not start: {stderr[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _messages(received: list[Received], path: str) -> list[dict[str, object]]:
    return [json.loads(r.body) for r in received if r.path == path]


def _has(status: str, path: str = "/am"):
    def check(received: list[Received]) -> bool:
        return any(m["status"] == status for m in _messages(received, path))

    return check


def test_alert_fires_and_resolves_through_a_real_alertmanager(
    alertmanager: str, hook: WebhookReceiver
) -> None:
    registry = CollectorRegistry()
    ratio = Gauge("sits_fgd_fragmentation_ratio", "FGD ratio", registry=registry)
    ratio.set(0.1)
    settings = AlertingSettings(
        eval_interval_s=0.2,
        rules=AlertSettings(fragmentation_ratio_max=0.5, fragmentation_for_s=0),
        notify=NotifySettings(alertmanager_url=alertmanager, resend_interval_s=1),
    )
    runtime = start_alerting(settings, registry)
    try:
        ratio.set(0.8)  # the condition
        assert hook.wait_for(_has("firing"), WAIT_S), "no firing notification via Alertmanager"
        ratio.set(0.2)
        assert hook.wait_for(_has("resolved"), WAIT_S), "no resolved notification"
    finally:
        runtime.stop()
    messages = _messages(hook.received, "/am")
    firing = next(m for m in messages if m["status"] == "firing")
    (alert,) = firing["alerts"]
    assert alert["labels"] == {"alertname": "SitsFragmentationHigh", "severity": "warning"}
    assert alert["annotations"]["description"].startswith("80% of the free GPU capacity")
    assert alert["generatorURL"] == "http://127.0.0.1:8080/metrics"
    assert firing["version"] == "4"
    assert firing["groupLabels"] == {"alertname": "SitsFragmentationHigh"}
    resolved = next(m for m in messages if m["status"] == "resolved")
    (gone,) = resolved["alerts"]
    assert gone["status"] == "resolved"
    assert gone["startsAt"] == alert["startsAt"]
    assert (
        registry.get_sample_value(
            "sits_alert_notifications_total", {"target": "alertmanager", "outcome": "sent"}
        )
        >= 2
    )
    # Alertmanager's own view agrees: the alert is resolved (not active) now.
    active = httpx.get(f"{alertmanager}/api/v2/alerts", params={"active": "true"}).json()
    assert [a for a in active if a["labels"]["alertname"] == "SitsFragmentationHigh"] == []


def test_serve_app_with_stale_data_alerts_a_signed_webhook(
    tmp_path: Path, hook: WebhookReceiver
) -> None:
    """The real service: a node whose newest GPU sample is an hour old -> SitsCollectorDown,
    computed by the exporter from the store, evaluated in process, delivered and verified."""
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    alerting = AlertingSettings(
        eval_interval_s=0.2,
        rules=AlertSettings(collector_stale_s=300, collector_for_s=0),
        notify=NotifySettings(webhook_urls=(hook.url + "/direct",), webhook_secret=SECRET),
    )
    service = ServiceSettings.model_validate({"token": "t", "retention_interval_s": 0})
    with Store.open(tmp_path / "s.duckdb") as store:
        store.append(
            "gpu_samples",
            pa.table(
                {
                    "ts": pa.array([old], pa.timestamp("us")),
                    "node": ["n1"],
                    "gpu_uuid": ["GPU-0"],
                }
            ),
        )
        with TestClient(create_app(service, store, alerting=alerting)) as client:
            assert hook.wait_for(_has("firing", "/direct"), WAIT_S), "no webhook notification"
            metrics = client.get("/metrics").text
    (message,) = [m for m in _messages(hook.received, "/direct") if m["status"] == "firing"]
    assert all(r.verified for r in hook.received)
    labels = [a["labels"] for a in message["alerts"]]
    assert {"alertname": "SitsCollectorDown", "severity": "critical", "Hostname": "n1",
            "source": "gpu_samples"} in labels  # fmt: skip
    assert 'sits_alerts_firing{alertname="SitsCollectorDown"} 1.0' in metrics
    assert 'sits_alert_notifications_total{outcome="sent",target="webhook-0"}' in metrics
