"""Per-signal builders of the exporter: fragmentation, GPUs, quotas and pod start.

Each builder reads what a report answers for the pass's window and only groups and caps the
result for labels: FGD over the live inventory
(:func:`sits_observe.reports.fragmentation.live_fragmentation`, the ``fragmentation``
report's measure), the node scores of the ``interference`` report
(:func:`~sits_observe.reports.interference.node_interference`), the ``smf`` report's latest
values (:func:`~sits_observe.reports.smf.latest_smf`), the newest minute of the ``trends``
report's framebuffer occupancy series (:func:`~sits_observe.reports.trends.newest_occupancy`)
and the ``timeline`` report's pod starts (:func:`~sits_observe.reports.timeline.ready_starts`).
GPU attribution (which pod / MIG instance holds each GPU's framebuffer, how many pods share a
GPU) is read by :mod:`sits_observe.reports.inventory.gpu_holders`. Quotas come from the controller's
own records (:func:`sits_observe.reports.actions.quotas.quota_values`): the ``decisions`` table
holds, per namespace quota, the value in effect when the controller read the ResourceQuota
(``current``) and its proposal.

Signals that read the Kubernetes inventory (FGD, pod start) export nothing, without counting
an error, while the store holds no ``nodes`` / ``pods`` snapshot yet: "no inventory yet" is
the normal state of a fresh service, not a fault an alert should see.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from prometheus_client.core import GaugeMetricFamily, Metric

from sits_observe.reports.actions.quotas import quota_values
from sits_observe.reports.fragmentation import FragmentationQuery, live_fragmentation
from sits_observe.reports.interference import node_interference
from sits_observe.reports.inventory.collector_health import has_inventory
from sits_observe.reports.inventory.gpu_holders import gpu_instances, gpu_sharing
from sits_observe.reports.smf import latest_smf
from sits_observe.reports.timeline import ready_starts
from sits_observe.reports.trends import newest_occupancy
from sits_observe.reports.window import Window
from sits_observe.surfaces.service.exporter.cache import GaugeRows
from sits_observe.surfaces.service.exporter.signals.labels import GPU_LABELS, NODE
from sits_observe.surfaces.service.exporter.signals.requests import (
    PassInputs,
    capped,
    finite,
    label,
    labels_of,
)

#: Bucket of the framebuffer occupancy read for ``sits_gpu_framebuffer_used_ratio``: the
#: value is the mean over the newest minute bucket with samples (trend clustering's signal).
FRAMEBUFFER_BUCKET_S = 60
#: ``mig_profile`` label of a whole (non-MIG) GPU: the store's NULL profile.
WHOLE_GPU = "none"


def fragmentation(p: PassInputs) -> list[Metric]:
    """Cluster FGD ratio and amount, and each node's F_n(M) in GPUs (latest inventory)."""
    if not has_inventory(p.store):
        return []
    # The latest inventory whatever its time (window None), M of the fgd_since_s before it.
    measured = live_fragmentation(
        p.store, None, FragmentationQuery(), workload_s=p.settings.fgd_since_s
    )
    report = measured.result
    ratio = GaugeMetricFamily(
        "sits_fgd_fragmentation_ratio",
        "cluster FGD fragmentation: fragmented share of the idle GPU capacity (0-1), "
        "latest inventory",
        value=report.frag_ratio,
    )
    amount = GaugeMetricFamily(
        "sits_fgd_fragmentation_amount_ratio",
        "cluster FGD fragmentation: fragmented share of all GPU capacity (0-1), latest inventory",
        value=report.frag_amount_ratio,
    )
    per_node = measured.node_fragmentation_gpus()
    nodes = GaugeRows(
        "sits_fgd_node_fragmentation_gpus",
        "FGD fragmentation F_n(M) of each node, in GPUs (latest inventory)",
        (NODE,),
        (
            ((node,), gpus)
            for node, gpus in capped(per_node, p.settings.max_nodes, lambda x: (-x[1], x[0]))
        ),
    )
    return [ratio, amount, nodes]


def interference(p: PassInputs) -> list[Metric]:
    """``sits_interference_score_ratio{Hostname}`` over the window's GPU samples."""
    per_node = node_interference(p.store, p.span, p.settings.interference)
    scores = [(label(node), score.score) for node, score in per_node.items()]
    family = GaugeRows(
        "sits_interference_score_ratio",
        f"interference score per node (0-1: 0.4 bandwidth + 0.35 NVLink conflict + "
        f"0.25 NUMA miss) over the last {p.settings.window_s:g} s",
        (NODE,),
        (
            ((node,), score)
            for node, score in capped(scores, p.settings.max_nodes, lambda x: (-x[1], x[0]))
        ),
    )
    return [family]


def smf(p: PassInputs) -> list[Metric]:
    """SMF per GPU (latest aligned value), mean per node over its GPUs, mean per namespace
    over its containers' latest aligned values; over the window's cgroup / GPU samples
    (:func:`~sits_observe.analytics.fragmentation.smf_latest.read_latest_smf`: the summaries'
    ``latest_smf`` without aligning the whole window)."""
    s = p.settings
    latest = latest_smf(p.store, p.span, s.smf)
    gpus = [
        (label(r["node"]), label(r["gpu_uuid"]), value)
        for r in latest.gpus.to_pylist()
        if (value := finite(r["latest_smf"])) is not None
    ]
    per_node: dict[str, list[float]] = defaultdict(list)
    for node, _, value in gpus:
        per_node[node].append(value)
    per_namespace: dict[str, list[float]] = defaultdict(list)
    for c in latest.containers.to_pylist():
        if (value := finite(c["latest_smf"])) is not None:
            per_namespace[label(c["namespace"])].append(value)
    names = p.gpu_names()
    gpu_family = GaugeRows(
        "sits_smf_ratio",
        "SMF fragmentation rate of each GPU (0-1), latest aligned sample",
        GPU_LABELS,
        (
            (names.labels(node, gpu), value)
            for node, gpu, value in capped(gpus, s.max_gpus, lambda x: (-x[2], x[0], x[1]))
        ),
    )
    node_means = {n: fmean(v) for n, v in per_node.items()}
    node_family = GaugeRows(
        "sits_smf_node_ratio",
        "mean SMF of the node's GPUs (0-1)",
        (NODE,),
        (
            ((node,), node_means[node])
            for node in capped(node_means, s.max_nodes, lambda n: (-node_means[n], n))
        ),
    )
    ns_means = {n: fmean(v) for n, v in per_namespace.items()}
    ns_family = GaugeRows(
        "sits_smf_namespace_ratio",
        "mean SMF of the namespace's containers (0-1), latest aligned sample of each",
        ("namespace",),
        (
            ((ns,), ns_means[ns])
            for ns in capped(ns_means, s.max_namespaces, lambda n: (-ns_means[n], n))
        ),
    )
    return [gpu_family, node_family, ns_family]


def framebuffer(p: PassInputs) -> list[Metric]:
    """``sits_gpu_framebuffer_used_ratio{Hostname, gpu, UUID, modelName}``: the newest
    minute's mean occupancy."""
    newest = newest_occupancy(p.store, p.span, FRAMEBUFFER_BUCKET_S)
    rows = [
        (label(newest.nodes[code]), label(newest.keys[code]), v)
        for code, value in zip(newest.codes.tolist(), newest.values.tolist(), strict=True)
        if (v := finite(value)) is not None
    ]
    names = p.gpu_names()
    family = GaugeRows(
        "sits_gpu_framebuffer_used_ratio",
        "framebuffer occupancy of each GPU (fb_used / fb_total, 0-1), mean of the newest "
        "minute with samples",
        GPU_LABELS,
        (
            (names.labels(node, gpu), value)
            for node, gpu, value in capped(rows, p.settings.max_gpus, lambda x: (-x[2], x[0], x[1]))
        ),
    )
    return [family]


def gpu_attribution(p: PassInputs) -> list[Metric]:
    """``sits_gpu_framebuffer_used_bytes{Hostname, gpu, UUID, modelName, mig_profile,
    namespace, pod}`` (newest framebuffer use of each GPU instance in the window, with the pod
    holding it) and ``sits_gpu_shared_pods{Hostname, gpu, UUID, modelName}`` (distinct
    attributed pods per physical GPU in the window: more than 1 = shared by MIG or
    time-slicing)."""
    instances = gpu_instances(p.store, p.span)
    keys = zip(
        *(labels_of(instances.column(c)) for c in ("node", "gpu_index", "gpu_uuid", "model_name")),
        labels_of(instances.column("mig_profile"), WHOLE_GPU),
        labels_of(instances.column("namespace")),
        labels_of(instances.column("pod")),
        strict=True,
    )
    used: dict[tuple[str, ...], float] = defaultdict(float)
    for key, value in zip(keys, instances.column("fb_used_bytes").to_pylist(), strict=True):
        # Two unattributed instances of one profile on one GPU share a label set: summed.
        used[key] += float(value)
    per_gpu: dict[tuple[str, str], float] = defaultdict(float)
    for instance, value in used.items():
        per_gpu[(instance[0], instance[2])] += value
    kept = set(capped(per_gpu, p.settings.max_gpus, lambda g: (-per_gpu[g], g)))
    used_family = GaugeRows(
        "sits_gpu_framebuffer_used_bytes",
        f"framebuffer used by each GPU instance (MIG instance, or mig_profile=none for a "
        f"whole GPU) and the pod holding it (unknown = unattributed), newest sample in the "
        f"last {p.settings.window_s:g} s",
        (*GPU_LABELS, "mig_profile", "namespace", "pod"),
        (
            (instance, used[instance])
            for instance in sorted(used)
            if (instance[0], instance[2]) in kept
        ),
    )
    sharing = gpu_sharing(p.store, p.span)
    gpus = zip(
        *(labels_of(sharing.column(c)) for c in ("node", "gpu_index", "gpu_uuid", "model_name")),
        strict=True,
    )
    rows = list(zip(gpus, sharing.column("pods").to_pylist(), strict=True))
    shared_family = GaugeRows(
        "sits_gpu_shared_pods",
        f"distinct attributed pods seen on each physical GPU in the last "
        f"{p.settings.window_s:g} s (more than 1: shared by MIG or time-slicing)",
        GPU_LABELS,
        capped(rows, p.settings.max_gpus, lambda x: (-x[1], x[0][0], x[0][2])),
    )
    return [used_family, shared_family]


def quotas(p: PassInputs) -> list[Metric]:
    """``sits_quota{namespace, resource, kind}``: per namespace quota, the value in effect
    when the controller last read it (``current``) and its latest proposal
    (``recommended``), from the latest decision of each (namespace, quota action)."""
    family = GaugeMetricFamily(
        "sits_quota",
        "namespace ResourceQuota per resource in base units (GPUs, CPU cores, bytes): the "
        "value in effect (kind=current) and the controller's latest proposal (recommended)",
        labels=("namespace", "resource", "kind"),
    )
    values = quota_values(p.store)
    kept = set(capped({v.namespace for v in values}, p.settings.max_namespaces, str))
    for v in values:
        if v.namespace in kept:
            family.add_metric((v.namespace, v.resource, v.kind), v.value)
    return [family]


def pod_start(p: PassInputs) -> list[Metric]:
    """``sits_pod_start_seconds{namespace}``: mean scheduled -> ready time of the pods
    created in the last ``pod_start_window_s`` that became ready (no anomaly)."""
    if not has_inventory(p.store):
        return []
    window = Window(p.ago(p.settings.pod_start_window_s), p.until, "now")
    ready = ready_starts(p.store, window)
    starts: dict[str, list[float]] = defaultdict(list)
    for namespace, start_s in zip(
        labels_of(ready.column("namespace")), ready.column("start_s").to_pylist(), strict=True
    ):
        starts[namespace].append(start_s)
    family = GaugeMetricFamily(
        "sits_pod_start_seconds",
        f"mean pod start (scheduled -> ready) per namespace of the pods created in the last "
        f"{p.settings.pod_start_window_s:g} s",
        labels=("namespace",),
    )
    means = {ns: fmean(v) for ns, v in starts.items()}
    for ns in capped(means, p.settings.max_namespaces, lambda n: (-means[n], n)):
        family.add_metric((ns,), means[ns])
    return [family]
