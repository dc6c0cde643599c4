"""Per-pod GPU attribution: the kubelet's pod-resources API on a real gRPC unix socket, joined to
dcgm-exporter samples read by the DCGM collector."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from sits_observe.collectors.dcgm_collector import DcgmCollector
from sits_observe.collectors.podresources import PodAttributed, PodResourcesClient
from sits_observe.domain.tables import GPU_ATTRIBUTION
from tests.kubelet_podresources import Container, DraDevice, Pod, serving

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
NODE = "gpu-node-1"
#: Four H100s; GPU 3 is in MIG mode with two 3g.40gb instances.
UUIDS = [f"GPU-5d1a6b3c-0000-4000-8000-00000000000{i}" for i in range(4)]


def _labels(gpu: int, **extra: str) -> str:
    labels = {
        "gpu": str(gpu),
        "UUID": UUIDS[gpu],
        "pci_bus_id": f"00000000:{0x18 + gpu:02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": NODE,
        "DCGM_FI_DRIVER_VERSION": "580.126.20",
        **extra,
    }
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def dcgm_body() -> str:
    """dcgm-exporter's text for the node: three whole GPUs and two MIG instances on GPU 3."""
    series = [(_labels(g), 1000 * (g + 1)) for g in range(3)]
    series += [
        (_labels(3, GPU_I_PROFILE="3g.40gb", GPU_I_ID=str(i)), 500 * (i + 1)) for i in (1, 2)
    ]
    lines = []
    for family, scale in (("DCGM_FI_DEV_FB_USED", 1), ("DCGM_FI_DEV_GPU_UTIL", 0)):
        lines += [f"# HELP {family} x", f"# TYPE {family} gauge"]
        lines += [f"{family}{{{labels}}} {value if scale else 50}" for labels, value in series]
    return "\n".join(lines) + "\n"


def pods() -> list[Pod]:
    """What the kubelet reports: a device-plugin pod on GPU 0; a DRA pod on gpu-1; two pods
    sharing gpu-2 through MPS (one claim, two consumers); a DRA MIG device on GPU 3 of a
    profile that has two instances; a device-plugin MIG device and a non-GPU device."""
    mig = DraDevice(
        "gpu.nvidia.com", NODE, "gpu-3-mig-3g40gb-9-0", cdi=("k8s.gpu.nvidia.com/claim=x",)
    )
    return [
        Pod(
            "serving",
            "llm-0",
            [Container("vllm", devices={"nvidia.com/gpu": [UUIDS[0]]}, cpu_ids=(2, 3))],
        ),
        Pod(
            "serving",
            "llm-1",
            [
                Container(
                    "vllm",
                    claims={
                        ("serving", "llm-1-gpu-7qzrt"): [DraDevice("gpu.nvidia.com", NODE, "gpu-1")]
                    },
                ),
                Container("sidecar"),
            ],
        ),
        *(
            Pod(
                "batch",
                f"mps-{i}",
                [
                    Container(
                        "worker",
                        claims={
                            ("batch", "mps-shared"): [DraDevice("gpu.nvidia.com", NODE, "gpu-2")]
                        },
                    )
                ],
            )
            for i in range(2)
        ),
        Pod("batch", "mig-0", [Container("train", claims={("batch", "mig-0-claim"): [mig]})]),
        Pod(
            "batch",
            "mig-dp",
            [Container("main", devices={"nvidia.com/mig-1g.10gb": ["MIG-0b6f1c2d-aaaa"]})],
        ),
        Pod("net", "rdma-0", [Container("main", devices={"rdma/hca": ["mlx5_0"]})]),
    ]


@pytest.fixture
def socket(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


@pytest.fixture
def dcgm(tmp_path: Path) -> Iterator[DcgmCollector]:
    body = tmp_path / "dcgm.txt"
    body.write_text(dcgm_body())
    with DcgmCollector(str(body), node=NODE) as collector:
        yield collector


def _by_uuid(table: Any) -> dict[tuple[str, Any], dict[str, Any]]:
    return {(r["gpu_uuid"], r["mig_instance_id"]): r for r in table.to_pylist()}


def test_the_client_reads_devices_and_dynamic_resources(socket: Path) -> None:
    with serving(socket, pods()) as kubelet:
        client = PodResourcesClient(socket)
        holders = client.list()
        client.close()
    assert kubelet.calls == 1
    got = {(h.pod, h.container, h.source, h.resource, h.device, h.claim) for h in holders}
    assert ("llm-0", "vllm", "device-plugin", "nvidia.com/gpu", UUIDS[0], None) in got
    assert (
        "llm-1",
        "vllm",
        "dra",
        "gpu.nvidia.com",
        f"{NODE}/gpu-1",
        "serving/llm-1-gpu-7qzrt",
    ) in got
    assert (
        "mig-dp",
        "main",
        "device-plugin",
        "nvidia.com/mig-1g.10gb",
        "MIG-0b6f1c2d-aaaa",
        None,
    ) in got
    assert not [h for h in holders if h.pod == "rdma-0"]  # not a GPU resource
    assert len(holders) == 6


def test_samples_are_attributed_by_gpu_with_an_unattributed_bucket(
    socket: Path, dcgm: DcgmCollector
) -> None:
    with serving(socket, pods()):
        result = PodAttributed(dcgm, PodResourcesClient(socket), node=NODE).collect(NOW)
    samples = _by_uuid(result.tables["gpu_samples"])
    assert (samples[(UUIDS[0], None)]["namespace"], samples[(UUIDS[0], None)]["pod"]) == (
        "serving",
        "llm-0",
    )
    assert samples[(UUIDS[0], None)]["container"] == "vllm"
    assert (samples[(UUIDS[1], None)]["pod"], samples[(UUIDS[1], None)]["container"]) == (
        "llm-1",
        "vllm",
    )
    # Two pods share GPU 2 (MPS): no pod is charged with it.
    assert samples[(UUIDS[2], None)]["pod"] is None
    # Two 3g.40gb instances on GPU 3 and one holder of that profile: which one is unknown.
    assert samples[(UUIDS[3], 1)]["pod"] is None and samples[(UUIDS[3], 2)]["pod"] is None

    table = result.tables["gpu_attribution"]
    assert table.schema == GPU_ATTRIBUTION.schema
    rows = table.to_pylist()
    by_pod = {r["pod"]: r for r in rows if r["bucket"] == "pod"}
    assert set(by_pod) == {"llm-0", "llm-1"}
    assert by_pod["llm-1"]["claim"] == "serving/llm-1-gpu-7qzrt"
    assert by_pod["llm-1"]["fb_used_bytes"] == 2000 * 1024 * 1024  # GPU 1's sample
    shared = [r for r in rows if r["reason"] == "shared"]
    assert {(r["pod"], r["gpu_uuid"], r["holders"]) for r in shared} == {
        ("mps-0", UUIDS[2], 2),
        ("mps-1", UUIDS[2], 2),
    }
    ambiguous = [r for r in rows if r["reason"] == "ambiguous"]
    assert {(r["pod"], r["mig_instance_id"]) for r in ambiguous} == {("mig-0", 1), ("mig-0", 2)}
    unresolved = [r for r in rows if r["reason"] == "unresolved"]
    assert [(r["pod"], r["gpu_uuid"], r["ts"]) for r in unresolved] == [
        ("mig-dp", None, NOW.replace(tzinfo=None))
    ]
    assert not [r for r in rows if r["reason"] == "no-holder"]  # every sampled GPU is held
    assert {r["node"] for r in rows} == {NODE}


def test_a_free_gpu_is_unattributed_with_no_holder(socket: Path, dcgm: DcgmCollector) -> None:
    with serving(socket, pods()[:1]):
        result = PodAttributed(dcgm, PodResourcesClient(socket), node=NODE).collect(NOW)
    rows = result.tables["gpu_attribution"].to_pylist()
    idle = {(r["gpu_uuid"], r["mig_instance_id"]) for r in rows if r["reason"] == "no-holder"}
    assert idle == {(UUIDS[1], None), (UUIDS[2], None), (UUIDS[3], 1), (UUIDS[3], 2)}
    assert all(r["pod"] is None and r["holders"] == 0 for r in rows if r["reason"] == "no-holder")


def test_time_sliced_replicas_and_index_ids_name_their_gpu(
    socket: Path, dcgm: DcgmCollector
) -> None:
    """The device plugin's time-slicing replicas (``GPU-...::<n>``) are one GPU; under
    ``deviceIDStrategy=index`` the id is the GPU's index."""
    kubelet_pods = [
        Pod("a", "ts-0", [Container("c", devices={"nvidia.com/gpu.shared": [f"{UUIDS[0]}::0"]})]),
        Pod("a", "ts-1", [Container("c", devices={"nvidia.com/gpu.shared": [f"{UUIDS[0]}::3"]})]),
        Pod("b", "by-index", [Container("c", devices={"nvidia.com/gpu": ["2"]})]),
    ]
    with serving(socket, kubelet_pods):
        result = PodAttributed(dcgm, PodResourcesClient(socket), node=NODE).collect(NOW)
    rows = result.tables["gpu_attribution"].to_pylist()
    assert {r["pod"] for r in rows if r["gpu_uuid"] == UUIDS[0]} == {"ts-0", "ts-1"}
    assert {r["reason"] for r in rows if r["gpu_uuid"] == UUIDS[0]} == {"shared"}
    assert _by_uuid(result.tables["gpu_samples"])[(UUIDS[2], None)]["pod"] == "by-index"


def test_a_kubelet_that_fails_or_is_absent_costs_no_sample(
    socket: Path, dcgm: DcgmCollector
) -> None:
    attributed = PodAttributed(dcgm, PodResourcesClient(socket, timeout_s=2), node=NODE)
    absent = attributed.collect(NOW)
    assert absent.tables["gpu_samples"].num_rows == 5
    assert "gpu_attribution" not in absent.tables
    assert absent.dropped["podresources_unavailable"] == 1
    with serving(socket, pods()) as kubelet:
        kubelet.status = grpc.StatusCode.UNAVAILABLE
        failing = attributed.collect(NOW)
        assert failing.dropped["podresources_unavailable"] == 1
        assert failing.tables["gpu_samples"].num_rows == 5
        kubelet.status = grpc.StatusCode.OK
        recovered = attributed.collect(NOW)
    assert recovered.tables["gpu_attribution"].num_rows > 0
    assert "podresources_unavailable" not in recovered.dropped


def test_the_agent_flag_wraps_its_gpu_collectors(socket: Path, tmp_path: Path) -> None:
    from sits_observe.surfaces.cli.agent import collector_factories

    body = tmp_path / "dcgm.txt"
    body.write_text(dcgm_body())
    [make] = collector_factories(NODE, [str(body)], None, False, [], pod_resources=socket)
    collector = make(None)
    assert collector.name == "dcgm"
    with serving(socket, pods()):
        result = collector.collect(NOW)
    pods_seen = {r["pod"] for r in result.tables["gpu_attribution"].to_pylist()}
    assert {"llm-0", "llm-1", "mps-0", "mps-1"} <= pods_seen
    [plain] = collector_factories(NODE, [str(body)], None, False, [])
    assert "gpu_attribution" not in plain(None).collect(NOW).tables
