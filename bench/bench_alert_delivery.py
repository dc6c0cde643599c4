"""Alert delivery latency: from the condition (a gauge crosses the threshold) to webhook receipt.

Two paths, each ``--runs`` times, one alert at a time:

- direct: the in-process evaluator -> notifier -> signed webhook (``--alert-webhook-url``);
- through Alertmanager: evaluator -> ``POST /api/v2/alerts`` -> a real Alertmanager (Debian
  package ``prometheus-alertmanager``) -> its ``webhook_configs`` receiver.

The rule is the real ``SitsLatencyOverSLO`` (``for`` = 0): each run sets
``sits_latency_seconds{model="m<i>",quantile="0.95"}`` above ``sits_latency_slo_seconds`` of a
new model ``m<i>``, so every run is a new alert (and, with ``group_by: ['...']``, a new
Alertmanager group that waits ``group_wait``). The clock starts when the gauge is set and stops
when the receiver (a loopback HTTP server in this process) has read the request. Each run then
resolves its alert and waits for the resolved message before the next.

The figure is dominated by where in the evaluation interval the gauge changes (uniform over
``--eval-interval-s``) plus, through Alertmanager, its ``group_wait``; the rest is the
pipeline's own cost. Production Alertmanager defaults (``group_wait: 30s``) add to the second.

Run: ``.venv/bin/python bench/bench_alert_delivery.py [--runs 15] [--eval-interval-s 1]
[--group-wait-ms 100] [--record]``; ``--record`` rewrites the alert-delivery section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
from _docs import write_block
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sits_observe.surfaces.alerts import (
    AlertingSettings,
    AlertSettings,
    NotifySettings,
    start_alerting,
)
from sits_observe.surfaces.alerts.receiver import Received, WebhookReceiver

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- alert-delivery-bench:begin -->", "<!-- alert-delivery-bench:end -->"
SECRET = b"bench-secret-0123456789"
WAIT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_alertmanager(
    workdir: Path, hook_url: str, group_wait_ms: int
) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        sys.exit("prometheus-alertmanager is not installed (Debian package); see make debian")
    config = workdir / "alertmanager.yml"
    config.write_text(
        "route:\n"
        "  receiver: hook\n"
        "  group_by: ['...']\n"
        f"  group_wait: {group_wait_ms}ms\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: hook\n"
        "    webhook_configs:\n"
        f"      - url: {hook_url}/am\n"
        "        send_resolved: true\n",
        encoding="utf-8",
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={workdir / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("alertmanager did not become ready")


def arrived(path: str, model: str, status: str) -> Callable[[list[Received]], bool]:
    def check(received: list[Received]) -> bool:
        for r in received:
            if r.path != path:
                continue
            for alert in json.loads(r.body)["alerts"]:
                if alert["labels"].get("model") == model and alert["status"] == status:
                    return True
        return False

    return check


def first_arrival(hook: WebhookReceiver, path: str, model: str, status: str) -> float:
    check = arrived(path, model, status)
    return min(r.at_s for r in hook.received if check([r]))


class EvaluationTimes(Collector):
    """Notes the monotonic time of every ``registry.collect()``, i.e. of every evaluation."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def collect(self) -> list[Metric]:
        self.times.append(time.monotonic())
        return []


def measure(
    notify: NotifySettings, hook: WebhookReceiver, path: str, runs: int, eval_s: float
) -> tuple[list[float], list[float]]:
    registry = CollectorRegistry()
    evaluations = EvaluationTimes()
    registry.register(evaluations)
    rng = random.Random(7)
    latency = Gauge("sits_latency_seconds", "", ("model", "quantile", "window"), registry=registry)
    slo = Gauge("sits_latency_slo_seconds", "", ("model",), registry=registry)
    settings = AlertingSettings(
        eval_interval_s=eval_s, rules=AlertSettings(latency_for_s=0), notify=notify
    )
    runtime = start_alerting(settings, registry)
    figures, pipeline = [], []
    try:
        for i in range(runs):
            model = f"m{path.strip('/')}{i}"
            slo.labels(model).set(1.0)
            time.sleep(rng.uniform(0, eval_s))  # a random phase of the evaluation interval
            started = time.monotonic()
            latency.labels(model, "0.95", "5m").set(2.0)  # the condition
            if not hook.wait_for(arrived(path, model, "firing"), WAIT_S):
                sys.exit(f"no firing notification for {model} on {path}")
            at_s = first_arrival(hook, path, model, "firing")
            figures.append(at_s - started)
            seen_at = min(t for t in evaluations.times if t >= started)
            pipeline.append(at_s - seen_at)
            latency.labels(model, "0.95", "5m").set(0.5)
            if not hook.wait_for(arrived(path, model, "resolved"), WAIT_S):
                sys.exit(f"no resolved notification for {model} on {path}")
    finally:
        runtime.stop()
    return figures, pipeline


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000,
        "min_ms": ordered[0] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def report(
    args: argparse.Namespace, rows: dict[str, tuple[dict[str, float], dict[str, float]]]
) -> str:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, "
        f"load average {load} at the end (other jobs share the cores). {args.runs} alerts per "
        f"path, one at a time; evaluation interval {args.eval_interval_s} s, rule `for` 0; "
        f"Alertmanager 0.25 (Debian) with `group_wait: {args.group_wait_ms}ms`, "
        "`group_by: ['...']`.",
        "",
        "| path | condition -> receipt, median ms | p90 ms | max ms "
        "| evaluation -> receipt, median ms | p90 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (s, p) in rows.items():
        lines.append(
            f"| {name} | {s['median_ms']:.0f} | {s['p90_ms']:.0f} | {s['max_ms']:.0f} "
            f"| {p['median_ms']:.1f} | {p['p90_ms']:.1f} | {p['max_ms']:.1f} |"
        )
    lines += [
        "",
        "The condition is set at a random point of the evaluation interval, so on average half "
        f"an interval (here {args.eval_interval_s * 500:.0f} ms) of the first figure is waiting "
        "for the next evaluation; *evaluation -> receipt* starts at the evaluation that first "
        "saw the condition and is the pipeline's own cost (rules, queue, HTTP, signing; through "
        "Alertmanager also its dispatch and `group_wait`). In production, add "
        "`group_wait` (30 s by default) for a new group, or up to `group_interval` for a new "
        "alert in an existing group. Serve's default evaluation interval is 15 s.",
        "",
        f"Command: `.venv/bin/python bench/bench_alert_delivery.py --runs {args.runs} "
        f"--eval-interval-s {args.eval_interval_s} --group-wait-ms {args.group_wait_ms} "
        "--record`.",
    ]
    return "\n".join(lines)


def record(text: str) -> None:
    write_block(DOCS, BEGIN, END, text, "## Alert delivery: condition to webhook")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--eval-interval-s", type=float, default=1.0)
    parser.add_argument("--group-wait-ms", type=int, default=100)
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, WebhookReceiver(SECRET) as hook:
        am, am_url = start_alertmanager(Path(tmp), hook.url, args.group_wait_ms)
        try:
            direct = NotifySettings(
                webhook_urls=(hook.url + "/direct",), webhook_secret=SECRET.decode()
            )
            via_am = NotifySettings(alertmanager_url=am_url, resend_interval_s=5)
            rows = {}
            for name, notify, path in (
                ("direct webhook (signed)", direct, "/direct"),
                ("through Alertmanager", via_am, "/am"),
            ):
                total, pipeline = measure(notify, hook, path, args.runs, args.eval_interval_s)
                rows[name] = (summary(total), summary(pipeline))
        finally:
            am.terminate()
            am.wait(10)
        unverified = [r for r in hook.received if r.path == "/direct" and not r.verified]
        if unverified:
            sys.exit(f"{len(unverified)} direct webhook requests failed signature verification")
    text = report(args, rows)
    print(text)
    if args.record:
        record(text)
        print(f"\nrecorded in {DOCS}")


if __name__ == "__main__":
    main()
