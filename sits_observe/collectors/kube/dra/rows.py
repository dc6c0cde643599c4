"""DRA devices and allocations as store rows, and DRA GPUs folded into node and pod rows.

Every reader of the inventory (fleet, allocation, fragmentation, quotas, the extender's view)
reads ``nodes.gpu_allocatable`` and ``pods.gpu_request`` / ``gpu_milli`` / ``gpu_uuids``. A
node whose GPUs only DRA publishes (the ``ExtendedResource`` feature: ``nvidia.com/gpu``
served by DRA, so the node's allocatable no longer lists GPUs) would look GPU-less to all of
them, so the collector folds DRA in here, once:

- **Node.** ``gpu_allocatable`` = the device plugin's ``nvidia.com/gpu`` + the node's physical
  GPUs in DRA (:func:`~sits_observe.collectors.kube.dra.slices.node_gpus`: partitions of one
  GPU counted once). A node may run both (NVIDIA's ``gpuResourcesEnabledOverride``); when both
  publish GPUs and GPU feature discovery labels the machine's GPU count
  (``nvidia.com/gpu.count``), the sum is capped at that count, so GPUs both stacks publish are
  not counted twice. ``gpu_product`` (spaces as dashes, as GPU feature discovery writes
  ``nvidia.com/gpu.product``) and ``gpu_memory_bytes`` are filled from DRA when no label
  gives them.
- **Pod.** ``gpu_request`` = the containers' ``nvidia.com/gpu`` + the GPU devices DRA
  allocated to the pod's own claims + the GPUs its unallocated claims ask for. Devices of an
  extended-resource claim are the containers' ``nvidia.com/gpu`` (not added twice).
  ``gpu_milli`` is the pod's share of its one device when that is all it holds
  (:mod:`.claims`), ``gpu_uuids`` gains the physical GPUs of every DRA device it holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sits_observe.collectors.kube.dra.claims import MILLI_PER_GPU, DraAllocation, PodDra
from sits_observe.collectors.kube.dra.slices import DraInventory, NodeGpus

#: GPU feature discovery's label with the machine's GPU count (NVIDIA/k8s-device-plugin).
GPU_COUNT_LABEL = "nvidia.com/gpu.count"


def device_rows(inventory: DraInventory, ts: datetime) -> list[dict[str, Any]]:
    """``dra_devices`` rows of one snapshot."""
    rows = []
    for d in inventory.devices:
        totals = inventory.counter_sets.get((d.driver, d.pool, d.counter_set or ""))
        rows.append(
            {
                "ts": ts,
                "node": d.node,
                "driver": d.driver,
                "pool": d.pool,
                "pool_generation": d.pool_generation,
                "slice": d.slice_name,
                "device": d.device,
                "device_type": d.device_type,
                "device_uuid": d.device_uuid,
                "gpu_uuid": d.gpu_uuid,
                "physical_gpu": d.physical_gpu,
                "gpu_product": d.gpu_product,
                "mig_profile": d.mig_profile,
                "memory_bytes": d.memory_bytes,
                "gpu_memory_bytes": d.gpu_memory_bytes,
                "shares": d.shares,
                "multiple_allocations": d.multiple_allocations,
                "counter_set": d.counter_set,
                "counters_json": _json(d.counters) if d.counter_set else None,
                "counter_set_json": _json(totals) if totals is not None else None,
            }
        )
    return rows


def allocation_rows(allocations: tuple[DraAllocation, ...], ts: datetime) -> list[dict[str, Any]]:
    """``dra_allocations`` rows of one snapshot."""
    rows = []
    for a in allocations:
        found = a.found
        rows.append(
            {
                "ts": ts,
                "namespace": a.namespace,
                "claim": a.claim,
                "claim_uid": a.claim_uid,
                "pod_uid": a.pod.uid if a.pod else None,
                "pod": a.pod.name if a.pod else None,
                "pod_claim": a.pod.pod_claim if a.pod else None,
                "extended_resource": a.pod.extended if a.pod else None,
                "consumers": a.consumers,
                "node": found.node if found else None,
                "driver": a.driver,
                "pool": a.pool,
                "device": a.device,
                "request": a.request,
                "share_id": a.share_id,
                "consumed_memory_bytes": a.consumed_memory_bytes,
                "share_milli": a.share_milli,
                "pod_share_milli": a.pod_share_milli if a.pod else None,
                "sharing_strategy": a.sharing_strategy,
                "device_uuid": found.device_uuid if found else None,
                "gpu_uuid": found.gpu_uuid if found else None,
                "mig_profile": found.mig_profile if found else None,
                "allocated_at": a.allocated_at,
            }
        )
    return rows


def merge_node(row: dict[str, Any], gpus: NodeGpus | None) -> None:
    """Fold a node's DRA GPUs into its ``nodes`` row (module docstring), in place."""
    if gpus is None or gpus.gpus == 0:
        return
    plugin = row["gpu_allocatable"] or 0
    total = plugin + gpus.gpus
    if plugin:
        count = _label_count(row.get("labels_json"))
        if count is not None:
            total = max(plugin, gpus.gpus, min(total, count))
    row["gpu_allocatable"] = total
    if row["gpu_product"] is None and gpus.gpu_product:
        row["gpu_product"] = gpus.gpu_product.replace(" ", "-")
    if row["gpu_memory_bytes"] is None:
        row["gpu_memory_bytes"] = gpus.gpu_memory_bytes


def merge_pod(row: dict[str, Any], given: PodDra | None) -> None:
    """Fold what DRA gives a pod into its ``pods`` row (module docstring), in place."""
    if given is None:
        return
    dra = len(given.devices) + given.pending_gpus
    if dra:
        containers = row["gpu_request"] or 0
        row["gpu_request"] = containers + dra
        shares = list(given.devices.values())
        if containers == 0 and dra == 1 and shares:
            row["gpu_milli"] = min(MILLI_PER_GPU, shares[0])
        else:
            row["gpu_milli"] = MILLI_PER_GPU
    if given.gpu_uuids:
        held = [u for u in (row["gpu_uuids"] or "").split(",") if u]
        row["gpu_uuids"] = ",".join(dict.fromkeys([*held, *given.gpu_uuids]))


def _label_count(labels_json: Any) -> int | None:
    try:
        labels = json.loads(labels_json) if isinstance(labels_json, str) else {}
    except ValueError:
        return None
    raw = labels.get(GPU_COUNT_LABEL) if isinstance(labels, dict) else None
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def _json(values: Mapping[str, int]) -> str:
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))
