"""A workload's GPU stack from what the store holds, and the bytes it reserves per GPU now."""

from __future__ import annotations

import pytest

from sits_observe.analytics.rightsizing_forms import propose
from sits_observe.analytics.rightsizing_stacks import stack_of

GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def test_mig_first_then_a_share_then_time_slicing_then_whole_gpus() -> None:
    mig, reserved, compute = stack_of(
        {"mig_profile": "3g.40gb", "instance_bytes": 40 * GIB, "util_ratio": 0.2}
    )
    assert (mig.kind, mig.current, reserved) == ("mig", "nvidia.com/mig-3g.40gb: 1", 40 * GIB)
    assert compute == pytest.approx(0.2 * 3 / 7)  # the instance's use, as a share of a GPU
    proposal = propose(mig, 8 * GIB, gpu_memory_bytes=None, gpu_product=H100, compute_ratio=compute)
    # 8 GiB and one compute slice (0.09 x 7, rounded up): the smallest H100 profile, 1g.10gb.
    assert proposal.proposed == "nvidia.com/mig-1g.10gb: 1"
    shared, reserved, compute = stack_of(
        {"gpu_request": 1, "gpu_milli": 250, "device_bytes": 80 * GIB, "util_ratio": 0.9}
    )
    assert (shared.kind, shared.hami_memory_percent, reserved) == ("hami", 25, 20 * GIB)
    assert compute is None  # the device's utilisation, not the pod's
    sliced, reserved, _ = stack_of({"gpu_request": 1, "replicas": 4, "node_gpu_bytes": 80 * GIB})
    assert (sliced.kind, sliced.time_slicing_replicas, reserved) == ("time-slicing", 4, 20 * GIB)
    whole, reserved, compute = stack_of({"gpu_request": 2, "device_bytes": 80 * GIB})
    assert (whole.kind, whole.num_gpu, whole.current) == ("whole-gpu", 2, "nvidia.com/gpu: 2")
    assert (reserved, compute) == (80 * GIB, None)
    unknown, reserved, _ = stack_of({})
    assert (unknown.kind, unknown.num_gpu, reserved) == ("whole-gpu", 1, None)
