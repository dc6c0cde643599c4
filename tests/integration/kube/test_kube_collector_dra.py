"""DRA GPUs in the inventory: ResourceSlices and ResourceClaims served by the emulator.

The objects are NVIDIA's DRA driver's shapes (:mod:`tests.integration.kube.dra_bodies`),
each checked against the official client's ``resource.k8s.io/v1`` models and created through
``ResourceV1Api``; the collector reads them over loopback HTTP like a real API server's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client as k8s_client

from sits_observe.analytics.cluster_allocatable import cluster_allocatable
from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.collectors.kube.inventory import KubeInventoryCollector, KubeInventorySettings
from sits_observe.domain.schema.dra_tables import DRA_ALLOCATIONS, DRA_DEVICES
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store
from sits_observe.surfaces.service.inventory import InventoryLoop
from tests.integration.kube import bodies
from tests.integration.kube import dra_bodies as dra
from tests.integration.kube.dra_bodies import GIB, checked, gpu_uuid

pytestmark = pytest.mark.k8s

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
MIB = 1024**2
#: The MIG device the MPS claim shares: a 3g.20gb of a 40 GiB A100 (memory as NVML gives it).
MPS_MIG_MIB = 19968


def _node(name: str, *, gpus: str | None, labels: dict[str, str] | None = None) -> Any:
    body = bodies.node(name, gpus=gpus, product=None, gpu_memory_mib=None)
    body["metadata"]["labels"].update(labels or {})
    return body


def _pod(
    name: str,
    uid: str,
    *,
    node: str | None,
    claims: dict[str, str] | None = None,
    shared_claims: dict[str, str] | None = None,
    gpus: str | None = None,
    extended_claim: str | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    """A pod whose claims come from templates (``claims``: pod name -> generated claim) or
    are shared by name (``shared_claims``)."""
    requests = {"cpu": "2", "memory": "8Gi", **({"nvidia.com/gpu": gpus} if gpus else {})}
    names = [*(claims or {}), *(shared_claims or {})]
    main = bodies.container("main", requests=requests, limits=requests)
    if names:
        main["resources"]["claims"] = [{"name": n} for n in names]
    body = bodies.pod(name, containers=[main], node_name=node, phase=phase)
    body["metadata"]["uid"] = uid
    spec_claims = [
        {"name": n, "resourceClaimTemplateName": f"{n}-template"} for n in claims or {}
    ] + [{"name": n, "resourceClaimName": c} for n, c in (shared_claims or {}).items()]
    if spec_claims:
        body["spec"]["resourceClaims"] = spec_claims
    if claims:
        body["status"]["resourceClaimStatuses"] = [
            {"name": n, "resourceClaimName": c} for n, c in claims.items()
        ]
    if extended_claim:
        body["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": extended_claim,
            "requestMappings": [
                {
                    "containerName": "main",
                    "resourceName": "nvidia.com/gpu",
                    "requestName": "container-0-request-0",
                }
            ],
        }
    return body


def _slices() -> list[dict[str, Any]]:
    h100 = "dra-h100"
    dyn = "dra-mig-dynamic"
    static = "dra-mig-static"
    both = "both-node"
    counter_set = "gpu-0-counter-set"
    a100 = {"product": dra.A100}
    return [
        # A republished pool: generation 1 (four GPUs) is stale, generation 2 counts.
        dra.resource_slice(
            h100, [dra.full_gpu(h100, i) for i in range(4)], generation=1, suffix="old11"
        ),
        dra.resource_slice(
            h100,
            [dra.full_gpu(h100, 0), dra.shared(dra.full_gpu(h100, 1), "80Gi")],
            generation=2,
        ),
        # Dynamic MIG: the counters in a slice of their own, the whole GPU and three
        # partitions consuming them (partitions.go).
        _pool_of_two(
            dra.resource_slice(
                dyn,
                [],
                suffix="cnt01",
                shared_counters=[
                    dra.counter_set(
                        counter_set,
                        {"multiprocessors": "98", "memory": "40Gi", **dra.memory_slices(0, 8)},
                    )
                ],
            )
        ),
        _pool_of_two(
            dra.resource_slice(
                dyn,
                [
                    dra.consume(
                        dra.full_gpu(dyn, 0, memory="40Gi", **a100),
                        counter_set,
                        {"multiprocessors": "98", "memory": "40Gi", **dra.memory_slices(0, 8)},
                    ),
                    _mig_on_counters(dyn, "1g.5gb", 19, 0, 1, "4864Mi", 14),
                    _mig_on_counters(dyn, "3g.20gb", 9, 4, 4, f"{MPS_MIG_MIB}Mi", 42),
                    _mig_on_counters(dyn, "4g.20gb", 5, 0, 4, "19968Mi", 56),
                ],
                suffix="dev01",
            )
        ),
        # Static MIG: only MIG devices, each with its own uuid and its GPU's in parentUUID.
        dra.resource_slice(
            static,
            [
                dra.mig_device(
                    static,
                    0,
                    "3g.20gb",
                    profile_id=9,
                    start=0,
                    memory="19968Mi",
                    sms=42,
                    mig_uuid="MIG-00000000-0000-0000-0000-000000000001",
                ),
                dra.mig_device(
                    static,
                    0,
                    "3g.20gb",
                    profile_id=9,
                    start=4,
                    memory="19968Mi",
                    sms=42,
                    mig_uuid="MIG-00000000-0000-0000-0000-000000000002",
                ),
                dra.mig_device(
                    static,
                    1,
                    "7g.40gb",
                    profile_id=0,
                    start=0,
                    memory="40192Mi",
                    sms=98,
                    mig_uuid="MIG-00000000-0000-0000-0000-000000000003",
                ),
            ],
        ),
        dra.resource_slice(both, [dra.full_gpu(both, i) for i in range(4)]),
        dra.resource_slice("overlap-node", [dra.full_gpu("overlap-node", i) for i in range(4)]),
    ]


def _pool_of_two(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["pool"]["resourceSliceCount"] = 2
    return body


def _mig_on_counters(
    node: str, profile: str, profile_id: int, start: int, size: int, memory: str, sms: int
) -> dict[str, Any]:
    device = dra.mig_device(
        node, 0, profile, profile_id=profile_id, start=start, memory=memory, sms=sms
    )
    counters = {"multiprocessors": str(sms), "memory": memory, **dra.memory_slices(start, size)}
    return dra.consume(device, "gpu-0-counter-set", counters)


def _claims() -> list[dict[str, Any]]:
    h100, dyn = "dra-h100", "dra-mig-dynamic"
    return [
        dra.claim(
            "serving",
            "llm-0-gpu-8xk2m",
            results=[dra.result(h100, "gpu-0")],
            reserved_for=(("llm-0", "uid-llm-0"),),
            node=h100,
        ),
        *(
            dra.claim(
                "serving",
                f"share-{x}-gpu-4gi",
                results=[dra.result(h100, "gpu-1", share_id=f"share-uid-{x}", memory="4Gi")],
                reserved_for=((f"share-{x}", f"uid-share-{x}"),),
                node=h100,
            )
            for x in "ab"
        ),
        dra.claim(
            "batch",
            "mps-shared",
            results=[dra.result(dyn, "gpu-0-mig-3g20gb-9-4", request="mps-gpu")],
            requests=[{"name": "mps-gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}],
            reserved_for=(("mps-0", "uid-mps-0"), ("mps-1", "uid-mps-1")),
            sharing="MPS",
            node=dyn,
        ),
        dra.claim(
            "serving",
            "ext-0-extended-resources-q9zt4",
            results=[dra.result("both-node", "gpu-0", request="container-0-request-0")],
            requests=[
                {
                    "name": "container-0-request-0",
                    "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1},
                }
            ],
            reserved_for=(("ext-0", "uid-ext-0"),),
            node="both-node",
        ),
        dra.claim(
            "batch",
            "wait-0-gpus-r2d2x",
            requests=[
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
            ],
        ),
        dra.claim(
            "batch",
            "orphan",
            results=[dra.result("dra-mig-static", "gpu-1-mig-7g40gb-0-0")],
            node="dra-mig-static",
        ),
    ]


def _pods() -> list[dict[str, Any]]:
    return [
        _pod("llm-0", "uid-llm-0", node="dra-h100", claims={"gpu": "llm-0-gpu-8xk2m"}),
        *(
            _pod(
                f"share-{x}",
                f"uid-share-{x}",
                node="dra-h100",
                claims={"gpu": f"share-{x}-gpu-4gi"},
            )
            for x in "ab"
        ),
        *(
            _pod(
                f"mps-{i}",
                f"uid-mps-{i}",
                node="dra-mig-dynamic",
                shared_claims={"mps": "mps-shared"},
            )
            for i in range(2)
        ),
        _pod(
            "ext-0",
            "uid-ext-0",
            node="both-node",
            gpus="1",
            extended_claim="ext-0-extended-resources-q9zt4",
        ),
        _pod(
            "wait-0", "uid-wait-0", node=None, claims={"gpus": "wait-0-gpus-r2d2x"}, phase="Pending"
        ),
        _pod("cpu-0", "uid-cpu-0", node="both-node"),
    ]


def _create(api: k8s_client.ApiClient) -> None:
    core, resource = k8s_client.CoreV1Api(api), k8s_client.ResourceV1Api(api)
    core.create_node(_node("dra-h100", gpus=None))
    core.create_node(_node("dra-mig-dynamic", gpus=None))
    core.create_node(_node("dra-mig-static", gpus=None))
    core.create_node(_node("both-node", gpus="4", labels={"nvidia.com/gpu.count": "8"}))
    core.create_node(_node("overlap-node", gpus="4", labels={"nvidia.com/gpu.count": "4"}))
    for body in _slices():
        resource.create_resource_slice(checked(api, body, "V1ResourceSlice"))
    for body in _claims():
        ns = body["metadata"]["namespace"]
        resource.create_namespaced_resource_claim(ns, checked(api, body, "ResourceV1ResourceClaim"))
    for body in _pods():
        ns = "batch" if body["metadata"]["name"].startswith(("mps", "wait")) else "serving"
        core.create_namespaced_pod(ns, checked(api, body, "V1Pod"))


@pytest.fixture
def collected(api: k8s_client.ApiClient) -> Any:
    _create(api)
    return KubeInventoryCollector(api).collect(NOW)


def _by(table: Any, *keys: str) -> dict[Any, dict[str, Any]]:
    rows = table.to_pylist()
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def test_node_gpus_count_physical_gpus_of_the_newest_generation(collected: Any) -> None:
    nodes = _by(collected.tables["nodes"], "node")
    # Generation 2 of the republished pool has two GPUs (generation 1 had four).
    assert nodes["dra-h100"]["gpu_allocatable"] == 2
    assert nodes["dra-h100"]["gpu_product"] == dra.H100.replace(" ", "-")
    assert nodes["dra-h100"]["gpu_memory_bytes"] == 80 * GIB
    # One GPU: the whole GPU and its three partitions consume one counter set.
    assert nodes["dra-mig-dynamic"]["gpu_allocatable"] == 1
    assert nodes["dra-mig-dynamic"]["gpu_memory_bytes"] == 40 * GIB
    # Static MIG: three MIG devices on two parents.
    assert nodes["dra-mig-static"]["gpu_allocatable"] == 2
    assert nodes["dra-mig-static"]["gpu_product"] == dra.A100.replace(" ", "-")
    # Device plugin (4) and DRA (4) on one node of 8 GPUs; on a node of 4, the same GPUs.
    assert nodes["both-node"]["gpu_allocatable"] == 8
    assert nodes["overlap-node"]["gpu_allocatable"] == 4
    assert collected.dropped_total == 0


def test_devices_table_keeps_identity_partitions_and_counters(collected: Any) -> None:
    devices = collected.tables["dra_devices"]
    assert devices.schema == DRA_DEVICES.schema
    by_key = _by(devices, "node", "device")
    assert {g for n, _ in by_key if (g := n)} == {
        "dra-h100",
        "dra-mig-dynamic",
        "dra-mig-static",
        "both-node",
        "overlap-node",
    }
    assert {d for n, d in by_key if n == "dra-h100"} == {"gpu-0", "gpu-1"}
    assert all(r["pool_generation"] == 2 for (n, _), r in by_key.items() if n == "dra-h100")
    shared = by_key[("dra-h100", "gpu-1")]
    assert shared["multiple_allocations"] is True
    assert shared["gpu_uuid"] == shared["device_uuid"] == gpu_uuid("dra-h100", 1)
    dyn = [r for (n, _), r in by_key.items() if n == "dra-mig-dynamic"]
    assert len(dyn) == 4
    assert {r["gpu_uuid"] for r in dyn} == {gpu_uuid("dra-mig-dynamic", 0)}
    assert {r["counter_set"] for r in dyn} == {"gpu-0-counter-set"}
    part = by_key[("dra-mig-dynamic", "gpu-0-mig-3g20gb-9-4")]
    assert part["device_type"] == "mig" and part["mig_profile"] == "3g.20gb"
    assert part["device_uuid"] is None  # created on demand: no uuid until it exists
    assert part["memory_bytes"] == MPS_MIG_MIB * MIB
    assert part["gpu_memory_bytes"] == 40 * GIB
    assert '"memory-slice-7":1' in part["counters_json"]
    assert '"memory-slice-3"' not in part["counters_json"]
    assert '"memory-slice-0":1' in part["counter_set_json"]
    static = by_key[("dra-mig-static", "gpu-1-mig-7g40gb-0-0")]
    assert static["device_uuid"] == "MIG-00000000-0000-0000-0000-000000000003"
    assert static["gpu_uuid"] == gpu_uuid("dra-mig-static", 1)


def test_pods_get_dra_devices_shares_and_uuids(collected: Any) -> None:
    pods = _by(collected.tables["pods"], "pod")
    llm = pods["llm-0"]
    assert (llm["gpu_request"], llm["gpu_milli"]) == (1, 1000)
    assert llm["gpu_uuids"] == gpu_uuid("dra-h100", 0)
    # 4 GiB consumed of an 80 GiB shared GPU.
    for x in "ab":
        share = pods[f"share-{x}"]
        assert share["gpu_request"] == 1
        assert share["gpu_milli"] == math.ceil(1000 * 4 / 80)
        assert share["gpu_uuids"] == gpu_uuid("dra-h100", 1)
    # One MPS claim on a 3g.20gb partition, reserved by two pods: the partition's part of
    # the GPU, halved.
    part_milli = math.ceil(1000 * MPS_MIG_MIB * MIB / (40 * GIB))
    for i in range(2):
        mps = pods[f"mps-{i}"]
        assert (mps["gpu_request"], mps["gpu_milli"]) == (1, math.ceil(part_milli / 2))
        assert mps["gpu_uuids"] == gpu_uuid("dra-mig-dynamic", 0)
    # nvidia.com/gpu served by DRA: the claim's device is the containers' request.
    ext = pods["ext-0"]
    assert (ext["gpu_request"], ext["gpu_milli"]) == (1, 1000)
    assert ext["gpu_uuids"] == gpu_uuid("both-node", 0)
    # A claim not yet allocated: what it asks for.
    wait = pods["wait-0"]
    assert (wait["gpu_request"], wait["gpu_milli"], wait["gpu_uuids"]) == (2, 1000, None)
    assert (pods["cpu-0"]["gpu_request"], pods["cpu-0"]["gpu_milli"]) == (0, None)


def test_allocations_table_has_consumers_sharing_and_orphans(collected: Any) -> None:
    table = collected.tables["dra_allocations"]
    assert table.schema == DRA_ALLOCATIONS.schema
    rows = table.to_pylist()
    mps = [r for r in rows if r["claim"] == "mps-shared"]
    assert {r["pod"] for r in mps} == {"mps-0", "mps-1"}
    assert {(r["sharing_strategy"], r["consumers"], r["node"]) for r in mps} == {
        ("MPS", 2, "dra-mig-dynamic")
    }
    assert {r["pod_share_milli"] * 2 >= r["share_milli"] for r in mps} == {True}
    llm = next(r for r in rows if r["pod"] == "llm-0")
    assert (llm["pod_claim"], llm["request"], llm["sharing_strategy"]) == ("gpu", "gpu", None)
    assert llm["allocated_at"] == datetime(2024, 5, 1, 11, 58)
    share = next(r for r in rows if r["pod"] == "share-a")
    assert (share["share_id"], share["consumed_memory_bytes"]) == ("share-uid-a", 4 * GIB)
    ext = next(r for r in rows if r["pod"] == "ext-0")
    assert ext["extended_resource"] is True
    orphan = next(r for r in rows if r["claim"] == "orphan")
    assert (orphan["pod_uid"], orphan["consumers"], orphan["node"]) == (None, 0, "dra-mig-static")
    assert orphan["device_uuid"] == "MIG-00000000-0000-0000-0000-000000000003"
    assert not [r for r in rows if r["claim"] == "wait-0-gpus-r2d2x"]  # nothing allocated yet


def test_store_reports_and_extender_view_see_dra_gpus(api: k8s_client.ApiClient) -> None:
    _create(api)
    with Store.open(":memory:") as store:
        InventoryLoop(
            KubeInventoryCollector(api), store, interval_s=3600, clock=lambda: NOW
        ).run_once()
        assert store.count("dra_devices") == 2 + 4 + 3 + 4 + 4
        held = store.query(
            "SELECT pod, pod_share_milli FROM dra_allocations WHERE pod IS NOT NULL ORDER BY pod"
        ).to_pylist()
        assert [r["pod"] for r in held] == [
            "ext-0",
            "llm-0",
            "mps-0",
            "mps-1",
            "share-a",
            "share-b",
        ]
        since = (NOW - timedelta(hours=1)).replace(tzinfo=None)
        totals = cluster_allocatable(store, since, since + timedelta(hours=2))
        assert totals is not None and totals.gpus == 2 + 1 + 2 + 8 + 4
        live = live_cluster(store, since_s=3600)
        state = live.state
        gpus = dict(zip(state.node_names, state.gpu_count.tolist(), strict=True))
        assert gpus["dra-h100"] == 2 and gpus["dra-mig-dynamic"] == 1
        free = dict(zip(state.node_names, state.gpu_free_milli.sum(axis=1).tolist(), strict=True))
        # llm-0 holds one whole GPU, the two 4 GiB shares 50 milli each of the other.
        assert free["dra-h100"] == 2000 - 1000 - 2 * math.ceil(1000 * 4 / 80)


def test_a_cluster_without_dra_and_one_that_forbids_it(kube: KubeEmulator) -> None:
    api = kube.api_client()
    k8s_client.CoreV1Api(api).create_node(bodies.node("plain"))
    kube.inject_error("GET /apis/resource.k8s.io/v1/resourceslices", 404, reason="NotFound")
    result = KubeInventoryCollector(api).collect(NOW)
    assert result.tables["dra_devices"].num_rows == 0
    assert _by(result.tables["nodes"], "node")["plain"]["gpu_allocatable"] == 8
    assert result.dropped_total == 0
    kube.clear_errors()
    kube.inject_error("GET /apis/resource.k8s.io/v1/resourceslices", 403, reason="Forbidden")
    result = KubeInventoryCollector(api).collect(NOW)
    assert result.dropped["dra_forbidden"] == 1
    assert "dra_devices" not in result.tables
    assert result.tables["nodes"].num_rows == 1
    off = KubeInventoryCollector(api, settings=KubeInventorySettings(dra=False)).collect(NOW)
    assert "dra_devices" not in off.tables
