"""Kueue and KAI Scheduler queue objects as their API servers answer them.

Shaped from the upstream types: Kueue ``apis/kueue/v1beta1`` (``ClusterQueueSpec``:
``cohort``, ``resourceGroups[].coveredResources`` / ``flavors[].name`` /
``flavors[].resources[]`` of ``name``, ``nominalQuota``, ``borrowingLimit``,
``lendingLimit`` as quantities; ``LocalQueueSpec.clusterQueue``) and KAI Scheduler
``pkg/apis/scheduling/v2`` (``QueueSpec``: ``parentQueue``, ``resources.gpu|cpu|memory`` of
``quota``, ``limit``, ``overQuotaWeight`` as numbers, -1 = unlimited), with the status and
metadata a server adds kept where a reader could trip on them.
"""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta1"
KAI = "scheduling.run.ai/v2"


def cluster_queue(
    name: str,
    *,
    gpu: dict[str, Any] | None = None,
    cohort: str | None = "pool",
    extra_gpu_flavor: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with a CPU/memory group and a GPU group (one flavor, or two)."""
    gpu_quota = {"name": "nvidia.com/gpu", "nominalQuota": "8", **(gpu or {})}
    flavors = [{"name": "h100", "resources": [gpu_quota]}]
    if extra_gpu_flavor:
        flavors.append(
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}
        )
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "memory", "nominalQuota": "512Gi"},
                        ],
                    }
                ],
            },
            {"coveredResources": ["nvidia.com/gpu"], "flavors": flavors},
        ],
    }
    if cohort:
        spec["cohort"] = cohort
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
        "status": {
            "admittedWorkloads": 1,
            "flavorsUsage": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]}
            ],
        },
    }


def local_queue(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def kai_queue(
    name: str,
    *,
    gpu: dict[str, Any] | None = None,
    parent: str | None = "root",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1, **(gpu or {})},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": KAI,
        "kind": "Queue",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }


def kai_pod(
    namespace: str, name: str, queue: str, label: str = "kai.scheduler/queue"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {label: queue}},
        "spec": {"schedulerName": "kai-scheduler", "containers": []},
    }
