"""The simulated workloads: which pods they create, and those pods as the API holds them."""

from __future__ import annotations

from collections import Counter

import pytest

from sits_observe.analytics.rightsizing.forms import detect_stack
from sits_observe.collectors.kube.gpu import pod_gpu_request
from sits_observe.lab.cluster.pods.generator import WorkloadGenerator, tensor_parallel
from sits_observe.lab.kube.publish import (
    HAMI_CORES,
    HAMI_MEMORY_PERCENT,
    node_body,
    owner_bodies,
    pending_pod_body,
    spec_of,
)

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def generator_of(nodes: int, gpus_per_node: int = 8, seed: int = 1) -> WorkloadGenerator:
    products = [H100 if n % 2 == 0 else A100 for n in range(nodes)]
    return WorkloadGenerator(products=products, gpus_per_node=gpus_per_node, seed=seed)


def draw(seed: int, count: int = 600) -> list[object]:
    generator = generator_of(2, seed=seed)
    return [generator.next_pod() for _ in range(count)]


def test_the_same_seed_gives_the_same_pods() -> None:
    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_the_mix_of_kinds_namespaces_owners_and_gpu_shapes() -> None:
    generator = generator_of(2)
    pods = [generator.next_pod() for _ in range(2000)]
    kinds = Counter(p.name.split("-")[0] for p in pods)
    assert kinds["prep"] / 2000 == pytest.approx(0.2, abs=0.03)
    assert kinds["notebook"] / 2000 == pytest.approx(0.24, abs=0.03)
    assert kinds["eval"] / 2000 == pytest.approx(0.16, abs=0.03)
    assert kinds["train"] / 2000 == pytest.approx(0.4, abs=0.03)
    for p in pods:
        if p.name.startswith("prep-"):
            assert (p.num_gpu, p.namespace, p.owner.kind, p.qos_class) == (
                0,
                "training",
                "Job",
                "Guaranteed",
            )
        if p.kind == "notebook":
            assert (p.namespace, p.owner.kind, p.qos_class) == (
                "research",
                "StatefulSet",
                "BestEffort",
            )
            assert p.name == f"{p.owner.name}-0" and p.gpu_percent in (10, 20, 30)
        else:
            assert (p.namespace, p.owner.kind) == ("training", "Job")
            assert p.name.startswith(f"{p.owner.name}-")
        # A share is of one GPU only, and caps the memory the pod may use on it.
        if p.shared:
            assert p.num_gpu == 1 and p.gpu_peak_bytes <= 0.9 * p.gpu_percent / 100 * 80 * 2**30
        assert p.duration_s is not None and 30 <= p.duration_s <= 180
    multi = sum(1 for p in pods if p.num_gpu == 2)
    assert 0 < multi < 0.15 * 2000


def test_arrivals_scale_with_the_gpus_the_servers_leave_free() -> None:
    big = generator_of(4, seed=5)
    small = generator_of(1, seed=5)
    assert (big.spare_gpus, small.spare_gpus) == (16, 4)
    # One GPU arrival per 90 s per spare GPU, and a CPU-only one per four of them: 16 GPUs
    # over 9,000 s -> about 1,600 GPU arrivals and 400 CPU-only ones.
    arrivals = big.arrivals(0.0, 9000.0)
    assert sum(1 for a in arrivals if a.num_gpu) == pytest.approx(1600, rel=0.08)
    assert len(arrivals) == pytest.approx(2000, rel=0.08)
    assert len(small.arrivals(0.0, 9000.0)) == pytest.approx(500, rel=0.15)
    assert generator_of(1, gpus_per_node=1).arrivals(0.0, 9000.0) == []


def test_one_inference_deployment_per_gpu_product_pinned_to_it() -> None:
    generator = generator_of(3)
    by_name = {d.name: d for d in generator.deployments}
    assert set(by_name) == {"vllm-llama2-70b-h100", "vllm-llama2-70b-a100"}
    h100 = by_name["vllm-llama2-70b-h100"]
    assert (h100.product, h100.replicas, by_name["vllm-llama2-70b-a100"].replicas) == (H100, 2, 1)
    assert h100.replica_set.name == f"vllm-llama2-70b-h100-{h100.template_hash}"
    replicas = [generator.llm_replica(h100) for _ in range(2)]
    assert {r.owner for r in replicas} == {h100.replica_set}
    assert len({r.name for r in replicas}) == 2 and all(r.num_gpu == 4 for r in replicas)
    term = pending_pod_body(replicas[0])["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}
    assert pod_gpu_request(pending_pod_body(replicas[0]), 4).gpu_types == (H100,)
    assert [tensor_parallel(g) for g in (1, 2, 4, 8, 16)] == [1, 1, 2, 4, 4]


def test_a_pending_pod_reads_back_as_the_same_work() -> None:
    generator = generator_of(2, seed=7)
    for spec in [generator.llm_replica()] + [generator.next_pod() for _ in range(50)]:
        body = pending_pod_body(spec)
        assert body["status"]["phase"] == "Pending" and "nodeName" not in body["spec"]
        (ref,) = body["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["controller"]) == (
            spec.owner.kind,
            spec.owner.name,
            True,
        )
        limits = body["spec"]["containers"][0]["resources"]["limits"]
        if spec.shared:
            assert limits[HAMI_CORES] == limits[HAMI_MEMORY_PERCENT] == str(spec.gpu_percent)
        else:
            assert HAMI_CORES not in limits
        # The one GPU reader sees the share the workload wrote.
        gpu = pod_gpu_request(body, spec.num_gpu)
        assert gpu.gpu_milli == (spec.gpu_percent * 10 if spec.num_gpu else 0)
        assert not gpu.problems
        read = spec_of(body, num_gpu=gpu.num_gpu, gpu_milli=gpu.gpu_milli, gpu_types=gpu.gpu_types)
        assert read == spec


def test_owners_are_created_outermost_first() -> None:
    generator = generator_of(2, seed=7)
    replica = generator.llm_replica()
    top = generator.deployments[0].deployment
    plurals = [plural for plural, _ in owner_bodies(replica, top)]
    assert plurals == ["deployments", "replicasets"]
    (_, rs) = owner_bodies(replica, top)[1]
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    job = next(p for p in iter(generator.next_pod, None) if p.owner.kind == "Job")
    ((plural, body),) = owner_bodies(job)
    assert (plural, body["kind"], body["spec"]["backoffLimit"]) == ("jobs", "Job", 0)


def test_a_node_registers_its_gpus_as_hami_does() -> None:
    from sits_observe.lab.cluster.cluster import SimulatedCluster

    node = SimulatedCluster(nodes=1, gpus_per_node=2, seed=1).nodes["gpu-node-1"]
    body = node_body(node)
    entries = body["metadata"]["annotations"]["hami.io/node-nvidia-register"].split(":")
    assert [e.split(",")[0] for e in entries] == [g.uuid for g in node.gpus]
    assert entries[0].split(",")[1:] == ["10", "81559", "100", "NVIDIA-H100-80GB-HBM3", "0", "true"]


def test_the_servers_manifest_carries_vllm_s_flag_and_the_notebooks_a_whole_gpu() -> None:
    """The inventory reads the stacks from the manifests the workloads write: vLLM's flag on
    the servers, a whole GPU on the idle notebooks, HAMi's resources on the shares."""
    plain = generator_of(2, seed=7)
    with_idle = WorkloadGenerator(products=[H100, A100], gpus_per_node=8, seed=7, idle_notebooks=1)
    # The idle notebooks are drawn after the Deployments: those stay what the seed gives.
    assert with_idle.deployments == plain.deployments
    assert (plain.spare_gpus, with_idle.spare_gpus) == (8, 7)
    server = detect_stack(pending_pod_body(plain.llm_replica()))
    assert (server.kind, server.num_gpu, server.vllm_utilization_ratio) == ("vllm", 4, 0.9)
    (owner,) = with_idle.idle_notebook_owners
    notebook = detect_stack(pending_pod_body(with_idle.idle_notebook(owner)))
    assert (notebook.kind, notebook.current) == ("whole-gpu", "nvidia.com/gpu: 1")
    share = next(p for p in iter(plain.next_pod, None) if p.shared)
    hami = detect_stack(pending_pod_body(share))
    assert (hami.kind, hami.hami_memory_percent) == ("hami", share.gpu_percent)
