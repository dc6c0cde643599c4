"""The in-process evaluator: registry samples, ``for`` durations, resolution, isolation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge

from sits_observe.surfaces.alerts import (
    Alert,
    AlertEvaluator,
    AlertMetrics,
    AlertRule,
    AlertSettings,
    alert_rules,
    registry_samples,
)
from sits_observe.surfaces.alerts.conditions import Above, History, Hit, Samples

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Alert], list[Alert], datetime]] = []

    def notify(self, firing: Sequence[Alert], resolved: Sequence[Alert], now: datetime) -> None:
        self.calls.append((list(firing), list(resolved), now))


def _setup(settings: AlertSettings | None = None):
    registry = CollectorRegistry()
    metrics = AlertMetrics(registry)
    clock = Clock()
    sink = Sink()
    evaluator = AlertEvaluator(
        rules=alert_rules(settings),
        source=lambda: registry_samples(registry),
        sink=sink,
        metrics=metrics,
        clock=clock,
    )
    return registry, clock, sink, evaluator


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_registry_samples_use_promql_names_and_skip_created() -> None:
    registry = CollectorRegistry()
    Counter("sits_x_errors", "", ("reason",), registry=registry).labels("a").inc(3)
    Gauge("sits_y_ratio", "", registry=registry).set(0.5)
    samples = registry_samples(registry)
    assert samples["sits_x_errors_total"] == [((("reason", "a"),), 3.0)]
    assert samples["sits_y_ratio"] == [((), 0.5)]
    assert not any(name.endswith("_created") for name in samples)


def test_pending_then_firing_after_for_then_resolved() -> None:
    registry, clock, sink, evaluator = _setup(AlertSettings(fragmentation_for_s=60))
    ratio = Gauge("sits_fgd_fragmentation_ratio", "", registry=registry)
    ratio.set(0.8)
    assert evaluator.evaluate() == []
    assert [k[0] for k in evaluator.pending()] == ["SitsFragmentationHigh"]
    clock.advance(30)
    assert evaluator.evaluate() == []
    clock.advance(30)
    (alert,) = evaluator.evaluate()
    assert alert.name == "SitsFragmentationHigh"
    assert alert.starts_at == T0  # the time it became pending, as Prometheus's activeAt
    assert alert.labels == {"alertname": "SitsFragmentationHigh", "severity": "warning"}
    assert alert.annotations["description"].startswith("80% of the free GPU capacity")
    assert _value(registry, "sits_alerts_firing", alertname="SitsFragmentationHigh") == 1
    assert sink.calls[-1][0] == [alert]

    ratio.set(0.2)
    clock.advance(15)
    assert evaluator.evaluate() == []
    firing, resolved, now = sink.calls[-1]
    assert firing == []
    assert [a.name for a in resolved] == ["SitsFragmentationHigh"]
    assert resolved[0].ends_at == now == clock.now
    assert resolved[0].starts_at == T0
    assert _value(registry, "sits_alerts_firing", alertname="SitsFragmentationHigh") == 0


def test_a_pending_alert_that_stops_holding_is_never_sent() -> None:
    registry, clock, sink, evaluator = _setup(AlertSettings(fragmentation_for_s=60))
    ratio = Gauge("sits_fgd_fragmentation_ratio", "", registry=registry)
    ratio.set(0.8)
    evaluator.evaluate()
    ratio.set(0.1)
    clock.advance(120)
    evaluator.evaluate()
    assert evaluator.pending() == []
    assert sink.calls == []


def test_peer_rules_follow_labels_of_the_same_model() -> None:
    registry, _clock, _sink, evaluator = _setup(AlertSettings(latency_for_s=0))
    latency = Gauge("sits_latency_seconds", "", ("model", "quantile", "window"), registry=registry)
    slo = Gauge("sits_latency_slo_seconds", "", ("model",), registry=registry)
    latency.labels("a", "0.95", "5m").set(2.0)
    latency.labels("b", "0.95", "5m").set(0.5)
    latency.labels("b", "0.99", "5m").set(9.0)
    slo.labels("a").set(1.0)
    slo.labels("b").set(1.0)
    (alert,) = evaluator.evaluate()
    assert alert.labels["model"] == "a"
    assert alert.annotations["description"].endswith(
        "window is 2s, above sits_latency_slo_seconds for that model."
    )


def test_counter_increase_fires_and_clears_after_its_window() -> None:
    registry, clock, _sink, evaluator = _setup(AlertSettings(controller_errors_window_s=120))
    errors = Counter("sits_controller_errors", "", ("reason",), registry=registry)
    errors.labels("conflict")  # exists at 0
    assert evaluator.evaluate() == []
    clock.advance(15)
    errors.labels("conflict").inc()
    (alert,) = evaluator.evaluate()
    assert alert.labels["reason"] == "conflict"
    clock.advance(60)
    assert len(evaluator.evaluate()) == 1  # still inside the 120 s window
    clock.advance(121)
    assert evaluator.evaluate() == []


class Broken:
    def promql(self) -> str:
        return "vector(1)"

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        raise RuntimeError("boom")

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ()


def test_a_failing_rule_is_counted_and_the_others_still_fire() -> None:
    registry = CollectorRegistry()
    metrics = AlertMetrics(registry)
    Gauge("g", "", registry=registry).set(5)
    rules = [
        AlertRule("Broken", "warning", 0, Broken(), "s", "d"),
        AlertRule("High", "critical", 0, Above("g", 1.0), "s", "{{ $value }}"),
    ]
    evaluator = AlertEvaluator(rules, lambda: registry_samples(registry), None, metrics)
    (alert,) = evaluator.evaluate()
    assert alert.name == "High"
    assert alert.annotations["description"] == "5"
    assert _value(registry, "sits_alert_evaluation_errors_total", rule="Broken") == 1


def test_an_unreadable_source_is_counted_and_keeps_the_last_state() -> None:
    metrics = AlertMetrics()
    calls = [0]

    def source() -> Samples:
        calls[0] += 1
        if calls[0] > 1:
            raise RuntimeError("registry broke")
        return {"g": [((), 5.0)]}

    rules = [AlertRule("High", "critical", 0, Above("g", 1.0), "s", "d")]
    evaluator = AlertEvaluator(rules, source, None, metrics)
    assert len(evaluator.evaluate()) == 1
    assert len(evaluator.evaluate()) == 1
    assert (
        metrics.registry.get_sample_value("sits_alert_evaluation_errors_total", {"rule": "samples"})
        == 1
    )
