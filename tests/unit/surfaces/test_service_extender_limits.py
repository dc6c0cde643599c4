"""The extender's body limit is sized from real payloads: 500 full v1.Node objects.

kube-scheduler with ``nodeCacheCapable: false`` sends every candidate as a full v1.Node
(``ExtenderArgs.Nodes``), at most ``numFeasibleNodesToFind`` of them (about 500 at 5,000
nodes, 781 at most, at 3,125 nodes, with the adaptive default). The nodes below are what the
API server returns for an 8-GPU node under the GPU operator: GPU-feature-discovery and NFD
labels, the 50 images kubelet reports (``--node-status-max-images``), five conditions,
addresses, nodeInfo, runtime handlers and managedFields. docs/extender.md quotes the sizes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sits_observe.surfaces.service.extender import ExtenderSettings

_IMAGES = [
    "nvcr.io/nvidia/k8s/dcgm-exporter",
    "nvcr.io/nvidia/k8s-device-plugin",
    "nvcr.io/nvidia/gpu-feature-discovery",
    "nvcr.io/nvidia/cloud-native/gpu-operator-validator",
    "nvcr.io/nvidia/driver",
    "nvcr.io/nvidia/k8s/container-toolkit",
    "nvcr.io/nvidia/cloud-native/k8s-driver-manager",
    "nvcr.io/nvidia/k8s/cuda-sample",
    "registry.k8s.io/kube-proxy",
    "registry.k8s.io/pause",
    "registry.k8s.io/coredns/coredns",
    "registry.k8s.io/nfd/node-feature-discovery",
    "docker.io/calico/node",
    "docker.io/calico/cni",
    "docker.io/calico/pod2daemon-flexvol",
    "quay.io/prometheus/node-exporter",
    "vllm/vllm-openai",
    "nvcr.io/nvidia/tritonserver",
    "ghcr.io/huggingface/text-generation-inference",
    "nvcr.io/nvidia/pytorch",
]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _uid(name: str) -> str:
    h = _sha(name)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def node_json(name: str, index: int, *, managed_fields: bool = True) -> dict[str, Any]:
    """One 8-GPU node: GPU-operator / NFD labels, 50 images (kubelet's nodeStatusMaxImages),
    five conditions, addresses, nodeInfo and, as the API server returns them, managedFields."""
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": "us-east-1a",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1764500000",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "p5.48xlarge",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1051-aws",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512BW": "true",
        "feature.node.kubernetes.io/rdma.available": "true",
    }
    images = []
    for i in range(50):  # kubelet reports at most 50 images (--node-status-max-images)
        repo = _IMAGES[i % len(_IMAGES)]
        tag = f"v{1 + i // len(_IMAGES)}.{i % 7}.{i % 3}-ubuntu22.04"
        images.append(
            {
                "names": [f"{repo}@sha256:{_sha(repo + tag)}", f"{repo}:{tag}"],
                "sizeBytes": 100_000_000 + i * 7_654_321,
            }
        )
    conditions = [
        {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": "2026-11-30T11:59:40Z",
            "lastTransitionTime": "2026-11-01T08:00:00Z",
            "reason": reason,
            "message": message,
        }
        for kind, status, reason, message in (
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ("NetworkUnavailable", "False", "CalicoIsUp", "Calico is running on this node"),
        )
    ]
    resources = {
        "cpu": "192",
        "ephemeral-storage": "7811388356Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "2097152000Ki",
        "nvidia.com/gpu": "8",
        "pods": "110",
        "rdma/rdma_shared_device_a": "63",
        "vpc.amazonaws.com/efa": "32",
    }
    node: dict[str, Any] = {
        "metadata": {
            "name": name,
            "uid": _uid(name),
            "resourceVersion": str(91_000_000 + index),
            "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": labels,
            "annotations": {
                "csi.volume.kubernetes.io/nodeid": json.dumps(
                    {"ebs.csi.aws.com": f"i-0{_sha(name)[:16]}"}
                ),
                "node.alpha.kubernetes.io/ttl": "0",
                "nfd.node.kubernetes.io/feature-labels": ",".join(
                    k.split("/", 1)[1] for k in labels if k.startswith("feature.node")
                ),
                "nfd.node.kubernetes.io/extended-resources": "",
                "projectcalico.org/IPv4Address": f"10.1.{index // 250}.{index % 250}/16",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"192.168.{index % 256}.0/24",
            "podCIDRs": [f"192.168.{index % 256}.0/24"],
            "providerID": f"aws:///us-east-1a/i-0{_sha(name)[:16]}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": resources,
            "allocatable": {**resources, "cpu": "191450m", "memory": "2087000000Ki"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.{index // 250}.{index % 250}"},
                {
                    "type": "InternalDNS",
                    "address": f"ip-10-1-{index // 250}-{index % 250}.ec2.internal",
                },
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _sha(name + "m")[:32],
                "systemUUID": _sha(name + "s")[:32],
                "bootID": _sha(name + "b")[:36],
                "kernelVersion": "5.15.0-1051-aws",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.12",
                "kubeletVersion": "v1.30.2",
                "kubeProxyVersion": "v1.30.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
            "runtimeHandlers": [
                {"name": "nvidia", "features": {"recursiveReadOnlyMounts": True}},
                {"name": "runc", "features": {"recursiveReadOnlyMounts": True}},
            ],
        },
    }
    if managed_fields:
        node["metadata"]["managedFields"] = _managed_fields(node)
    return node


def _fields(obj: Any) -> Any:
    """fieldsV1 as the API server writes it: ``{"f:key": {...}}`` for every set field."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {
            f'k:{{"type":"{i.get("type", i.get("name", ""))}"}}': _fields(i)
            for i in obj
            if isinstance(i, dict)
        }
    return {}


def _managed_fields(node: dict[str, Any]) -> list[dict[str, Any]]:
    meta, status = node["metadata"], node["status"]
    entries = [
        (
            "kubelet",
            "Update",
            {
                "f:metadata": {
                    "f:labels": _fields(
                        {k: 1 for k in meta["labels"] if not k.startswith(("nvidia", "feature"))}
                    )
                }
            },
        ),
        (
            "kubelet",
            "Update",
            {"f:status": _fields({k: v for k, v in status.items() if k != "images"})},
        ),
        (
            "gpu-feature-discovery",
            "Update",
            {
                "f:metadata": {
                    "f:labels": _fields({k: 1 for k in meta["labels"] if k.startswith("nvidia")})
                }
            },
        ),
        (
            "nfd-master",
            "Update",
            {
                "f:metadata": {
                    "f:annotations": _fields(meta["annotations"]),
                    "f:labels": _fields({k: 1 for k in meta["labels"] if k.startswith("feature")}),
                }
            },
        ),
        ("kube-controller-manager", "Update", {"f:spec": _fields(node["spec"])}),
    ]
    return [
        {
            "manager": manager,
            "operation": op,
            "apiVersion": "v1",
            "time": "2026-11-30T11:59:40Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
            **({"subresource": "status"} if "f:status" in fields else {}),
        }
        for manager, op, fields in entries
    ]


def node_list_args(count: int, *, managed_fields: bool = True) -> bytes:
    items = [node_json(f"gpu-node-{i:04d}", i, managed_fields=managed_fields) for i in range(count)]
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return json.dumps(body, separators=(",", ":")).encode()


MIB = 1024 * 1024


def test_the_default_limit_holds_500_full_nodes_with_headroom() -> None:
    size = len(node_list_args(500))
    limit = ExtenderSettings().max_body_bytes
    assert 8 * MIB < size < 11 * MIB  # docs/extender.md: about 9.2 MiB
    assert limit >= 2 * size  # headroom: kube-scheduler's peak of 781 nodes fits too
    assert len(node_list_args(781)) < limit
    assert limit <= 4 * size  # sized to the payload, not to "anything"


def test_5000_node_names_are_far_below_the_limit() -> None:
    names = [f"gpu-node-{i:04d}" for i in range(5000)]
    body = json.dumps({"Pod": {}, "Nodes": None, "NodeNames": names}, separators=(",", ":"))
    assert len(body) < 100_000 < ExtenderSettings().max_body_bytes


def test_without_managed_fields_a_node_is_smaller_but_still_large() -> None:
    stripped = len(node_list_args(500, managed_fields=False))
    assert 6 * MIB < stripped < len(node_list_args(500))  # docs/extender.md: about 7.0 MiB
