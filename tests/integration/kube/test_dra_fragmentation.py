"""Fragmentation under DRA, measured on the driver's shapes served by the emulator and stored.

Two A100s under dynamic MIG publish every placement (partitions.go); the allocations leave a
lone memory slice 7 on one (only 7g.40gb covers it: stranded) and slices 4-7 on the other
(3g.20gb at 4 still fits: not stranded); a third keeps 5-7 free, of which 1g.5gb still
takes 5 and 6. Two H100s under consumable shares leave 72 GiB and
2 GiB.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s_client

from sits_observe.analytics.fragmentation.dra import dra_fragmentation_at
from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.store import Store
from sits_observe.surfaces.service.inventory import InventoryLoop
from tests.integration.kube import bodies
from tests.integration.kube import dra_bodies as dra
from tests.integration.kube.dra_bodies import GIB, checked

pytestmark = pytest.mark.k8s

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
#: A100-40GB MIG placements: profile -> (profile id, starts, slices, SMs, memory MiB).
A100_PROFILES = {
    "1g.5gb": (19, range(7), 1, 14, 4864),
    "2g.10gb": (14, (0, 2, 4), 2, 28, 9856),
    "3g.20gb": (9, (0, 4), 4, 42, 19968),
    "4g.20gb": (5, (0,), 4, 56, 19968),
    "7g.40gb": (0, (0,), 8, 98, 40192),
}
SET = "gpu-0-counter-set"


def _dynamic_mig(node: str) -> list[dict[str, Any]]:
    totals = {"multiprocessors": "98", "memory": "40Gi", **dra.memory_slices(0, 8)}
    devices = [dra.consume(dra.full_gpu(node, 0, product=dra.A100, memory="40Gi"), SET, totals)]
    for profile, (pid, starts, size, sms, mib) in A100_PROFILES.items():
        for start in starts:
            device = dra.mig_device(
                node, 0, profile, profile_id=pid, start=start, memory=f"{mib}Mi", sms=sms
            )
            counters = {
                "multiprocessors": str(sms),
                "memory": f"{mib}Mi",
                **dra.memory_slices(start, size),
            }
            devices.append(dra.consume(device, SET, counters))
    return [
        dra.resource_slice(
            node, [], suffix="cnt01", shared_counters=[dra.counter_set(SET, totals)]
        ),
        dra.resource_slice(node, devices, suffix="dev01"),
    ]


def _mig(profile: str, start: int) -> str:
    pid = A100_PROFILES[profile][0]
    return f"gpu-0-mig-{profile.replace('.', '')}-{pid}-{start}"


def _create(api: k8s_client.ApiClient) -> None:
    core, resource = k8s_client.CoreV1Api(api), k8s_client.ResourceV1Api(api)
    slices = [*_dynamic_mig("mig-a"), *_dynamic_mig("mig-b"), *_dynamic_mig("mig-c")]
    shared = [dra.shared(dra.full_gpu("share-node", i), "80Gi") for i in range(2)]
    slices.append(dra.resource_slice("share-node", shared))
    for body in slices:
        body["spec"]["pool"]["resourceSliceCount"] = (
            2 if body["spec"]["nodeName"] != "share-node" else 1
        )
        resource.create_resource_slice(checked(api, body, "V1ResourceSlice"))
    claims = [
        ("mig-a", _mig("3g.20gb", 0), None, ""),
        ("mig-a", _mig("2g.10gb", 4), None, ""),
        ("mig-a", _mig("1g.5gb", 6), None, ""),
        ("mig-b", _mig("4g.20gb", 0), None, ""),
        ("mig-c", _mig("3g.20gb", 0), None, ""),
        ("mig-c", _mig("1g.5gb", 4), None, ""),
        ("share-node", "gpu-0", "s1", "4Gi"),
        ("share-node", "gpu-0", "s2", "4Gi"),
        ("share-node", "gpu-1", "s3", "78Gi"),
    ]
    for i, (node, device, share, memory) in enumerate(claims):
        body = dra.claim(
            "work",
            f"claim-{i}",
            results=[dra.result(node, device, share_id=share, memory=memory)],
            reserved_for=((f"pod-{i}", f"uid-{i}"),),
            node=node,
        )
        resource.create_namespaced_resource_claim(
            "work", checked(api, body, "ResourceV1ResourceClaim")
        )
    for node in ("mig-a", "mig-b", "mig-c", "share-node"):
        core.create_node(bodies.node(node, gpus=None, product=None, gpu_memory_mib=None))


def test_stranded_slices_and_share_leftovers(api: k8s_client.ApiClient) -> None:
    _create(api)
    with Store.open(":memory:") as store:
        InventoryLoop(
            KubeInventoryCollector(api), store, interval_s=3600, clock=lambda: NOW
        ).run_once()
        found = dra_fragmentation_at(store)
        assert found is not None
        by_node = {p.node: p for p in found.partitioned}
        assert (by_node["mig-a"].slices_free, by_node["mig-a"].slices_stranded) == (1, 1)
        assert by_node["mig-a"].stranded_ratio == 1 / 8
        assert (by_node["mig-b"].slices_free, by_node["mig-b"].slices_stranded) == (4, 0)
        # Slices 5 and 6 still take a 1g.5gb each; 7 takes none.
        assert (by_node["mig-c"].slices_free, by_node["mig-c"].slices_stranded) == (3, 1)
        assert by_node["mig-a"].gpu_uuid == dra.gpu_uuid("mig-a", 0)
        left = {d.device: d for d in found.shared}
        assert (left["gpu-0"].free_bytes, left["gpu-0"].shares) == (72 * GIB, 2)
        assert left["gpu-1"].free_bytes == 2 * GIB
        assert found.typical_share_bytes == 4 * GIB  # the median of 4, 4 and 78 GiB
        assert found.shared_stranded_bytes == 2 * GIB
        assert (found.slices_free, found.slices_stranded) == (8, 2)
        # Judged against 1 GiB requests, the 2 GiB left is not stranded.
        assert dra_fragmentation_at(store, share_bytes=GIB).shared_stranded_bytes == 0  # type: ignore[union-attr]
