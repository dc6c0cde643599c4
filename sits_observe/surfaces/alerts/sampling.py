"""Current samples of a prometheus-client registry, as the alert conditions read them.

Generic: the evaluator knows metric names and labels only, never how a signal is computed.
Each sample is keyed by the name PromQL sees (``..._total`` for counter values); the
``_created`` timestamps of counters and histograms are left out.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sits_observe.surfaces.alerts.conditions import Labels, labels_of


def registry_samples(registry: CollectorRegistry) -> dict[str, list[tuple[Labels, float]]]:
    """``{sample name: [(labels, value), ...]}`` of one ``registry.collect()``."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            samples.setdefault(sample.name, []).append(
                (labels_of(sample.labels), float(sample.value))
            )
    return samples
