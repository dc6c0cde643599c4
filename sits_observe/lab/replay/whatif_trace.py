"""The trace the ``whatif`` report replays: two CSV files, or the live cluster of a window.

- files: a node list and a pod list in the Alibaba cluster-trace-gpu-v2023 schema, read by
  :mod:`sits_observe.analytics.traces.cluster_trace` exactly as ``sits-observe simulate`` reads
  them;
- the live cluster: the latest ``nodes`` snapshot in the window as the node list
  (allocatable CPU, memory, GPUs and product; nodes not Ready left out) and the pods seen in
  the window as the pod list (each pod's latest CPU, memory and GPU request, its GPU share
  ``gpu_milli`` and allowed GPU products), the inventory the FGD measure reads
  (:mod:`sits_observe.analytics.fragmentation.fgd_live`). A node with unknown allocatable CPU or
  memory gets a value no pod exceeds, so it is never the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, normalise_gpu_types
from sits_observe.analytics.traces.cluster_trace import (
    NodeList,
    PodList,
    load_node_list,
    load_pod_list,
)
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.spec import require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.rows import IN_WINDOW

MIB = 1024 * 1024
#: Resources of a node whose allocatable value is unknown: never the limit.
UNKNOWN_NODE_MILLI = 1 << 40
UNKNOWN_NODE_MIB = 1 << 40
FILLED_BY = "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)"

_NODES = f"""
SELECT node, coalesce(gpu_allocatable, 0) AS gpus, coalesce(gpu_product, '') AS model,
       cpu_allocatable_milli AS cpu, memory_allocatable_bytes AS mem
FROM nodes WHERE {IN_WINDOW} AND node IS NOT NULL
QUALIFY ts = max(ts) OVER () AND ready IS DISTINCT FROM false
ORDER BY node
"""
_PODS = f"""
SELECT coalesce(pod_uid, namespace || '/' || pod) AS name,
       arg_max(coalesce(cpu_request_milli, 0), ts) AS cpu,
       arg_max(coalesce(memory_request_bytes, 0), ts) AS mem,
       arg_max(greatest(coalesce(gpu_request, 0), 0), ts) AS gpus,
       arg_max(gpu_milli, ts) AS milli,
       arg_max(gpu_types, ts) AS types
FROM pods WHERE {IN_WINDOW} GROUP BY ALL ORDER BY name
"""


@dataclass(frozen=True)
class Trace:
    """A node list and a pod list, with a one-line description."""

    nodes: NodeList
    pods: PodList
    label: str

    @property
    def total_gpus(self) -> int:
        """GPUs of the node list."""
        return int(self.nodes.gpu_count.sum())


def trace_from_files(nodes: Path, pods: Path) -> Trace:
    """The trace in two CSV files (Alibaba v2023 schema)."""
    for path in (nodes, pods):
        if not path.is_file():
            raise ConfigError(f"trace file {path} does not exist")
    node_list, pod_list = load_node_list(nodes), load_pod_list(pods)
    return Trace(node_list, pod_list, f"{nodes.name} + {pods.name}")


def trace_from_store(store: Store, window: Window) -> Trace:
    """The live cluster of ``window`` as a trace (see the module docstring)."""
    require_rows(store, window, "nodes", FILLED_BY)
    require_rows(store, window, "pods", FILLED_BY)
    params = window.params
    nodes = store.query(_NODES, params).to_pylist()
    if not nodes:
        raise NoDataError(f"no Ready node in the latest nodes snapshot of {window.describe()}")
    pods = store.query(_PODS, params).to_pylist()
    node_list = NodeList(
        names=tuple(str(n["node"]) for n in nodes),
        cpu_milli=_ints([UNKNOWN_NODE_MILLI if n["cpu"] is None else n["cpu"] for n in nodes]),
        memory_mib=_ints(
            [UNKNOWN_NODE_MIB if n["mem"] is None else n["mem"] // MIB for n in nodes]
        ),
        gpu_count=_ints([n["gpus"] for n in nodes]),
        gpu_model=tuple(str(n["model"] or "unknown") for n in nodes),
        source="store: nodes",
    )
    pod_list = PodList(
        names=tuple(str(p["name"]) for p in pods),
        cpu_milli=_ints([p["cpu"] for p in pods]),
        memory_mib=_ints([-(-int(p["mem"]) // MIB) for p in pods]),
        num_gpu=_ints([p["gpus"] for p in pods]),
        gpu_milli=_ints([_milli(p["gpus"], p["milli"]) for p in pods]),
        gpu_types=tuple(normalise_gpu_types(p["types"]) for p in pods),
        source="store: pods",
    )
    label = f"live cluster: {len(node_list)} nodes, {len(pod_list)} pods"
    return Trace(node_list, pod_list, label)


def _milli(gpus: int, milli: int | None) -> int:
    """The per-GPU share of a pod row: whole GPUs when unknown (rows before schema 4)."""
    if not gpus:
        return 0
    return MILLI_PER_GPU if milli is None else min(max(int(milli), 1), MILLI_PER_GPU)


def _ints(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.maximum(np.asarray([int(v) for v in values], dtype=np.int64), 0)
