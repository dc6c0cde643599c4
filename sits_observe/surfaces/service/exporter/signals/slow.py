"""Per-signal builders of the exporter: the slow signals.

These analyses take from a fraction of a second to seconds on a large fleet (the heatmap's
three scans of an hour of requests, the workload classes' joins over a day of GPU memory
samples, DBSCAN over every GPU's occupancy trend), so the collector computes them in the
background every ``slow_cache_s`` and a scrape serves the latest result without waiting.

Each reads what a report answers for its window (up to now):

- heatmap: the ``heatmap`` report's heatmaps per model over ``heatmap_since_s``
  (:func:`~sits_observe.reports.serving.heatmap.request_heatmaps`: from the first whole time bin);
  the knee and the safe maximum are the report's verdicts (lower edge of the bin), the safe
  maximum at the model's SLO (:func:`~sits_observe.reports.serving.heatmap.safe_max_at` on the same
  bins when a model has its own SLO);
- memory classes: the ``classes`` report's rows per workload over ``class_window_s``
  (:func:`~sits_observe.reports.classes.workload_classes`), counted per class;
- GPU trends: the ``trends`` report's DBSCAN clusters of every GPU's framebuffer occupancy
  over ``trend_window_s`` (:func:`~sits_observe.reports.trends.trend_clusters`); the cluster
  id of each GPU, -1 for noise.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client.core import GaugeMetricFamily, Metric

from sits_observe.reports.classes import workload_classes
from sits_observe.reports.inventory.collector_health import has_inventory
from sits_observe.reports.serving.heatmap import request_heatmaps, safe_max_at
from sits_observe.reports.trends import trend_clusters
from sits_observe.reports.window import Window
from sits_observe.surfaces.service.exporter.signals.labels import GPU_LABELS
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs, capped, label

#: Values of ``sits_memory_class_workloads{class}``: the SPEC's three classes and the GPU
#: workloads whose GPU memory was not measured in the window.
MEMORY_CLASSES: tuple[str, ...] = ("L1", "L2", "L3", "unmeasured")
#: Cluster id of a GPU DBSCAN left out of every cluster (scikit-learn's label).
NOISE = -1


def heatmap(p: PassInputs) -> list[Metric]:
    """``sits_knee_requests_per_second{model}`` and ``sits_safe_max_requests_per_second{model}``."""
    s = p.settings
    settings = s.heatmap_settings()
    maps = request_heatmaps(p.store, Window(p.ago(s.heatmap_since_s), p.until, "now"), settings)
    knee = GaugeMetricFamily(
        "sits_knee_requests_per_second",
        f"throughput where P95 latency starts to rise fastest (heatmap knee, lower bin edge), "
        f"per model over the last {s.heatmap_since_s:g} s",
        labels=("model",),
    )
    safe = GaugeMetricFamily(
        "sits_safe_max_requests_per_second",
        "highest throughput bin (lower edge) whose P95, and every lower bin's, meets the "
        "model's SLO (sits_latency_slo_seconds)",
        labels=("model",),
    )
    for m in capped(maps, s.max_models, lambda m: (-m.requests, label(m.group))):
        model = label(m.group)
        if m.knee.value is not None:
            knee.add_metric((model,), m.knee.value.throughput_lo_rps)
        verdict = m.safe_max
        if model in s.latency_slo_by_model_s:
            verdict = safe_max_at(m, s.slo_s(model), settings)
        if verdict is not None and verdict.value is not None:
            safe.add_metric((model,), verdict.value.throughput_lo_rps)
    return [knee, safe]


def memory_classes(p: PassInputs) -> list[Metric]:
    """``sits_memory_class_workloads{class}``: GPU workloads per memory class."""
    if not has_inventory(p.store):
        return []
    window = Window(p.ago(p.settings.class_window_s), p.until, "now")
    report = workload_classes(p.store, window, p.settings.classes)
    counts: Counter[str] = Counter(w.memory_class or "unmeasured" for w in report)
    family = GaugeMetricFamily(
        "sits_memory_class_workloads",
        f"GPU workloads per memory class (peak GPU memory: L1 < 2 GiB <= L2 <= 8 GiB < L3; "
        f"unmeasured = no GPU memory sample) over the last {p.settings.class_window_s:g} s",
        labels=("class",),
    )
    for name in MEMORY_CLASSES:
        family.add_metric((name,), float(counts[name]))
    return [family]


def gpu_trends(p: PassInputs) -> list[Metric]:
    """``sits_gpu_trend_cluster{Hostname, gpu, UUID, modelName}``: DBSCAN cluster id of
    each GPU's trend."""
    s = p.settings
    result = trend_clusters(p.store, Window(p.ago(s.trend_window_s), p.until, "now"), s.trends)
    members = [(label(m.node), label(m.key), c.label) for c in result.clusters for m in c.members]
    members += [(label(m.node), label(m.key), NOISE) for c in result.noise for m in c.members]
    family = GaugeMetricFamily(
        "sits_gpu_trend_cluster",
        f"DBSCAN cluster id of each GPU's framebuffer-occupancy trend over the last "
        f"{s.trend_window_s:g} s (-1 = noise); ids are renumbered on every run",
        labels=GPU_LABELS,
    )
    names = p.gpu_names(p.ago(s.trend_window_s))
    for node, gpu, cluster in capped(members, s.max_gpus, lambda x: (x[0], x[1])):
        family.add_metric(names.labels(node, gpu), float(cluster))
    return [family]
