"""Per-signal builders of the exporter: idle, oversized and stranded GPUs.

One slow signal (its window reads an hour of GPU samples by default, so it runs in the
background pass): the ``recommend`` report's idle findings
(:func:`~sits_observe.reports.actions.recommend_findings.idle_gpus`) over the GPUs held by pods in
the last ``idle_window_s``, with the stranded capacity (FGD F_n(M)) of the latest inventory
when there is one (:func:`~sits_observe.reports.fragmentation.live_inventory`, the one the
``sits_fgd_*`` families measure). Families (docs/metrics.md):

- ``sits_gpu_idle_gpus{kind}``: GPUs allocated but idle, oversized (allocated far above use)
  or stranded by fragmentation; every ``kind`` always present (0 when none), so a panel or an
  alert has a series from the first pass;
- ``sits_gpu_idle_wasted_gpu_hours{kind}``: the GPU-hours they waste in the window;
- ``sits_gpu_idle_ratio{Hostname, gpu, UUID, modelName, namespace, workload}``: share of
  the window's samples in which each held GPU was idle (0-1), the ``max_gpus`` most idle
  kept.

Money needs a price table, which the exporter does not take; the analysis prices findings
when given one (docs/analytics/rightsizing.md).
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.core import GaugeMetricFamily, Metric

from sits_observe.reports.actions.recommend_findings import WASTE_KINDS, idle_gpus
from sits_observe.reports.fragmentation import live_inventory
from sits_observe.reports.window import Window
from sits_observe.surfaces.service.exporter.signals.labels import GPU_LABELS
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs, capped, label


def gpu_idle(p: PassInputs) -> list[Metric]:
    """The three ``sits_gpu_idle`` families over the last ``idle_window_s``."""
    s = p.settings
    # Stranded: of the inventory the sits_fgd_* families measure (the latest, M of the
    # fgd_since_s before it); none while there is no inventory or no pod in M's window.
    live = live_inventory(p.store, None, workload_s=s.fgd_since_s)
    span = Window(p.ago(s.idle_window_s), p.until, "now")
    report = idle_gpus(p.store, span, s.idle, window_s=s.idle_window_s, live=live)
    window = f"over the last {s.idle_window_s:g} s"
    gpus = GaugeMetricFamily(
        "sits_gpu_idle_gpus",
        f"GPUs allocated but idle, allocated far above use (oversized) or stranded by "
        f"fragmentation (FGD), {window}",
        labels=("kind",),
    )
    hours = GaugeMetricFamily(
        "sits_gpu_idle_wasted_gpu_hours",
        f"GPU-hours wasted by idle, oversized and stranded GPUs {window}",
        labels=("kind",),
    )
    for kind in WASTE_KINDS:
        gpus.add_metric((kind,), report.gpus[kind])
        hours.add_metric((kind,), report.wasted_gpu_hours[kind])
    names = p.gpu_names(p.ago(s.idle_window_s))
    shares: dict[tuple[str, ...], float] = defaultdict(float)
    for row in report.holdings.iter_rows(named=True):
        key = (
            *names.labels(label(row["node"]), label(row["gpu_uuid"])),
            label(row["namespace"]),
            label(row["workload"]),
        )
        # Two pods of one workload on one GPU in the window share a label set: the idler.
        shares[key] = max(shares[key], float(row["idle_share_ratio"]))
    ratio = GaugeMetricFamily(
        "sits_gpu_idle_ratio",
        f"share (0-1) of each held GPU's samples with utilisation and memory activity under "
        f"the idle floors, {window}",
        labels=(*GPU_LABELS, "namespace", "workload"),
    )
    # Keep-order as before the dcgm-exporter label names: share, then node, UUID, holder.
    for held in capped(shares, s.max_gpus, lambda k: (-shares[k], k[0], k[2], k[4], k[5])):
        ratio.add_metric(held, shares[held])
    return [gpus, hours, ratio]
