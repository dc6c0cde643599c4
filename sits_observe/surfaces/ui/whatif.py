"""The what-if page's inputs and run: a trace (CSV files or the live inventory) replayed by
the scheduling simulator (:mod:`sits_observe.analytics.schedsim`).

Two traces:

- files: a node list and a pod list in the Alibaba cluster-trace-gpu-v2023 schema, read by
  :mod:`sits_observe.analytics.traces` exactly as ``sits-observe simulate`` reads them;
- the live cluster: the latest ``nodes`` snapshot as the node list (allocatable CPU, memory,
  GPUs and product) and the pods seen in the window as the pod list (each pod's latest CPU,
  memory and GPU request), the same inventory the FGD measure reads
  (:mod:`sits_observe.analytics.fgd_live`), with each pod's GPU share (``gpu_milli``) and
  allowed GPU products. A node with unknown allocatable CPU or memory
  gets a value no pod exceeds, so it is never the limit.

The run and its document are ``simulate``'s: one :class:`PolicyResult` per policy over the
seeds, turned into the same JSON keys by ``simulate``'s ``result_document``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from sits_observe.analytics.fgd_model import MILLI_PER_GPU, normalise_gpu_types
from sits_observe.analytics.schedsim import (
    PolicyResult,
    ReplayResult,
    SimulationSettings,
    simulate,
)
from sits_observe.analytics.traces import NodeList, PodList, load_node_list, load_pod_list
from sits_observe.control.replay_extender import choose_policies
from sits_observe.errors import ConfigError, StoreError
from sits_observe.store import Store
from sits_observe.surfaces.cli.simulate import result_document

MIB = 1024 * 1024
#: Resources of a node whose allocatable value is unknown: never the limit.
UNKNOWN_NODE_MILLI = 1 << 40
UNKNOWN_NODE_MIB = 1 << 40


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


def trace_from_store(store: Store, *, since_s: float) -> Trace:
    """The live cluster as a trace (see the module docstring)."""
    nodes = store.query(
        "SELECT node, coalesce(gpu_allocatable, 0) AS gpus, coalesce(gpu_product, '') AS model, "
        "cpu_allocatable_milli AS cpu, memory_allocatable_bytes AS mem FROM nodes "
        "WHERE ts = (SELECT max(ts) FROM nodes) AND ready IS DISTINCT FROM false "
        "AND node IS NOT NULL ORDER BY node"
    ).to_pylist()
    if not nodes:
        raise StoreError("no node inventory in the store: the live cluster needs `nodes` rows")
    newest = store.scalar("SELECT max(ts) FROM pods")
    if newest is None:
        raise StoreError("no pod inventory in the store: the live cluster needs `pods` rows")
    pods = store.query(
        "SELECT coalesce(pod_uid, namespace || '/' || pod) AS name, "
        "arg_max(coalesce(cpu_request_milli, 0), ts) AS cpu, "
        "arg_max(coalesce(memory_request_bytes, 0), ts) AS mem, "
        "arg_max(greatest(coalesce(gpu_request, 0), 0), ts) AS gpus, "
        "arg_max(gpu_milli, ts) AS milli, arg_max(gpu_types, ts) AS types "
        "FROM pods WHERE ts >= ? GROUP BY ALL ORDER BY name",
        [newest - timedelta(seconds=since_s)],
    ).to_pylist()
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


def run_whatif(
    trace: Trace,
    policies: Sequence[str],
    seeds: Sequence[int],
    settings: SimulationSettings,
    *,
    progress: Callable[[ReplayResult], None] | None = None,
    scheduler_config: Path | None = None,
) -> list[dict[str, Any]]:
    """Replay ``trace`` with every policy and seed; one ``simulate --format json`` document
    per policy (``kube-sits*`` call the extenders of ``scheduler_config``, the shipped
    configuration by default). A trace the simulator refuses is a :class:`ConfigError`."""
    if not policies:
        raise ConfigError("choose at least one policy")
    if len(trace.pods) == 0:
        raise ConfigError("the trace has no pods to replay")
    chosen = choose_policies(policies, trace.pods, scheduler_config)
    try:
        results: list[PolicyResult] = simulate(
            trace.nodes, trace.pods, chosen, list(seeds), settings, progress=progress
        )
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"cannot replay the trace: {exc}") from exc
    return [result_document(r, settings, trace.total_gpus) for r in results]


def curve_rows(documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Long-format curve points (policy, arrived, measure, value) for a line chart."""
    rows = []
    for doc in documents:
        for point in doc["curve"]:
            for measure in ("alloc_ratio", "frag_ratio"):
                rows.append(
                    {
                        "policy": doc["policy"],
                        "arrived_ratio": point["arrived"],
                        "measure": measure,
                        "value": point[measure],
                    }
                )
    return rows
