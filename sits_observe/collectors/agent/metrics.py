"""The agent's own Prometheus metrics, on an explicit registry (never the global one).

Names follow the project rules: ``sits_agent_`` prefix, base units, ``_total`` counters.
The loop updates them; the CLI serves :attr:`AgentMetrics.registry` on ``--metrics-port``.
The same registry serves the latest GPU samples under dcgm-exporter's names and the latest
cgroup samples under cAdvisor's (``sits_container_*`` where cAdvisor has none; :mod:`.latest`),
so an existing Prometheus can scrape the agents (docs/scaling.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sits_observe.collectors.agent.latest import LatestSamples


def _counter(name: str, doc: str, labels: tuple[str, ...], reg: CollectorRegistry) -> Counter:
    return Counter(name, doc, labels, registry=reg)


@dataclass
class AgentMetrics:
    """Counters and gauges of one agent process."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.registry
        self.samples_collected = _counter(
            "sits_agent_samples_collected_total", "rows produced, by collector", ("collector",), reg
        )
        self.samples_shipped = _counter(
            "sits_agent_samples_shipped_total", "rows the service acknowledged", (), reg
        )
        self.samples_spooled = _counter(
            "sits_agent_samples_spooled_total", "rows written to the spool", (), reg
        )
        self.samples_dropped = _counter(
            "sits_agent_samples_dropped_total",
            "rows lost by the agent: spool_full, too_large, spool_error, unreadable, rejected "
            "(kept in dead letters), quarantined (kept in quarantine)",
            ("reason",),
            reg,
        )
        self.collector_drops = _counter(
            "sits_agent_collector_drops_total",
            "samples a collector dropped as invalid, by collector and reason",
            ("collector", "reason"),
            reg,
        )
        self.collector_errors = _counter(
            "sits_agent_collector_errors_total",
            "collect calls that failed, by collector",
            ("collector",),
            reg,
        )
        self.batches = _counter(
            "sits_agent_batches_total",
            "batches by result: shipped, duplicate, spooled, replayed, rejected, evicted",
            ("result",),
            reg,
        )
        self.batches_quarantined = Counter(
            "sits_agent_batches_quarantined_total",
            "spooled batches moved to quarantine after repeated 5xx while others were stored",
            registry=reg,
        )
        self.collectors_disabled = Gauge(
            "sits_agent_collectors_disabled",
            "collectors switched off because their driver is missing",
            registry=reg,
        )
        self.spool_batches = Gauge(
            "sits_agent_spool_batches", "batches waiting in the spool", registry=reg
        )
        self.spool_bytes = Gauge("sits_agent_spool_bytes", "bytes in the spool", registry=reg)
        self.tick_seconds = Histogram(
            "sits_agent_tick_duration_seconds",
            "time of one collect-and-ship round",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=reg,
        )
        self.metrics_errors = _counter(
            "sits_agent_metrics_errors_total",
            "failures building the sample families served on /metrics, by table",
            ("table",),
            reg,
        )
        #: The latest GPU and cgroup samples of each tick, served on /metrics (:mod:`.latest`).
        self.latest = LatestSamples(self.metrics_errors)
        reg.register(self.latest)
