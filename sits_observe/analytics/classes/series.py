"""The inputs of :func:`~sits_observe.analytics.classes.classify.class_report` rebuilt from series.

With a PromQL store (``classes --view classes --promql-url``) the four inputs the DuckDB path
reads (:func:`~sits_observe.analytics.classes.classify.load_class_inputs`) come from other series;
the class rules then run unchanged:

- **pods** (:func:`pods_of`): kube-state-metrics' pods of the window in the ``pods`` table's
  shape (``store.promql_kube``); the workload is the inventory collector's rule
  (:func:`~sits_observe.collectors.kube.pods.workload_of`) over KSM's ``created_by_kind`` /
  ``created_by_name``, without the pod's labels (KSM does not export them by default), so a
  ReplicaSet's Deployment is found by its name's hash suffix;
- **memory peaks**: :func:`~sits_observe.analytics.classes.classify.pod_memory_peaks` over the
  dcgm-exporter ``fb_used_bytes`` rows labelled with a pod, as DuckDB's ``gpu_samples``;
  there is no per-process memory (``gpu_processes`` is NVML's, not exported), so every peak is
  the device's memory and a GPU shared by two pods counts both (``shared_gpu``);
- **requests** (:func:`requests_from_histograms`): one row per request the vLLM histograms
  counted in the window (``store.promql_requests``), its latency, prompt and output lengths
  each placed at its bucket's upper bound.

The last makes three values estimates, with bounds that follow from the placement (a request
in bucket ``(lo, hi]`` reads as ``hi``):

- **P95 latency** and **P95 sequence length**: never below the exact value of the placed
  quantity and above it by less than the width of the widest bucket holding the two requests
  the P95 lies between (linear interpolation, as the exact path). A request in the ``+Inf``
  bucket reads as the largest finite bound (an understatement).
- The sequence length is prompt + output of one request, but the two histograms are
  separate: the rows pair the i-th shortest prompt with the i-th shortest output (as if long
  prompts had long outputs). The P95 of that pairing is the sum of the two P95s, which can be
  off either way; whatever the pairing, the true P95 lies between the larger of the two P95s
  and the sum of the two P97.5s (tokens are not negative; P(X + Y > a + b) <= P(X > a) +
  P(Y > b)).
- **SLA-violation rate**: a request counts as slow when its bucket's upper bound exceeds the
  SLA. Exact when the SLA is a bucket bound; otherwise the requests of the bucket that holds
  the SLA all count as slow, an overstatement by at most that bucket's share. Failed requests
  are not in the histograms apart (vLLM observes aborted ones with the others), so none
  counts as failed: the exact path adds them to the violations.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from sits_observe.collectors.kube.pods import workload_of

#: The ``requests`` columns :func:`class_report` reads.
REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "latency_s": pl.Float64(),
    "ok": pl.Boolean(),
    "prompt_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
}
_POD_COLUMNS = ("pod_uid", "namespace", "pod", "node", "qos_class", "priority_class", "gpu_request")


def pods_of(pods: pa.Table) -> pl.DataFrame:
    """One row per pod of a ``pods``-shaped table (KSM's), with its workload."""
    frame = pl.DataFrame(pods)
    workload = [
        workload_of(kind, owner, {}, str(pod))
        for kind, owner, pod in frame.select("owner_kind", "owner_name", "pod").iter_rows()
    ]
    return frame.select(*_POD_COLUMNS).with_columns(workload=pl.Series(workload, dtype=pl.String))


def _placed(group: pl.DataFrame) -> npt.NDArray[np.float64]:
    """The requests of one histogram (``le``, cumulative ``requests``), each at its bucket's
    upper bound (the ``+Inf`` bucket at the largest finite one), in ascending order."""
    ordered = group.sort("le")
    bounds = ordered.get_column("le").to_numpy()
    cumulative = np.rint(ordered.get_column("requests").to_numpy())
    counts = np.clip(np.diff(cumulative, prepend=0.0), 0, None).astype(np.int64)
    finite = bounds[np.isfinite(bounds)]
    if finite.size == 0:
        return np.zeros(0)
    values = np.where(np.isfinite(bounds), bounds, finite.max())
    return np.repeat(values, counts)


def _paired(values: npt.NDArray[np.float64], n: int) -> list[int | None]:
    """``values`` (ascending) stretched or shrunk to ``n`` rows by rank (None when empty)."""
    if values.size == 0:
        return [None] * n
    index = (np.arange(n) * values.size) // max(n, 1)
    return [int(v) for v in values[index]]


def requests_from_histograms(buckets: pl.DataFrame) -> pl.DataFrame:
    """One :data:`REQUEST_SCHEMA` row per request of ``buckets``
    (``store.promql_requests.BUCKETS_SCHEMA``): as many rows per pod as its latency
    histogram counted, each ``ok``, the token columns paired by rank (module docstring)."""
    parts = [pl.DataFrame(schema=REQUEST_SCHEMA)]
    for (namespace, pod), group in buckets.group_by("namespace", "pod", maintain_order=True):
        placed = {
            str(quantity): _placed(part)
            for (quantity,), part in group.group_by("quantity", maintain_order=True)
        }
        latency = placed.get("latency_s", np.zeros(0))
        n = int(latency.size)
        if n == 0:
            continue
        parts.append(
            pl.DataFrame(
                {
                    "namespace": [namespace] * n,
                    "pod": [pod] * n,
                    "latency_s": latency,
                    "ok": [True] * n,
                    "prompt_tokens": _paired(placed.get("prompt_tokens", np.zeros(0)), n),
                    "output_tokens": _paired(placed.get("output_tokens", np.zeros(0)), n),
                },
                schema=REQUEST_SCHEMA,
            )
        )
    return pl.concat(parts)


def estimated_pods(buckets: pl.DataFrame) -> list[str]:
    """``namespace/pod`` of the pods whose counts took the store's ``increase()`` (a
    counter reset in the window), sorted."""
    flagged = buckets.filter(pl.col("estimated")).select("namespace", "pod").unique()
    return sorted(f"{ns}/{pod}" for ns, pod in flagged.iter_rows())


def node_gpu_memory(nodes: pa.Table) -> dict[str, int]:
    """node -> memory of one GPU, bytes, from a ``nodes``-shaped table (None values left out)."""
    rows = pl.DataFrame(nodes).select("node", "gpu_memory_bytes").drop_nulls().iter_rows()
    return {str(node): int(memory) for node, memory in rows}
