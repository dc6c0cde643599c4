"""The simulated workloads and nodes against the emulator: Pending pods in, running pods out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from kubernetes import client as k8s_client

from sits_observe.collectors.kube.gpu import hami_allocation, pod_gpu_request
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.kubelet import KubeletSettings, SimulatedKubelet
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.kube.publish import KubePublisher, pending_pod_body
from sits_observe.lab.kube.workloads import DriverSettings, WorkloadDriver
from sits_observe.lab.scheduler.nodes import read_gpu_request

pytestmark = pytest.mark.k8s


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def cluster(kube: KubeEmulator) -> SimulatedCluster:
    sim = SimulatedCluster(nodes=2, gpus_per_node=4, seed=4, standalone=False)
    KubePublisher(kube.api_client()).register_nodes(sim)
    return sim


def kubelet(kube: KubeEmulator, sim: SimulatedCluster, clock: Clock, **kw: Any) -> SimulatedKubelet:
    return SimulatedKubelet(
        kube.api_client(),
        sim,
        read_gpu=read_gpu_request,
        allocation=lambda u, m, c: hami_allocation(u, memory_mib=m, cores_percent=c),
        settings=KubeletSettings(**kw),
        clock=clock,
    )


def bind(core: k8s_client.CoreV1Api, spec: PodSpec, node: str, **annotations: str) -> None:
    body = pending_pod_body(spec)
    if annotations:
        body["metadata"]["annotations"] = annotations
    core.create_namespaced_pod(spec.namespace, body)
    core.api_client.call_api(
        "POST",
        f"{core.api_client.configuration.host}/api/v1/namespaces/{spec.namespace}/pods/"
        f"{spec.name}/binding",
        header_params={"Content-Type": "application/json"},
        body={"metadata": {"name": spec.name}, "target": {"kind": "Node", "name": node}},
    ).read()


def first(sim: SimulatedCluster, kind: str, *, shared: bool | None = None) -> PodSpec:
    for spec in iter(sim.workloads.next_pod, None):
        if spec.kind == kind and (shared is None or spec.shared == shared):
            return spec
    raise AssertionError("unreachable")


def raw_pod(core: k8s_client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    response = core.read_namespaced_pod(name, namespace, _preload_content=False)
    return dict(json.loads(response.data))


def test_a_bound_pod_starts_on_the_gpus_the_device_plugin_picks(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    clock = Clock()
    nodes = kubelet(kube, cluster, clock)
    replica = cluster.workloads.llm_replica()  # 2 whole GPUs on these 4-GPU nodes
    bind(core, replica, "gpu-node-2")
    nodes.sync_once()
    running = cluster.running(replica.uid)
    assert running is not None and running.node == "gpu-node-2"
    assert running.gpu_indices == [0, 1] and running.server is not None  # lowest free
    stored = raw_pod(core, "inference", replica.name)
    gpus = cluster.nodes["gpu-node-2"].gpus
    # HAMi's allocation annotation names those GPUs; the one reader reads them back.
    read = pod_gpu_request(stored, 2)
    assert read.allocated_uuids == (gpus[0].uuid, gpus[1].uuid)
    assert stored["status"]["phase"] == "Running"
    ready = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert ready["Ready"] == "False"
    (status,) = stored["status"]["containerStatuses"]
    assert status["containerID"] == f"containerd://{running.containers[0].container_id}"
    clock.now += timedelta(seconds=21)  # past the inference server's warm-up
    nodes.sync_once()
    stored = raw_pod(core, "inference", replica.name)
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    # The scheduler's condition survives the kubelet's reports (the pod-start timeline needs it).
    assert conditions == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert nodes.metrics.pods.labels("started")._value.get() == 1


def test_a_share_goes_to_the_gpu_its_hint_names(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    nodes = kubelet(kube, cluster, Clock())
    spec = first(cluster, "notebook")
    hinted = cluster.nodes["gpu-node-1"].gpus[3].uuid
    bind(core, spec, "gpu-node-1", **{"nvidia.com/use-gpuuuid": hinted})
    nodes.sync_once()
    running = cluster.running(spec.uid)
    assert running is not None and running.gpu_indices == [3]
    assert cluster.nodes["gpu-node-1"].gpus[3].free_milli == 1000 - spec.gpu_percent * 10
    allocated = raw_pod(core, spec.namespace, spec.name)["metadata"]["annotations"]
    memory_mib = 81_559 * spec.gpu_percent // 100
    assert allocated["hami.io/vgpu-devices-allocated"] == (
        f"{hinted},NVIDIA,{memory_mib},{spec.gpu_percent}:;"
    )


def test_a_pod_no_gpu_can_take_fails_admission_as_kubelet_fails_it(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    nodes = kubelet(kube, cluster, Clock())
    for _ in range(2):
        replica = cluster.workloads.llm_replica()
        bind(core, replica, "gpu-node-1")
    nodes.sync_once()
    third = cluster.workloads.llm_replica()  # the node's 4 GPUs are taken
    bind(core, third, "gpu-node-1")
    nodes.sync_once()
    stored = raw_pod(core, "inference", third.name)["status"]
    assert (stored["phase"], stored["reason"]) == ("Failed", "UnexpectedAdmissionError")
    assert "pod needs 2 GPU(s) with 1000 milli free; 0 found" in stored["message"]
    assert cluster.running(third.uid) is None
    nodes.sync_once()  # not retried
    assert nodes.metrics.pods.labels("admission_failed")._value.get() == 1


def test_a_finished_job_is_reported_and_retired_with_its_job(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    nodes = kubelet(kube, cluster, Clock())
    driver = WorkloadDriver(
        kube.api_client(),
        cluster.workloads,
        sim_now=lambda: cluster.now_s,
        settings=DriverSettings(arrivals=False, inference=False),  # only the submitted Job
    )
    driver.sync_once()  # bootstrap: namespaces, the Deployment and its ReplicaSet
    job = first(cluster, "batch")
    driver.submit(job)
    driver.sync_once()
    assert [j["metadata"]["name"] for j in kube.objects("jobs", group="batch")] == [job.owner.name]
    core.api_client.call_api(
        "POST",
        f"{core.api_client.configuration.host}/api/v1/namespaces/training/pods/{job.name}/binding",
        header_params={"Content-Type": "application/json"},
        body={"metadata": {"name": job.name}, "target": {"kind": "Node", "name": "gpu-node-1"}},
    ).read()
    nodes.sync_once()
    assert job.duration_s is not None
    for _ in range(int(job.duration_s) + 2):
        cluster.step(1.0)
    for event in cluster.take_events():
        nodes.on_pod_event(event, Clock()())
    stored = raw_pod(core, "training", job.name)["status"]
    assert stored["phase"] == "Succeeded"
    assert stored["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    driver.sync_once()
    assert [p["metadata"]["name"] for p in kube.objects("pods")] == []
    assert kube.objects("jobs", group="batch") == []


def test_a_pod_deleted_from_the_api_stops_on_its_node(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    nodes = kubelet(kube, cluster, Clock())
    spec = first(cluster, "batch", shared=False)
    bind(core, spec, "gpu-node-2")
    nodes.sync_once()
    assert cluster.running(spec.uid) is not None
    core.delete_namespaced_pod(spec.name, spec.namespace)
    nodes.sync_once()
    assert cluster.running(spec.uid) is None
    assert nodes.metrics.pods.labels("stopped")._value.get() == 1


def test_the_time_slicing_configmap_sets_the_servers_slices(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    clock = Clock()
    nodes = kubelet(kube, cluster, clock, time_slicing_configmap=("kube-system", "slices"))
    replica = cluster.workloads.llm_replica()
    bind(core, replica, "gpu-node-1")
    core.create_namespaced_config_map(
        "kube-system",
        {
            "metadata": {"name": "slices"},
            "data": {"sits-time-slices.yaml": f"inference/{replica.workload}: 15ms\n"},
        },
    )
    nodes.sync_once()
    running = cluster.running(replica.uid)
    assert running is not None and running.server is not None
    assert running.server.time_slice_s == pytest.approx(0.015)
    core.patch_namespaced_config_map(
        "slices",
        "kube-system",
        {"data": {"sits-time-slices.yaml": f"inference/{replica.workload}: 25ms\nbad: x\n"}},
    )
    clock.now += timedelta(seconds=3)
    nodes.sync_once()
    assert running.server.time_slice_s == pytest.approx(0.025)
    assert nodes.metrics.errors.labels("config")._value.get() == 1  # "x" is no slice


def test_the_workloads_create_pending_pods_of_their_owners(
    kube: KubeEmulator, cluster: SimulatedCluster
) -> None:
    driver = WorkloadDriver(kube.api_client(), cluster.workloads, sim_now=lambda: cluster.now_s)
    driver.sync_once()
    driver.sync_once()
    pods = kube.objects("pods")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Pending" for p in pods)
    assert all("nodeName" not in p["spec"] for p in pods)
    # One Deployment per GPU product (these two nodes: one H100, one A100), one replica each.
    deployments = {d["metadata"]["uid"]: d for d in kube.objects("deployments", group="apps")}
    sets = {r["metadata"]["uid"]: r for r in kube.objects("replicasets", group="apps")}
    assert len(deployments) == len(sets) == 2
    assert {r["metadata"]["ownerReferences"][0]["uid"] for r in sets.values()} == set(deployments)
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in pods} == set(sets)
    core = k8s_client.CoreV1Api(kube.api_client())
    assert {n.metadata.name for n in core.list_namespace().items} == {
        "inference",
        "training",
        "research",
    }
    # A replica that failed is replaced.
    failed = pods[0]["metadata"]["name"]
    core.patch_namespaced_pod_status(failed, "inference", {"status": {"phase": "Failed"}})
    driver.sync_once()
    names = {p["metadata"]["name"] for p in kube.objects("pods")}
    assert failed not in names and len(names) == 2


def test_a_creation_the_quota_refuses_is_counted_and_retried_with_backoff(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    core.create_namespaced_resource_quota(
        "training",
        {"metadata": {"name": "sits-quota"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}},
    )
    now = [0.0]
    driver = WorkloadDriver(
        kube.api_client(),
        cluster.workloads,
        sim_now=lambda: now[0],
        settings=DriverSettings(
            job_retry_initial_s=1.0, job_retry_max_s=10.0, arrivals=False, inference=False
        ),
    )
    job = first(cluster, "batch")
    driver.submit(job)
    tries = []
    for step in range(80):
        now[0] = step * 0.5
        before = driver.counts.outcomes["rejected_quota"]
        driver.sync_once()
        if driver.counts.outcomes["rejected_quota"] > before:
            tries.append(now[0])
    assert tries[:6] == [0.0, 1.0, 3.0, 7.0, 15.0, 25.0]  # 1 s doubling to 10 s
    assert driver.counts.last_rejection.startswith(
        f'pods "{job.name}" is forbidden: exceeded quota: sits-quota, requested: '
        "requests.nvidia.com/gpu="
    )
    assert kube.objects("pods") == [] and driver.waiting == 1
    core.patch_namespaced_resource_quota(
        "sits-quota", "training", {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    )
    now[0] = 60.0
    driver.sync_once()
    assert [p["metadata"]["name"] for p in kube.objects("pods")] == [job.name]
    assert driver.counts.outcomes["created"] == 1 and driver.waiting == 0


def _tries_in_an_hour(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster, spec: PodSpec
) -> list[float]:
    """When the driver's default settings try to create ``spec``'s pod in a namespace whose
    quota holds nothing, over an hour of 2-second passes."""
    core.create_namespaced_resource_quota(
        spec.namespace,
        {
            "metadata": {"name": "sits-quota"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0", "requests.memory": "1"}},
        },
    )
    now = [0.0]
    driver = WorkloadDriver(
        kube.api_client(),
        cluster.workloads,
        sim_now=lambda: now[0],
        settings=DriverSettings(arrivals=False, inference=False),
        pods=kube.informer("pods").items,
    )
    driver.submit(spec)
    tries = []
    for step in range(1800):
        now[0] = step * 2.0
        before = driver.counts.outcomes["rejected_quota"]
        driver.sync_once()
        if driver.counts.outcomes["rejected_quota"] > before:
            tries.append(now[0])
    return tries


def test_a_refused_job_backs_off_as_the_job_controller_does_by_default(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    """The Job controller's own limiter: 1 s doubling per failure to 1 min (its
    DefaultJobApiBackOff and MaxJobApiBackOff), so a Job refused for an hour tries about once
    a minute, and learns within a minute that quota freed up."""
    job = first(cluster, "batch")
    assert job.owner.kind == "Job"
    tries = _tries_in_an_hour(kube, core, cluster, job)
    # Due 1 s after the first try: the next 2-second pass; then 2, 4, 8, 16, 32 s, then 60 s.
    assert tries[:7] == [0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    gaps = [b - a for a, b in pairwise(tries)]
    assert set(gaps[6:]) == {60.0}
    assert 60 <= len(tries) <= 65


def test_a_refused_replica_backs_off_as_client_gos_default_limiter_does(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, cluster: SimulatedCluster
) -> None:
    """Owners other than Jobs (a notebook's StatefulSet, a ReplicaSet) requeue through
    client-go's default controller rate limiter: 5 ms doubling per failure to 1,000 s."""
    notebook = first(cluster, "notebook")
    assert notebook.owner.kind != "Job"
    tries = _tries_in_an_hour(kube, core, cluster, notebook)
    # Every pass while the delay is under 2 s (5 ms x 2^8 = 1.28 s), then 2.56 s, 5.12 s, ...
    assert tries[:9] == [2.0 * k for k in range(9)]
    gaps = [b - a for a, b in pairwise(tries)]
    assert gaps[-1] >= 600 and len(tries) < 25
