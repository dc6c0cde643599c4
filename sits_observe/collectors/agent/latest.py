"""The agent's latest GPU and cgroup samples on its ``/metrics``, under dcgm-exporter's and
cAdvisor's names.

So that an existing Prometheus / vmagent can scrape the agents directly (docs/scaling.md),
the newest ``gpu_samples`` rows of each tick are served back in dcgm-exporter's own format:
family names ``DCGM_FI_*`` (the first name of each entry of
:data:`sits_observe.domain.schema.dcgm_fields.FIELDS`), the exporter's units (MiB, percent, MHz, mJ:
the collector's scale undone) and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``pci_bus_id``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, ``GPU_I_PROFILE``, ``GPU_I_ID``,
``namespace``, ``pod``, ``container``). Why those names and not ``sits_*`` ones: the stock
dcgm-exporter dashboards, alert rules and the PromQL source
(:mod:`sits_observe.store.promql.source`) then work unchanged whichever of the two was
scraped. Scrape either dcgm-exporter or the agent for a node's GPUs, not both (the series
would differ only by ``job``/``instance`` and double every sum).

The newest ``container_samples`` rows are served the same way under cAdvisor's names where
cAdvisor has the quantity and ``sits_container_*`` names where it does not
(:mod:`.latest_containers`, table in :mod:`sits_observe.domain.schema.container_fields`), so SMF,
classes and baselines can read them from a PromQL store.

Each sample carries the row's own timestamp (milliseconds), so the store records the time
the agent read the GPU, not the scrape time, and two scrapes of one tick are one sample.

Never blocks or breaks the collection loop: :meth:`LatestSamples.publish` swaps one
reference (no copy, no lock held by the loop); the conversion runs in the scrape thread on
an immutable Arrow table, and a failure there is logged, counted in
``sits_agent_metrics_errors_total`` and answered with whatever families were built.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime

import pyarrow as pa
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sits_observe.collectors.agent.latest_containers import container_families
from sits_observe.domain.schema.dcgm_fields import FIELDS

log = logging.getLogger(__name__)

#: dcgm-exporter label <- gpu_samples column.
LABELS: tuple[tuple[str, str], ...] = (
    ("gpu", "gpu_index"),
    ("UUID", "gpu_uuid"),
    ("device", "device"),
    ("modelName", "model_name"),
    ("pci_bus_id", "pci_bus_id"),
    ("Hostname", "node"),
    ("DCGM_FI_DRIVER_VERSION", "driver_version"),
    ("GPU_I_PROFILE", "mig_profile"),
    ("GPU_I_ID", "mig_instance_id"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
)
_LABEL_NAMES = [name for name, _ in LABELS]


def _text(value: object) -> str:
    return "" if value is None else str(value)


class LatestSamples(Collector):
    """A prometheus-client collector holding the last published ``gpu_samples`` and
    ``container_samples`` tables."""

    def __init__(self, errors: Counter) -> None:
        self._tables: Mapping[str, pa.Table] = {}
        self._errors = errors

    def publish(self, tables: Mapping[str, pa.Table]) -> None:
        """Keep this tick's ``gpu_samples`` and ``container_samples`` (a tick without one
        clears its series, so a dead dcgm-exporter shows as absent series, not as frozen
        values)."""
        self._tables = {n: tables[n] for n in _BUILDERS if n in tables}

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not trigger a collection."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per DCGM field and per cgroup column present in the latest tables."""
        tables = self._tables
        for name, build in _BUILDERS.items():
            table = tables.get(name)
            if table is None or table.num_rows == 0:
                continue
            try:
                families = build(table)
            except Exception:
                # A scrape must never take the agent down; the counter and the log say what
                # broke, and the other table's families are still served.
                log.exception("building the %s families for /metrics failed", name)
                self._errors.labels(name).inc()
                continue
            yield from families


def _families(table: pa.Table) -> list[Metric]:
    columns = table.column_names
    label_values = [
        [_text(v) for v in table.column(col).to_pylist()] if col in columns else None
        for _, col in LABELS
    ]
    rows = table.num_rows
    keys = [
        tuple(values[i] if values is not None else "" for values in label_values)
        for i in range(rows)
    ]
    # The newest row of each label set wins (a table holds one tick, so this is rare).
    ts_values = table.column("ts").to_pylist() if "ts" in columns else [None] * rows
    stamps = [None if t is None else t.timestamp() if t.tzinfo else _naive_s(t) for t in ts_values]
    out: list[Metric] = []
    for spec in FIELDS:
        if spec.column not in columns:
            continue
        values = table.column(spec.column).to_pylist()
        latest: dict[tuple[str, ...], tuple[float, float | None]] = {}
        for key, value, stamp in zip(keys, values, stamps, strict=True):
            if value is None or not math.isfinite(float(value)):
                continue
            latest[key] = (float(value) / spec.scale, stamp)
        if not latest:
            continue
        family = GaugeMetricFamily(
            spec.families[0], f"{spec.column} from the sits_observe agent", labels=_LABEL_NAMES
        )
        for key, (value, stamp) in latest.items():
            family.add_metric(list(key), value, timestamp=stamp)
        out.append(family)
    return out


def _naive_s(at: datetime) -> float:
    """A naive UTC datetime as Unix seconds."""
    return at.replace(tzinfo=UTC).timestamp()


#: Table name -> the function rendering its families.
_BUILDERS: dict[str, Callable[[pa.Table], list[Metric]]] = {
    "gpu_samples": _families,
    "container_samples": container_families,
}
