"""The extender's view read from a Prometheus-compatible store: no DuckDB data needed.

A :class:`~sits_observe.control.extender.clusterview.source.ViewSource` over the series a GPU
cluster's Prometheus / VictoriaMetrics already holds (docs/extender.md, "Without the DuckDB file"):

- inventory: kube-state-metrics, read into ``nodes`` / ``pods`` rows by
  :class:`~sits_observe.store.promql.kube.PromQLKubeSource` (the KSM snapshot is each
  target's newest scrape within ``lookback_s``, the workload M every pod seen in the
  ``workload_window_s`` before the pods snapshot, as DuckDB's) and turned into the cluster
  state by :func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster_of`, the code the
  DuckDB view runs. Whether a new scrape landed is one cheap query per side
  (:class:`~sits_observe.store.promql.view.PromQLViewReads`); only then is the inventory
  re-read. Node labels: ``nvidia.com/gpu.product`` / ``.memory`` and the view's topology
  overrides ``sits.io/gpu-interconnect`` / ``sits.io/gpus-per-numa``, from
  ``kube_node_labels`` when KSM's label allowlist exports them;
- GPU memory and UUIDs: dcgm-exporter's ``DCGM_FI_DEV_FB_FREE`` / ``_FB_USED`` /
  ``_FB_RESERVED`` (``_FB_TOTAL``) with the ``UUID`` / ``gpu`` / ``Hostname`` labels, raw
  samples through :class:`~sits_observe.store.promql.source.PromQLGpuSource`: the same
  ``gpu_samples`` rows DuckDB holds, reduced by the same rule (latest non-NULL value per
  GPU, GPUs without a pod first, then by free memory, then UUID);
- slow signals: interference per node from the same series (``analytics.interference``),
  and each workload's measured need (the largest ``fb_used_bytes`` of its pods; the
  workload is the collector's rule, ``collectors.kube_pods.workload_of``, over KSM's
  ``created_by_kind`` / ``created_by_name``).

What it cannot read, and what that changes:

- **NUMA miss ratios** (``numa_samples``) are not exported: a node's interference score lacks
  its NUMA term, lower than DuckDB's by at most ``numa_weight`` (0.25) x the node's miss
  ratio, so its penalty by at most ``round(10 x 0.25 x miss)`` points;
- **measured topology** (``gpu_topology`` / ``gpu_links``): not exported; NVLink and GPUs per
  NUMA node come from the labels, else the product table and the half-split (as a DuckDB
  store without topology rows);
- **assigned GPUs** (HAMi's annotation) and node affinity products: not in KSM, as for
  ``fragmentation --promql-url`` (docs/analytics/fragmentation-fgd.md).

State: the pods snapshot's workloads are kept from the last inventory read for the slow
signals (the view cache rebuilds in one thread, inventory first).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.workload import typical_pods
from sits_observe.analytics.fragmentation.fgd_live import InventoryTables, live_cluster_of
from sits_observe.analytics.topology.interference import SAMPLE_COLUMNS
from sits_observe.collectors.kube.pods import workload_of
from sits_observe.control.extender.clusterview.slow import SlowSignals, node_interference
from sits_observe.control.extender.clusterview.source import (
    GPUS_PER_NUMA_LABEL,
    INTERCONNECT_LABEL,
    NO_PODS,
    InventoryReads,
    NodeLabels,
    state_without_pods,
)
from sits_observe.control.extender.nodes import IntArray, uuids_by_index
from sits_observe.domain.times import utc_naive
from sits_observe.errors import StoreError
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import KsmInventory, PromQLKubeSource
from sits_observe.store.promql.source import PromQLGpuSource
from sits_observe.store.promql.view import PromQLViewReads, ksm_label

if TYPE_CHECKING:
    from sits_observe.control.extender.clusterview.view_settings import ViewSettings

_TOPOLOGY_LABELS = (INTERCONNECT_LABEL, GPUS_PER_NUMA_LABEL)


class PromQLViewSource:
    """The view's reads from kube-state-metrics and dcgm-exporter series (module docstring).

    ``ksm_matchers`` / ``gpu_matchers``: extra label matchers for each job's series;
    ``lookback_s``: how far back the newest KSM scrape may be (the view's
    ``max_snapshot_age_s``: an older inventory fails open either way).
    """

    name = "promql"
    no_inventory = (
        "no kube-state-metrics node series (kube_node_status_allocatable) in the PromQL store yet"
    )

    def __init__(
        self,
        client: PromQLClient,
        *,
        ksm_matchers: str = "",
        gpu_matchers: str = "",
        lookback_s: float = 300.0,
    ) -> None:
        self.client = client
        self._kube = PromQLKubeSource(client, matchers=ksm_matchers)
        self._reads = PromQLViewReads(client, matchers=ksm_matchers)
        self._gpus = PromQLGpuSource(client, matchers=gpu_matchers)
        self._lookback_s = lookback_s
        self._workloads = pl.DataFrame(
            schema={"namespace": pl.String, "pod": pl.String, "workload": pl.String}
        )

    def close(self) -> None:
        """Close the PromQL client's connections (``ViewSource``)."""
        self.client.close()

    def snapshot_times(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """The newest KSM node / pod sample times (``ViewSource``)."""
        return self._reads.snapshot_times(utc_naive(now), lookback_s=self._lookback_s)

    def inventory(
        self,
        now: datetime,
        settings: ViewSettings,
        nodes_at: datetime,
        pods_at: datetime | None,
    ) -> InventoryReads:
        """The KSM inventory as the view's inventory (``ViewSource``)."""
        until = utc_naive(now)
        since = None if pods_at is None else pods_at - timedelta(seconds=settings.workload_window_s)
        ksm = self._kube.inventory(since, until, lookback_s=self._lookback_s)
        if ksm.nodes_at is None:
            raise StoreError(
                f"kube-state-metrics node series ended between two reads at {self.client.base_url}"
            )
        fgd = None
        warnings: tuple[str, ...]
        if ksm.pods_at is None:
            state, warnings = state_without_pods(_node_rows(ksm.nodes)), (NO_PODS,)
        else:
            tables = InventoryTables(ksm.nodes, ksm.nodes_at, ksm.pods, ksm.pods_at, ksm.workload)
            live = live_cluster_of(tables)
            if not live.shapes:
                raise StoreError(
                    f"no kube_pod_info series within {settings.workload_window_s:g} s of the "
                    "latest scrape; the workload M is built from recent pods"
                )
            state, warnings = live.state, live.warnings
            fgd = FragmentationIndex(state, typical_pods(live.shapes))
        if ksm.absent:
            warnings = (*warnings, f"kube-state-metrics families absent: {', '.join(ksm.absent)}")
        self._workloads = _workloads(ksm.pods)
        return InventoryReads(
            state,
            fgd,
            warnings,
            *_label_facts(ksm, self._reads.node_labels(until, lookback_s=self._lookback_s)),
            bound_pods=_bound(ksm.pods),
            gpu_uuids=self._uuids(state.node_names, state.gpu_count, nodes_at, until, settings),
        )

    def gpu_memory(self, now: datetime, window_s: float) -> pa.Table:
        """The latest FB sample of each whole GPU, ranked (``ViewSource``)."""
        until = utc_naive(now)
        since = until - timedelta(seconds=window_s)
        frame = self._frame(since, until, ["fb_free_bytes", "fb_total_bytes"])
        latest = (
            frame.filter(pl.col("mig_instance_id").is_null() & pl.col("node").is_not_null())
            .sort("ts")
            .group_by("node", "gpu_uuid")
            .agg(
                free=pl.col("fb_free_bytes").drop_nulls().last(),
                total=pl.col("fb_total_bytes").drop_nulls().last(),
                busy=pl.col("pod").is_not_null().last(),
            )
        )
        ranked = latest.sort(
            ["node", "busy", "free", "gpu_uuid"],
            descending=[False, False, True, False],
            nulls_last=True,
        ).with_columns(rank=pl.int_range(pl.len()).over("node"))
        return ranked.select("node", "free", "total", "rank").to_arrow()

    def slow_signals(self, now: datetime, settings: ViewSettings) -> SlowSignals:
        """Interference and measured needs from the dcgm-exporter series (``ViewSource``);
        no NUMA miss ratios, no measured topology (module docstring)."""
        until = utc_naive(now)
        since = until - timedelta(seconds=settings.slow_window_s)
        frame = self._frame(since, until, [*SAMPLE_COLUMNS[1:], "fb_used_bytes"])
        scores = node_interference(frame.select(SAMPLE_COLUMNS), settings.interference)
        used = frame.filter(
            pl.col("fb_used_bytes").is_not_null() & pl.col("mig_instance_id").is_null()
        )
        needs = (
            used.join(self._workloads, on=["namespace", "pod"])
            .group_by("namespace", "workload")
            .agg(pl.col("fb_used_bytes").max())
        )
        return SlowSignals(
            now,
            scores,
            {(str(r[0]), str(r[1])): int(r[2]) for r in needs.iter_rows()},
        )

    def _frame(self, since: datetime, until: datetime, columns: list[str]) -> pl.DataFrame:
        frame = pl.from_arrow(self._gpus.gpu_samples(since, until, columns=columns))
        assert isinstance(frame, pl.DataFrame)
        return frame

    def _uuids(
        self,
        names: tuple[str, ...],
        gpu_count: IntArray,
        nodes_at: datetime,
        until: datetime,
        settings: ViewSettings,
    ) -> tuple[tuple[str, ...], ...]:
        since = nodes_at - timedelta(seconds=settings.gpu_sample_window_s)
        frame = self._frame(since, until, ["fb_free_bytes"])
        rows = (
            frame.filter(
                pl.col("mig_instance_id").is_null()
                & pl.col("node").is_not_null()
                & pl.col("gpu_index").is_not_null()
                & pl.col("gpu_uuid").is_not_null()
            )
            .sort("ts")
            .group_by("node", "gpu_index")
            .agg(pl.col("gpu_uuid").last().alias("uuid"))
            .rename({"gpu_index": "idx"})
        )
        return uuids_by_index(names, gpu_count, rows.iter_rows(named=True))


def _node_rows(nodes: pa.Table) -> list[dict[str, object]]:
    """The snapshot's Ready nodes as the DuckDB view reads them without pods."""
    rows = []
    for r in nodes.to_pylist():
        if r["node"] is None or r["ready"] is False:
            continue
        rows.append(
            {
                "node": r["node"],
                "gpus": r["gpu_allocatable"] or 0,
                "gpu_product": r["gpu_product"],
                "cpu": r["cpu_allocatable_milli"] or 0,
            }
        )
    return sorted(rows, key=lambda r: str(r["node"]))


def _label_facts(
    ksm: KsmInventory, labels: dict[str, dict[str, str]]
) -> tuple[dict[str, int], dict[str, bool], dict[str, int]]:
    facts = NodeLabels.of(
        (
            str(r["node"]),
            r["gpu_memory_bytes"],
            {k: labels.get(str(r["node"]), {}).get(ksm_label(k), "") for k in _TOPOLOGY_LABELS},
        )
        for r in ksm.nodes.select(["node", "gpu_memory_bytes"]).to_pylist()
    )
    return facts.gpu_memory_bytes, facts.interconnect, facts.gpus_per_numa


def _bound(pods: pa.Table) -> frozenset[tuple[str, str]]:
    return frozenset(
        (str(r["namespace"]), str(r["pod"]))
        for r in pods.select(["namespace", "pod", "node"]).to_pylist()
        if r["node"] is not None
    )


def _workloads(pods: pa.Table) -> pl.DataFrame:
    """``namespace``, ``pod``, ``workload`` of the snapshot's pods (the collector's rule,
    without the pod labels KSM does not export: a ReplicaSet's hash is recognised by form)."""
    rows = [
        {
            "namespace": r["namespace"],
            "pod": r["pod"],
            "workload": workload_of(r["owner_kind"], r["owner_name"], {}, str(r["pod"])),
        }
        for r in pods.select(["namespace", "pod", "owner_kind", "owner_name"]).to_pylist()
    ]
    return pl.DataFrame(
        rows, schema={"namespace": pl.String, "pod": pl.String, "workload": pl.String}
    )
