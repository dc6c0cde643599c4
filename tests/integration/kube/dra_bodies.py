"""ResourceSlices and ResourceClaims as NVIDIA's DRA driver publishes and allocates them.

Shapes follow kubernetes-sigs/dra-driver-nvidia-gpu (driver ``gpu.nvidia.com``, one pool per
node named after it): ``cmd/gpu-kubelet-plugin/deviceinfo.go`` (a whole GPU: ``gpu-<minor>``
with ``type``, ``uuid``, ``productName``, ``architecture``, ``cudaComputeCapability``,
``driverVersion`` and ``capacity.memory``), ``mig.go`` (a MIG device:
``gpu-<minor>-mig-<profile without dots>-<profileId>-<placementStart>`` with ``parentUUID``
and ``profile``, capacities ``multiprocessors`` ... ``memory``), ``partitions.go`` (dynamic
MIG: one counter set ``gpu-<minor>-counter-set`` per GPU with ``memory-slice-<i>`` counters,
consumed by the whole GPU and every partition), ``consumable_shares.go``
(``allowMultipleAllocations`` and a memory ``requestPolicy``) and the demo claims'
``GpuConfig`` sharing config. The values are illustrative, as the driver's own reference page
says of its examples; every body here is checked against the official client's
``resource.k8s.io/v1`` models before it is created (:func:`checked`).
"""

from __future__ import annotations

import json
import re
import zlib
from datetime import datetime
from typing import Any

from kubernetes import client as k8s_client

DRIVER = "gpu.nvidia.com"
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024**3


def gpu_uuid(node: str, minor: int) -> str:
    """A stable GPU UUID for a node's GPU (NVML's ``GPU-8-4-4-4-12`` hex form)."""
    digits = f"{zlib.crc32(node.encode()):08x}{minor:04x}"
    return f"GPU-{minor:08x}-aaaa-bbbb-cccc-{digits}"


def _common(product: str) -> dict[str, Any]:
    return {
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper" if "H100" in product else "Ampere"},
        "cudaComputeCapability": {"version": "9.0.0" if "H100" in product else "8.0.0"},
        "driverVersion": {"version": "580.126.20"},
        "cudaDriverVersion": {"version": "13.0.0"},
    }


def full_gpu(node: str, minor: int, *, product: str = H100, memory: str = "80Gi") -> dict[str, Any]:
    """A whole GPU as ``GpuInfo.GetDevice`` publishes it."""
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            **_common(product),
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, minor)},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + minor:02x}:00.0"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def mig_device(
    node: str,
    minor: int,
    profile: str,
    *,
    profile_id: int,
    start: int,
    memory: str,
    sms: int,
    product: str = A100,
    mig_uuid: str | None = None,
) -> dict[str, Any]:
    """A MIG device as ``MigDeviceInfo.GetDevice`` publishes it (static MIG: with its uuid)."""
    attributes = {
        **_common(product),
        "type": {"string": "mig"},
        "parentUUID": {"string": gpu_uuid(node, minor)},
        "profile": {"string": profile},
    }
    if mig_uuid is not None:
        attributes["uuid"] = {"string": mig_uuid}
    return {
        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
        "attributes": attributes,
        "capacity": {
            "multiprocessors": {"value": str(sms)},
            "copyEngines": {"value": "1"},
            "decoders": {"value": "0"},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": "0"},
            "ofaEngines": {"value": "0"},
            "memory": {"value": memory},
        },
    }


def consume(device: dict[str, Any], counter_set: str, counters: dict[str, str]) -> dict[str, Any]:
    """``device`` consuming ``counters`` of ``counter_set`` (partitionable devices)."""
    return {
        **device,
        "consumesCounters": [
            {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in counters.items()}}
        ],
    }


def memory_slices(start: int, size: int) -> dict[str, str]:
    """The ``memory-slice-<i>`` counters a placement covers (``addCountersForMemSlices``)."""
    return {f"memory-slice-{i}": "1" for i in range(start, start + size)}


def shared(device: dict[str, Any], memory: str) -> dict[str, Any]:
    """``device`` under ``--consumable-shares=memory`` (``applyConsumableShares``)."""
    return {
        **device,
        "allowMultipleAllocations": True,
        "capacity": {
            **device["capacity"],
            "memory": {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
        },
    }


def resource_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    generation: int = 1,
    suffix: str = "x7k2p",
    shared_counters: list[dict[str, Any]] | None = None,
    driver: str = DRIVER,
) -> dict[str, Any]:
    """One node's slice of the driver's pool (the pool is named after the node)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": devices,
    }
    if shared_counters is not None:
        spec["sharedCounters"] = shared_counters
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-{suffix}"},
        "spec": spec,
    }


def counter_set(name: str, counters: dict[str, str]) -> dict[str, Any]:
    """A ``sharedCounters`` entry."""
    return {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}


def claim(
    namespace: str,
    name: str,
    *,
    results: list[dict[str, Any]] | None = None,
    reserved_for: tuple[tuple[str, str], ...] = (),
    requests: list[dict[str, Any]] | None = None,
    sharing: str | None = None,
    node: str = "",
) -> dict[str, Any]:
    """A ResourceClaim; allocated when ``results`` is given, reserved for the pods named."""
    requests = requests or [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": requests}},
    }
    if sharing is not None:
        body["spec"]["devices"]["config"] = [gpu_config(sharing, [r["name"] for r in requests])]
    if results is not None:
        allocation: dict[str, Any] = {
            "devices": {"results": results},
            "allocationTimestamp": "2024-05-01T11:58:00Z",
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        if sharing is not None:
            config = gpu_config(sharing, [r["name"] for r in requests])
            allocation["devices"]["config"] = [{"source": "FromClaim", **config}]
        body["status"] = {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for],
        }
    return body


def gpu_config(strategy: str, requests: list[str]) -> dict[str, Any]:
    """NVIDIA's opaque ``GpuConfig`` with a sharing strategy (api/nvidia.com/resource/v1beta1)."""
    sharing: dict[str, Any] = {"strategy": strategy}
    if strategy == "MPS":
        sharing["mpsConfig"] = {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        }
    else:
        sharing["timeSlicingConfig"] = {"interval": "Long"}
    return {
        "requests": requests,
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": sharing,
            },
        },
    }


def result(
    node: str, device: str, *, request: str = "gpu", share_id: str | None = None, memory: str = ""
) -> dict[str, Any]:
    """One ``status.allocation.devices.results`` entry."""
    out: dict[str, Any] = {"request": request, "driver": DRIVER, "pool": node, "device": device}
    if share_id is not None:
        out["shareID"] = share_id
    if memory:
        out["consumedCapacity"] = {"memory": memory}
    return out


def checked(api: k8s_client.ApiClient, body: dict[str, Any], model: str) -> Any:
    """``body`` as the official client's ``model``; raises when a key is not the API's.

    The generated models keep only the API's fields, so a body that survives the round trip
    unchanged has the API's shape, key by key.
    """
    typed = api.deserialize(json.dumps(body), model, "application/json")
    back = api.sanitize_for_serialization(typed)
    if _times(back) != _times(body):
        raise AssertionError(
            f"{model} does not round-trip:\n{json.dumps(body)}\n{json.dumps(back)}"
        )
    return typed


def _times(value: Any) -> Any:
    """``value`` with RFC 3339 times as datetimes (the models print ``Z`` as ``+00:00``)."""
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)", value):
        return datetime.fromisoformat(value)
    return value
