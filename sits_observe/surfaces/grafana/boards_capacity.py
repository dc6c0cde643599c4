"""The capacity dashboards: latency and throughput per model, fragmentation, attribution.

Each function returns one dashboard's JSON model; every expression is built from
:mod:`.names` through :mod:`.promql`. What each panel shows is documented once, in
docs/grafana.md.
"""

from __future__ import annotations

from sits_observe.control.controller.quota_settings import QUOTA_GPU
from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.boards_dra import dra_panels
from sits_observe.surfaces.grafana.boards_gpus import hardware
from sits_observe.surfaces.grafana.panels import (
    HIGH_IS_BAD,
    Json,
    Panel,
    Query,
    dashboard,
    dashed,
    heatmap,
    query_variable,
    stat,
    table,
    timeseries,
)
from sits_observe.surfaces.grafana.promql import MODEL, NAMESPACE, NODE, agg, label_values, sel

#: Thresholds of a measured / limit ratio: under 80% fine, over 100% violated.
OVER_LIMIT = ((None, "green"), (0.8, "orange"), (1.0, "red"))
#: Thresholds of a count of wasted GPUs: none is fine, any is worth a look.
HIGH_COUNT_IS_BAD = ((None, "green"), (0.5, "orange"))


def _by_model(metric: str, **labels: str) -> str:
    return agg("max", ("model",), sel(metric, model=MODEL, **labels))


def latency_throughput() -> Json:
    """Latency distribution (heatmap), quantiles vs SLO, throughput vs knee and safe max."""
    p95 = _by_model(m.LATENCY, quantile="0.95")
    slo = _by_model(m.LATENCY_SLO)
    rps = _by_model(m.THROUGHPUT)
    safe = _by_model(m.SAFE_MAX)
    window = sel(m.WINDOW_LATENCY_BUCKET, model=MODEL)
    distribution = (
        heatmap(
            "Request latency distribution: $model",
            "Successful requests of the model completing in the exporter's window, by "
            "end-to-end latency bucket (exact latencies from the request logs).",
            Query(agg("sum", ("le",), window), legend="{{le}}", fmt="heatmap"),
            unit="s",
            repeat="model",
        ),
    )
    quantiles = (
        timeseries(
            "P50 / P95 / P99 vs SLO (exact)",
            "Exact latency quantiles of the successful requests in the window; dashed: the P95 "
            "SLO the analyses use.",
            Query(sel(m.LATENCY, model=MODEL), legend="{{model}} p{{quantile}} {{window}}"),
            Query(sel(m.LATENCY_SLO, model=MODEL), legend="{{model}} SLO"),
            unit="s",
            minimum=0,
            overrides=(dashed("/SLO/"),),
        ),
        timeseries(
            "P50 / P95 / P99 vs SLO (estimated from server histograms)",
            "Quantiles estimated from the inference servers' latency histograms (vLLM/Triton); "
            "an estimate, bounded by the bucket width, never mixed with the exact ones.",
            Query(
                sel(m.LATENCY_ESTIMATE, model=MODEL),
                legend="{{model}} p{{quantile}} {{window}} (estimate)",
            ),
            Query(sel(m.LATENCY_SLO, model=MODEL), legend="{{model}} SLO"),
            unit="s",
            minimum=0,
            overrides=(dashed("/SLO/"),),
        ),
        stat(
            "P95 / SLO",
            "Exact P95 of each model divided by its SLO: above 100% the SLO is violated.",
            Query(f"{p95} / {slo}", legend="{{model}}"),
            unit="percentunit",
            thresholds=OVER_LIMIT,
            minimum=0,
            width=12,
        ),
        timeseries(
            "Mean latency in the window",
            "Sum / count of the window's latency histogram: the mean end-to-end latency.",
            Query(
                f"{agg('sum', ('model',), sel(m.WINDOW_LATENCY_SUM, model=MODEL))} / "
                f"{agg('sum', ('model',), sel(m.WINDOW_LATENCY_COUNT, model=MODEL))}",
                legend="{{model}}",
            ),
            unit="s",
            minimum=0,
        ),
    )
    throughput = (
        timeseries(
            "Throughput vs knee and safe maximum",
            "Successful requests per second; dashed: the knee of the latency-throughput "
            "heatmap (orange) and the safe maximum that keeps P95 under the SLO (red).",
            Query(sel(m.THROUGHPUT, model=MODEL), legend="{{model}} throughput"),
            Query(sel(m.KNEE, model=MODEL), legend="{{model}} knee"),
            Query(sel(m.SAFE_MAX, model=MODEL), legend="{{model}} safe max"),
            unit="reqps",
            minimum=0,
            overrides=(dashed("/knee/", "orange"), dashed("/safe max/")),
            width=24,
        ),
        stat(
            "Share of the safe maximum in use",
            "Throughput / safe maximum throughput: above 100% P95 is expected over the SLO.",
            Query(f"{rps} / {safe}", legend="{{model}}"),
            unit="percentunit",
            thresholds=OVER_LIMIT,
            minimum=0,
            width=12,
        ),
        stat(
            "Headroom to the safe maximum",
            "Safe maximum minus current throughput, requests per second (negative: over).",
            Query(f"{safe} - {rps}", legend="{{model}}"),
            unit="reqps",
            thresholds=((None, "red"), (0.0, "green")),
            width=12,
        ),
    )
    return dashboard(
        "sits-latency",
        "sits-observe / Latency and throughput",
        "Per model: the latency distribution, exact and estimated quantiles against the SLO, "
        "and throughput against the knee and safe maximum of the heatmap analysis.",
        (
            ("Latency distribution (one heatmap per model)", distribution),
            ("Quantiles vs SLO", quantiles),
            ("Throughput vs knee and safe maximum", throughput),
        ),
        variables=(query_variable("model", "Model", label_values(m.THROUGHPUT, "model")),),
        tags=("latency",),
    )


def _with_trend_cluster(gpu_expr: str) -> str:
    """``gpu_expr`` (per GPU) with a ``trend_cluster`` label: the GPU's DBSCAN trend cluster.

    ``count_values`` turns the cluster id (a sample value) into a label on a series of value
    1, which the ``group_left`` join copies onto each GPU's series without changing it. The
    label is not ``cluster``: that one names the Kubernetes cluster."""
    key = ", ".join(m.GPU_KEY)
    trend = sel(m.TREND_CLUSTER, Hostname=NODE)
    clusters = f'count_values by ({key}) ("trend_cluster", {trend})'
    return f"{gpu_expr} * on ({key}) group_left (trend_cluster) {clusters}"


def fragmentation() -> Json:
    """Cluster and per-node FGD, SMF per GPU/node/namespace, framebuffer trends by cluster."""
    fb = sel(m.FB_USED, Hostname=NODE)
    fgd = (
        stat(
            "FGD fragmentation (of idle GPUs)",
            "Fragmented share of the idle GPU capacity, from the latest inventory (FGD).",
            Query(m.FGD_RATIO, legend="ratio"),
            unit="percentunit",
            thresholds=HIGH_IS_BAD,
            minimum=0,
            maximum=1,
        ),
        stat(
            "FGD fragmentation (of all GPUs)",
            "Fragmented share of all GPU capacity (FGD amount / capacity).",
            Query(m.FGD_AMOUNT_RATIO, legend="amount"),
            unit="percentunit",
            thresholds=HIGH_IS_BAD,
            minimum=0,
            maximum=1,
        ),
        stat(
            "Fragmented GPUs",
            "Sum over the selected nodes of the FGD fragmentation amount, in GPUs.",
            Query(agg("sum", (), sel(m.FGD_NODE_GPUS, Hostname=NODE)), legend="GPUs"),
            unit="short",
            width=12,
        ),
        timeseries(
            "Cluster FGD fragmentation",
            "Both cluster FGD ratios over time.",
            Query(m.FGD_RATIO, legend="of idle capacity"),
            Query(m.FGD_AMOUNT_RATIO, legend="of all capacity"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "FGD fragmentation per node",
            "Each node's FGD fragmentation amount, in GPUs.",
            Query(sel(m.FGD_NODE_GPUS, Hostname=NODE), legend="{{Hostname}}"),
            unit="short",
            minimum=0,
        ),
    )
    smf = (
        timeseries(
            "SMF per node",
            "Mean SMF fragmentation rate of the node's GPUs (0-1).",
            Query(sel(m.SMF_NODE, Hostname=NODE), legend="{{Hostname}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "SMF per namespace",
            "Mean SMF fragmentation rate of the GPUs the namespace's containers hold (0-1).",
            Query(sel(m.SMF_NAMESPACE, namespace=NAMESPACE), legend="{{namespace}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        table(
            "SMF per GPU",
            "The latest SMF fragmentation rate of each GPU.",
            Query(
                sel(m.SMF_GPU, Hostname=NODE),
                legend="{{Hostname}}/{{gpu}}",
                instant=True,
                fmt="table",
            ),
            unit="percentunit",
            width=24,
        ),
    )
    trends = (
        timeseries(
            "Framebuffer occupancy per GPU, with its trend cluster",
            "Framebuffer used / total of each GPU; the legend names the DBSCAN cluster of "
            "the GPU's fragmentation trend (-1 = noise: a trend like no other).",
            Query(_with_trend_cluster(fb), legend="{{Hostname}}/{{gpu}} cluster {{trend_cluster}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=24,
        ),
        timeseries(
            "Mean framebuffer occupancy per trend cluster",
            "Mean occupancy of the GPUs in each DBSCAN trend cluster.",
            Query(
                agg("avg", ("trend_cluster",), _with_trend_cluster(fb)),
                legend="cluster {{trend_cluster}}",
            ),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        stat(
            "GPUs per trend cluster",
            "How many GPUs fall in each DBSCAN trend cluster (-1 = noise).",
            Query(
                f'count_values ("trend_cluster", {sel(m.TREND_CLUSTER, Hostname=NODE)})',
                legend="cluster {{trend_cluster}}",
            ),
            unit="short",
            width=12,
        ),
        table(
            "Trend cluster of each GPU",
            "The DBSCAN cluster id of each GPU's framebuffer trend.",
            Query(sel(m.TREND_CLUSTER, Hostname=NODE), instant=True, fmt="table"),
            unit="none",
            width=24,
        ),
    )
    return dashboard(
        "sits-fragmentation",
        "sits-observe / Fragmentation",
        "GPU fragmentation: FGD for the cluster and each node, DRA memory slices and shares, "
        "SMF per GPU, node and namespace, and framebuffer occupancy trends grouped by their "
        "DBSCAN cluster.",
        (
            ("FGD", fgd),
            ("DRA devices", dra_panels()),
            ("SMF", smf),
            ("Framebuffer trends and DBSCAN clusters", trends),
        ),
        variables=(
            query_variable("node", "Node", label_values(m.FB_USED, m.NODE_LABEL)),
            query_variable("namespace", "Namespace", label_values(m.SMF_NAMESPACE, "namespace")),
        ),
        tags=("fragmentation",),
    )


def _per_gpu(metric: str) -> str:
    """``metric`` labelled by the GPU's identity only (so the four tables merge into one)."""
    return agg("max", (*m.GPU_KEY, m.MODEL_LABEL), sel(metric, Hostname=NODE))


def _wasted() -> tuple[Panel, ...]:
    """GPUs allocated but idle, oversized or stranded, their GPU-hours, and idle share per GPU."""
    return (
        stat(
            "GPUs wasted, by kind",
            "GPUs allocated but idle, allocated far above use (oversized) and idle capacity no "
            "typical pod can use (stranded, FGD), over the exporter's idle window.",
            Query(sel(m.IDLE_GPUS), legend="{{kind}}"),
            unit="short",
            thresholds=HIGH_COUNT_IS_BAD,
            minimum=0,
            width=12,
        ),
        timeseries(
            "Wasted GPU-hours, by kind",
            "GPU-hours the idle, oversized and stranded GPUs wasted in the exporter's idle "
            "window (docs/analytics/rightsizing.md).",
            Query(sel(m.IDLE_WASTED_GPU_HOURS), legend="{{kind}}"),
            unit="short",
            minimum=0,
        ),
        table(
            "Idle share of each held GPU",
            "Share of the window in which each GPU held by a workload had utilisation and "
            "memory activity under the idle floors, most idle first.",
            Query(f"sort_desc({sel(m.IDLE_RATIO)})", instant=True, fmt="table"),
            unit="percentunit",
            width=24,
        ),
    )


def attribution() -> Json:
    """Who holds the GPUs: framebuffer bytes per pod and MIG instance, shared GPUs,
    per-namespace SMF and quotas, per-GPU occupancy, memory classes."""
    gpu_quota = sel(m.QUOTA, namespace=NAMESPACE, resource=QUOTA_GPU)
    held = sel(m.FB_USED_BYTES, Hostname=NODE, namespace=NAMESPACE)
    pods = (
        stat(
            "Shared GPUs",
            "Physical GPUs on which more than one pod was seen in the exporter's window "
            "(MIG instances or time-slicing).",
            Query(f"count({sel(m.SHARED_PODS, Hostname=NODE)} > 1) or vector(0)", legend="shared"),
            unit="short",
            height=8,
        ),
        timeseries(
            "Framebuffer held per namespace",
            "Framebuffer bytes used by the GPUs and MIG instances each namespace's pods hold "
            "(unknown = GPUs with no pod attributed).",
            Query(agg("sum", ("namespace",), held), legend="{{namespace}}"),
            unit="bytes",
            minimum=0,
            width=18,
        ),
        table(
            "Framebuffer by GPU, MIG instance and pod",
            "One row per GPU instance (a MIG profile, or none for a whole GPU) with the pod "
            "holding it, from the newest sample in the exporter's window.",
            Query(held, instant=True, fmt="table"),
            unit="bytes",
            transformations=(
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "__name__": True,
                            "instance": True,
                            "job": True,
                        },
                        "renameByName": {"Value": "framebuffer used"},
                    },
                },
            ),
            width=24,
        ),
    )
    namespaces = (
        timeseries(
            "SMF per namespace",
            "Mean SMF of the GPUs (whole or MIG instances) each namespace's containers hold.",
            Query(sel(m.SMF_NAMESPACE, namespace=NAMESPACE), legend="{{namespace}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "GPU quota per namespace: current vs recommended",
            "ResourceQuota for GPUs, current and as the controller recommends (dashed).",
            Query(gpu_quota, legend="{{namespace}} {{kind}}"),
            unit="short",
            minimum=0,
            overrides=(dashed("/recommended/", "blue"),),
        ),
        stat(
            "Workloads per memory class",
            "Number of workloads in each memory class of the workload analysis.",
            Query(m.MEMORY_CLASS, legend="{{class}}"),
            unit="short",
            width=24,
        ),
    )
    gpus = (
        table(
            "GPUs: occupancy, SMF, trend cluster and pods",
            "One row per physical GPU: framebuffer occupancy, SMF, trend cluster, and the "
            "number of pods seen on it in the exporter's window.",
            Query(_per_gpu(m.FB_USED), instant=True, fmt="table"),
            Query(_per_gpu(m.SMF_GPU), instant=True, fmt="table"),
            Query(_per_gpu(m.TREND_CLUSTER), instant=True, fmt="table"),
            Query(_per_gpu(m.SHARED_PODS), instant=True, fmt="table"),
            unit="none",
            transformations=(
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "Value #A": "framebuffer used",
                            "Value #B": "SMF",
                            "Value #C": "trend cluster",
                            "Value #D": "pods",
                        },
                    },
                },
            ),
            width=24,
        ),
        timeseries(
            "Framebuffer occupancy per GPU",
            "Framebuffer used / total of each GPU (or MIG instance) over time.",
            Query(sel(m.FB_USED, Hostname=NODE), legend="{{Hostname}}/{{gpu}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=24,
        ),
    )
    return dashboard(
        "sits-attribution",
        "sits-observe / MIG and shared-GPU attribution",
        "Which pods and namespaces hold GPUs and how well they use them: framebuffer per "
        "pod and MIG instance, shared GPUs, SMF and GPU quota per namespace, per GPU "
        "occupancy, SMF, trend cluster and pod count, dcgm-exporter's utilisation, SM activity, "
        "power, temperature and XID errors per GPU, and the GPUs wasted idle, oversized or "
        "stranded.",
        (
            ("Pods and MIG instances", pods),
            ("Namespaces", namespaces),
            ("GPUs", gpus),
            ("GPU hardware (dcgm-exporter)", hardware()),
            ("Idle, oversized and stranded GPUs", _wasted()),
        ),
        variables=(
            query_variable("node", "Node", label_values(m.FB_USED, m.NODE_LABEL)),
            query_variable("namespace", "Namespace", label_values(m.QUOTA, "namespace")),
        ),
        tags=("attribution",),
    )
