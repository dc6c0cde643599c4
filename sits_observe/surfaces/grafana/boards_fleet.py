"""The operations dashboards: fleet overview, pod start timelines, controller.

Each function returns one dashboard's JSON model; every expression is built from
:mod:`.names` through :mod:`.promql`. What each panel shows is documented once, in
docs/grafana.md.

Counters that stay absent while all is well (collector drops, controller errors) are
summed with ``or vector(0)``: their stat then reads 0 rather than "No data", which would
look like a broken scrape.
"""

from __future__ import annotations

from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.panels import (
    HIGH_IS_BAD,
    Json,
    Query,
    dashboard,
    dashed,
    query_variable,
    stat,
    table,
    timeseries,
)
from sits_observe.surfaces.grafana.promql import (
    NAMESPACE,
    NODE,
    agg,
    increase,
    label_values,
    rate,
    sel,
)

#: Seconds since the controller's last decision before it looks stuck.
STUCK_S = ((None, "green"), (900.0, "orange"), (3600.0, "red"))
#: Pod start (scheduled -> running) seconds: image pulls of large models take minutes.
SLOW_START_S = ((None, "green"), (60.0, "orange"), (300.0, "red"))
ANY_IS_BAD = ((None, "green"), (1e-9, "red"))


def _zero_if_absent(expr: str) -> str:
    return f"{expr} or vector(0)"


def fleet_overview() -> Json:
    """The cluster at a glance: fragmentation, load, nodes, and the pipeline's health."""
    p95_over_slo = (
        f"{agg('max', ('model',), sel(m.LATENCY, quantile='0.95'))} / "
        f"{agg('max', ('model',), m.LATENCY_SLO)}"
    )
    now = (
        stat(
            "FGD fragmentation",
            "Fragmented share of the idle GPU capacity (FGD, latest inventory).",
            Query(m.FGD_RATIO, legend="of idle"),
            unit="percentunit",
            thresholds=HIGH_IS_BAD,
            minimum=0,
            maximum=1,
        ),
        stat(
            "Throughput",
            "Successful requests per second, all models.",
            Query(agg("sum", (), m.THROUGHPUT), legend="requests/s"),
            unit="reqps",
        ),
        stat(
            "Worst P95 / SLO",
            "The highest exact P95 / SLO ratio of any model: above 100% an SLO is violated.",
            Query(agg("max", (), p95_over_slo), legend="worst model"),
            unit="percentunit",
            thresholds=((None, "green"), (0.8, "orange"), (1.0, "red")),
            minimum=0,
        ),
        stat(
            "Nodes reporting",
            "Nodes with at least one sample source in the store.",
            Query(f"count(count by (cluster, Hostname) ({m.LAST_SEEN}))", legend="nodes"),
            unit="short",
        ),
    )
    nodes = (
        timeseries(
            "Interference score per node",
            "0.4 bandwidth + 0.35 NVLink conflict + 0.25 NUMA miss, over the exporter window.",
            Query(sel(m.INTERFERENCE, Hostname=NODE), legend="{{Hostname}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "SMF per node",
            "Mean SMF fragmentation rate of each node's GPUs.",
            Query(sel(m.SMF_NODE, Hostname=NODE), legend="{{Hostname}}"),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Age of the newest sample",
            "Seconds since each node's newest sample of each source table: a collector "
            "that stops sending climbs here.",
            Query(f"time() - {sel(m.LAST_SEEN, Hostname=NODE)}", legend="{{Hostname}} {{source}}"),
            unit="s",
            minimum=0,
            width=24,
        ),
    )
    pipeline = (
        stat(
            "Samples dropped per second",
            "Samples the collectors dropped (malformed, non-finite, sentinel), all reasons.",
            Query(_zero_if_absent(agg("sum", (), rate(m.COLLECTOR_DROPS))), legend="drops/s"),
            unit="short",
            thresholds=ANY_IS_BAD,
        ),
        stat(
            "Exporter errors (1 h)",
            "Derived-signal computations that failed in the last hour, all signals.",
            Query(agg("sum", (), increase(m.EXPORTER_ERRORS, "1h")), legend="errors"),
            unit="short",
            thresholds=ANY_IS_BAD,
        ),
        table(
            "Rows in the store",
            "Rows in each store table at the latest scrape.",
            Query(m.STORE_ROWS, legend="{{table}}", instant=True, fmt="table"),
            unit="short",
        ),
        timeseries(
            "Rows ingested per second",
            "Rows the service stored from the agents' batches, by table.",
            Query(agg("sum", ("table",), rate(m.INGEST_ROWS)), legend="{{table}}"),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Ingest batches per second",
            "Agent batches by result (stored, duplicate, rejected, failed).",
            Query(agg("sum", ("result",), rate(m.INGEST_BATCHES)), legend="{{result}}"),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Exporter errors per signal",
            "Failed derived-signal computations per second, by signal.",
            Query(agg("sum", ("signal",), rate(m.EXPORTER_ERRORS)), legend="{{signal}}"),
            unit="short",
            minimum=0,
        ),
    )
    return dashboard(
        "sits-fleet",
        "sits-observe / Fleet overview",
        "The GPU fleet at a glance: fragmentation, load against the SLOs, per-node "
        "interference and SMF, and the health of the collection pipeline.",
        (("Now", now), ("Nodes", nodes), ("Pipeline", pipeline)),
        variables=(query_variable("node", "Node", label_values(m.LAST_SEEN, m.NODE_LABEL)),),
        tags=("fleet",),
    )


def pod_starts() -> Json:
    """Pod start times (scheduled -> running) per namespace."""
    starts = sel(m.POD_START, namespace=NAMESPACE)
    panels = (
        stat(
            "Slowest namespace",
            "The highest mean pod start time of any selected namespace.",
            Query(agg("max", (), starts), legend="slowest"),
            unit="s",
            thresholds=SLOW_START_S,
            width=12,
        ),
        stat(
            "Mean over namespaces",
            "The mean of the namespaces' mean pod start times.",
            Query(agg("avg", (), starts), legend="mean"),
            unit="s",
            thresholds=SLOW_START_S,
            width=12,
        ),
        timeseries(
            "Pod start time per namespace",
            "Mean time from scheduled to running of the pods that started in the window, "
            "per namespace (the timeline analysis).",
            Query(starts, legend="{{namespace}}"),
            unit="s",
            minimum=0,
            width=24,
        ),
        table(
            "Pod start per namespace: latest and worst of the last hour",
            "Latest mean start time and its maximum over the last hour.",
            Query(agg("max", ("namespace",), starts), instant=True, fmt="table"),
            Query(
                agg("max", ("namespace",), f"max_over_time({starts}[1h])"),
                instant=True,
                fmt="table",
            ),
            unit="s",
            transformations=(
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {"Value #A": "latest", "Value #B": "max 1 h"},
                    },
                },
            ),
            width=24,
        ),
    )
    return dashboard(
        "sits-pod-start",
        "sits-observe / Pod start timelines",
        "How long pods take from being scheduled to running, per namespace.",
        (("Pod starts", panels),),
        variables=(
            query_variable("namespace", "Namespace", label_values(m.POD_START, "namespace")),
        ),
        tags=("pods",),
    )


def _quota_rows() -> str:
    """Every quota series with a ``quota`` label "namespace resource" (the table's row key;
    ``kind`` becomes its columns)."""
    joined = (
        f'label_join({sel(m.QUOTA, namespace=NAMESPACE)}, "quota", " ", "namespace", "resource")'
    )
    return agg("max", ("quota", "kind"), joined)


def controller() -> Json:
    """The controller's decisions, errors and quota recommendations."""
    quota = sel(m.QUOTA, namespace=NAMESPACE)
    decisions = (
        stat(
            "Decisions recorded",
            "Controller decisions recorded in the store, all actions and outcomes.",
            Query(agg("sum", (), m.DECISIONS), legend="decisions"),
            unit="short",
        ),
        stat(
            "Since the last decision",
            "Seconds since the controller recorded its latest decision (stuck when high).",
            Query(f"time() - {m.LAST_DECISION}", legend="age"),
            unit="s",
            thresholds=STUCK_S,
        ),
        stat(
            "Controller errors (1 h)",
            "Controller decisions that failed in the last hour, all reasons.",
            Query(
                _zero_if_absent(agg("sum", (), increase(m.CONTROLLER_ERRORS, "1h"))),
                legend="errors",
            ),
            unit="short",
            thresholds=ANY_IS_BAD,
        ),
        table(
            "Decisions by action and outcome",
            "Decisions recorded, by action and outcome (recommended, applied, skipped, failed).",
            Query(agg("sum", ("action", "outcome"), m.DECISIONS), instant=True, fmt="table"),
            unit="short",
            width=6,
        ),
        timeseries(
            "Decisions per second",
            "Rate of recorded decisions by action and outcome.",
            Query(
                agg("sum", ("action", "outcome"), rate(m.DECISIONS)),
                legend="{{action}} {{outcome}}",
            ),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Controller errors per second",
            "Rate of failed controller decisions and errors, by reason.",
            Query(
                _zero_if_absent(agg("sum", ("reason",), rate(m.CONTROLLER_ERRORS))),
                legend="{{reason}}",
            ),
            unit="short",
            minimum=0,
        ),
    )
    quotas = (
        timeseries(
            "Quotas: current vs recommended",
            "ResourceQuota per namespace and resource (GPUs, bytes, CPU cores): current, and "
            "the controller's recommendation (dashed).",
            Query(quota, legend="{{namespace}} {{resource}} {{kind}}"),
            unit="short",
            minimum=0,
            overrides=(dashed("/recommended/", "blue"),),
            width=24,
        ),
        table(
            "Quotas: current vs recommended (latest)",
            "One row per namespace and resource, one column per kind (current is empty where "
            "the namespace has no ResourceQuota yet).",
            Query(_quota_rows(), instant=True, fmt="table"),
            unit="short",
            transformations=(
                {
                    "id": "groupingToMatrix",
                    "options": {"columnField": "kind", "rowField": "quota", "valueField": "Value"},
                },
            ),
            width=24,
        ),
    )
    return dashboard(
        "sits-controller",
        "sits-observe / Controller recommendations and actions",
        "What the controller decided and recommended: decisions by action and outcome, "
        "errors, and the namespaces' quotas against the recommendations.",
        (("Decisions", decisions), ("Quotas", quotas)),
        variables=(query_variable("namespace", "Namespace", label_values(m.QUOTA, "namespace")),),
        tags=("controller",),
    )
