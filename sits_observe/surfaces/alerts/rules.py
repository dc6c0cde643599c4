"""The alert rules: one declarative list behind both the in-process evaluator and the
Prometheus rules file (grafana/alerts/sits-observe.rules.yml, see :mod:`.promfile`).

Each rule names its condition (a PromQL expression that is also evaluated in process, see
:mod:`.conditions`), severity, ``for`` duration and annotation templates; thresholds come from
:class:`AlertSettings`. The metric names are the exporter's (docs/metrics.md):

- ``SitsFragmentationHigh``: ``sits_fgd_fragmentation_ratio`` above a limit.
- ``SitsLatencyOverSLO``: ``sits_latency_seconds{quantile="0.95"}`` above the same model's
  ``sits_latency_slo_seconds`` (one alert per model and window).
- ``SitsThroughputOverSafeMax``: ``sits_requests_per_second`` above the same model's
  ``sits_safe_max_requests_per_second`` (the heatmap analysis's safe maximum).
- ``SitsCollectorDown``: ``sits_collector_last_seen_timestamp_seconds`` of a node and source
  older than a limit. ``SitsScrapeTargetDown`` (``up == 0``) is in the Prometheus file only.
- ``SitsControllerStuck``: no controller decision for a while;
  ``SitsControllerErrors``: ``sits_controller_errors_total`` increased.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from sits_observe.surfaces.alerts.conditions import (
    Above,
    AbovePeer,
    Condition,
    Increased,
    OlderThan,
    PromQLOnly,
)
from sits_observe.surfaces.alerts.settings import AlertSettings
from sits_observe.surfaces.durations import prom_duration

Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True)
class AlertRule:
    """One alert: ``name`` (the ``alertname`` label) fires when ``condition`` has held for
    ``for_s`` seconds; ``summary`` and ``description`` are Prometheus templates;
    ``runbook_url`` is the rule's section of docs/alerts.md (the ``runbook_url``
    annotation, as kube-prometheus names it)."""

    name: str
    severity: Severity
    for_s: float
    condition: Condition
    summary: str
    description: str
    runbook_url: str = ""

    @property
    def prometheus_only(self) -> bool:
        """True when only Prometheus can evaluate the rule (it never fires in process)."""
        return isinstance(self.condition, PromQLOnly)


def _pct(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def alert_rules(settings: AlertSettings | None = None) -> tuple[AlertRule, ...]:
    """Every alert rule with the thresholds of ``settings`` (defaults when None)."""
    s = settings or AlertSettings()
    return tuple(
        replace(rule, runbook_url=f"{s.runbook_base_url}#{rule.name.lower()}") for rule in _rules(s)
    )


def _rules(s: AlertSettings) -> tuple[AlertRule, ...]:
    return (
        AlertRule(
            name="SitsFragmentationHigh",
            severity="warning",
            for_s=s.fragmentation_for_s,
            condition=Above("sits_fgd_fragmentation_ratio", s.fragmentation_ratio_max),
            summary="GPU fragmentation is high",
            description="{{ $value | humanizePercentage }} of the free GPU capacity cannot hold "
            f"a typical pod (FGD fragmentation ratio; limit {_pct(s.fragmentation_ratio_max)}). "
            "Consider consolidating pods or reviewing the scheduler's placement.",
        ),
        AlertRule(
            name="SitsLatencyOverSLO",
            severity="warning",
            for_s=s.latency_for_s,
            condition=AbovePeer(
                "sits_latency_seconds",
                "sits_latency_slo_seconds",
                on=("model",),
                matchers={"quantile": "0.95"},
            ),
            summary="P95 latency of {{ $labels.model }} is over its SLO",
            description="P95 end-to-end latency of model {{ $labels.model }} over the "
            "{{ $labels.window }} window is {{ $value | humanizeDuration }}, above "
            "sits_latency_slo_seconds for that model.",
        ),
        AlertRule(
            name="SitsThroughputOverSafeMax",
            severity="warning",
            for_s=s.throughput_for_s,
            condition=AbovePeer(
                "sits_requests_per_second", "sits_safe_max_requests_per_second", on=("model",)
            ),
            summary="{{ $labels.model }} serves more requests than it safely can",
            description='Model {{ $labels.model }} serves {{ printf "%.2f" $value }} requests/s '
            "over the {{ $labels.window }} window, above its safe maximum "
            "(sits_safe_max_requests_per_second, the highest load whose P95 stays within the "
            "SLO). Add replicas or shed load.",
        ),
        AlertRule(
            name="SitsCollectorDown",
            severity="critical",
            for_s=s.collector_for_s,
            condition=OlderThan("sits_collector_last_seen_timestamp_seconds", s.collector_stale_s),
            summary="No {{ $labels.source }} data from {{ $labels.Hostname }}",
            description="The newest {{ $labels.source }} sample from node "
            "{{ $labels.Hostname }} is {{ $value | humanizeDuration }} old (limit "
            f"{prom_duration(s.collector_stale_s)}). Check the node agent there.",
        ),
        AlertRule(
            name="SitsScrapeTargetDown",
            severity="critical",
            for_s=s.target_down_for_s,
            condition=PromQLOnly(f'up{{job=~"{s.scrape_job_regex}"}} == 0'),
            summary="Prometheus cannot scrape {{ $labels.instance }}",
            description="Scrape target {{ $labels.instance }} of job {{ $labels.job }} is down.",
        ),
        AlertRule(
            name="SitsControllerStuck",
            severity="warning",
            for_s=s.controller_for_s,
            condition=OlderThan(
                "sits_controller_last_decision_timestamp_seconds", s.controller_stale_s
            ),
            summary="The controller has made no decision for a while",
            description="The latest controller decision is {{ $value | humanizeDuration }} old "
            f"(limit {prom_duration(s.controller_stale_s)}). Check the controller's leader "
            "election and logs.",
        ),
        AlertRule(
            name="SitsControllerErrors",
            severity="warning",
            for_s=s.controller_errors_for_s,
            condition=Increased("sits_controller_errors_total", s.controller_errors_window_s),
            summary="The controller reports errors ({{ $labels.reason }})",
            description='sits_controller_errors_total{reason="{{ $labels.reason }}"} went up '
            f"in the last {prom_duration(s.controller_errors_window_s)}. Check the "
            "controller's logs.",
        ),
    )
