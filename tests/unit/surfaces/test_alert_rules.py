"""The alert rules: the committed Prometheus file is the generator's output, promtool accepts
and unit-tests it, and the in-process evaluator agrees with promtool on every test case."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from sits_observe.errors import ConfigError
from sits_observe.surfaces.alerts import (
    AlertEvaluator,
    AlertMetrics,
    AlertSettings,
    alert_rules,
    rules_yaml,
)
from sits_observe.surfaces.alerts.conditions import Labels, labels_of
from sits_observe.surfaces.alerts.templates import check, humanize_duration, render
from sits_observe.surfaces.durations import prom_duration

ROOT = Path(__file__).resolve().parents[3]
RULES_FILE = ROOT / "grafana" / "alerts" / "sits-observe.rules.yml"
TESTS_DIR = ROOT / "grafana" / "alerts" / "tests"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus)"
)


def test_committed_rules_file_is_the_generator_output() -> None:
    assert RULES_FILE.read_text(encoding="utf-8") == rules_yaml(), (
        "grafana/alerts/sits-observe.rules.yml is stale: regenerate it with `sits-observe grafana`"
    )


def test_every_rule_has_a_promtool_case_firing_and_not_firing() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in _promtool_cases():
        for check_ in case["alert_rule_test"]:
            (fires if check_.get("exp_alerts") else quiet).add(check_["alertname"])
    names = {rule.name for rule in alert_rules()}
    assert fires == names
    assert quiet == names


@needs_promtool
def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(RULES_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_test_rules() -> None:
    files = sorted(TESTS_DIR.glob("*.yml"))
    assert files
    result = subprocess.run(
        [str(PROMTOOL), "test", "rules", *map(str, files)],
        capture_output=True,
        check=False,
        text=True,
        cwd=TESTS_DIR,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_thresholds_come_from_the_settings() -> None:
    text = rules_yaml(
        AlertSettings(fragmentation_ratio_max=0.7, fragmentation_for_s=120, collector_stale_s=90)
    )
    doc = yaml.safe_load(text)
    rules = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    assert rules["SitsFragmentationHigh"]["expr"] == "sits_fgd_fragmentation_ratio > 0.7"
    assert rules["SitsFragmentationHigh"]["for"] == "2m"
    assert rules["SitsCollectorDown"]["expr"].endswith("> 90")
    assert "limit 70%" in rules["SitsFragmentationHigh"]["annotations"]["description"]


def test_every_template_renders_in_process() -> None:
    for rule in alert_rules():
        check(rule.summary)
        check(rule.description)
    with pytest.raises(ConfigError, match="unsupported template action"):
        check("{{ $value | humanize1024 }}")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (1.5, "1.5s"), (59, "59s"), (61, "1m 1s"), (4500, "1h 15m 0s"),
     (90061, "1d 1h 1m 1s"), (0.25, "250ms"), (0.0005, "500us")],
)  # fmt: skip
def test_humanize_duration_matches_prometheus(seconds: float, text: str) -> None:
    assert humanize_duration(seconds) == text


def test_render_labels_values_and_missing_labels() -> None:
    out = render(
        '{{ $labels.model }}|{{ $labels.nope }}|{{ printf "%.2f" $value }}|'
        "{{ $value | humanizePercentage }}|{{ $value }}",
        {"model": "m"},
        0.125,
    )
    assert out == "m||0.12|12.5%|0.125"


@pytest.mark.parametrize(
    ("seconds", "text"), [(900, "15m"), (90, "90s"), (7200, "2h"), (0.5, "500ms")]
)
def test_prom_duration(seconds: float, text: str) -> None:
    assert prom_duration(seconds) == text


# --- replay of the promtool cases through the in-process evaluator ---------------------------

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_EXPAND = re.compile(r"^(-?[0-9.e]+|_)(?:([+-][0-9.e]+)?x([0-9]+))?$")
_DURATION = re.compile(r"^(\d+)([smh])$")


def _seconds(text: str) -> float:
    match = _DURATION.match(text)
    assert match, text
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def _expand(values: str) -> list[float | None]:
    """promtool's expanding notation: ``a+bxn`` is n+1 values, ``_`` a missing one."""
    out: list[float | None] = []
    for token in str(values).split():
        match = _EXPAND.match(token)
        assert match, token
        start, step, times = match.groups()
        if start == "_":
            out.extend([None] * (int(times or 0) + 1))
            continue
        count = int(times) + 1 if times else 1
        out.extend(float(start) + i * float(step or 0) for i in range(count))
    return out


def _series(text: str) -> tuple[str, Labels]:
    match = _SERIES.match(text.strip())
    assert match, text
    return match.group(1), labels_of(dict(_LABEL.findall(match.group(2) or "")))


def _promtool_cases() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(TESTS_DIR.glob("*.yml")):
        cases.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["tests"])
    return cases


def _samples_at(inputs: list[tuple[str, Labels, list[float | None]]], step_s: float, t_s: float):
    """The instant samples PromQL sees at ``t_s``: each series' latest value within 5m."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for name, labels, values in inputs:
        index = min(int(t_s // step_s), len(values) - 1)
        while index >= 0 and values[index] is None:
            index -= 1
        if index < 0 or t_s - index * step_s > 300:
            continue
        value = values[index]
        assert value is not None
        samples.setdefault(name, []).append((labels, value))
    return samples


def _replay_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (f"{check_['alertname']}@{check_['eval_time']}#{i}", case, check_)
        for i, case in enumerate(_promtool_cases())
        for check_ in case["alert_rule_test"]
    ]


@pytest.mark.parametrize(
    ("case_id", "case", "check_"), _replay_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_in_process_evaluator_agrees_with_promtool(
    case_id: str, case: dict[str, Any], check_: dict[str, Any]
) -> None:
    rule = next(r for r in alert_rules() if r.name == check_["alertname"])
    step_s = _seconds(case["interval"])
    inputs = [(*_series(s["series"]), _expand(s["values"])) for s in case["input_series"]]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    now = [epoch]
    clock_s = [0.0]
    evaluator = AlertEvaluator(
        rules=[rule],
        source=lambda: _samples_at(inputs, step_s, clock_s[0]),
        sink=None,
        metrics=AlertMetrics(),
        clock=lambda: now[0],
    )
    end_s = _seconds(check_["eval_time"])
    t_s = 0.0
    while t_s <= end_s:  # promtool evaluates every evaluation_interval (1m) from 0
        clock_s[0] = t_s
        now[0] = epoch + timedelta(seconds=t_s)
        firing = evaluator.evaluate()
        t_s += 60
    got = sorted((sorted(a.labels.items()), sorted(a.annotations.items())) for a in firing)
    if rule.prometheus_only:
        assert got == [], "a Prometheus-only rule must never fire in process"
        return
    want = sorted(
        (
            sorted({**e["exp_labels"], "alertname": rule.name}.items()),
            sorted(e.get("exp_annotations", {}).items()),
        )
        for e in check_.get("exp_alerts") or []
    )
    assert got == want


def test_every_rule_links_its_runbook_section_in_docs_alerts() -> None:
    """``runbook_url`` (Prometheus file, PrometheusRule, in-process alerts) points at the
    rule's own section of docs/alerts.md: a heading whose GitHub anchor is the URL's
    fragment, under "Runbooks"."""
    text = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    runbooks = text.split("\n## Runbooks\n", 1)
    assert len(runbooks) == 2, "docs/alerts.md has no '## Runbooks' section"
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[4:].strip().lower()).replace(" ", "-")
        for line in runbooks[1].split("\n## ", 1)[0].splitlines()
        if line.startswith("### ")
    }
    base = AlertSettings().runbook_base_url
    in_file = {
        r["alert"]: r["annotations"]["runbook_url"]
        for r in yaml.safe_load(rules_yaml())["groups"][0]["rules"]
    }
    for rule in alert_rules():
        assert rule.runbook_url == in_file[rule.name]
        page, anchor = rule.runbook_url.split("#")
        assert page == base and base.endswith("/docs/alerts.md")
        assert anchor in anchors, f"{rule.name}: no '### {rule.name}' under Runbooks"
    moved = alert_rules(AlertSettings(runbook_base_url="https://docs.example/alerts.md"))
    assert moved[0].runbook_url == f"https://docs.example/alerts.md#{moved[0].name.lower()}"
    with pytest.raises(ValueError):
        AlertSettings(runbook_base_url="docs/alerts.md#x")
