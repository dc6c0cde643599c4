"""The typical-pod set M: popularity order, deterministic ties, 95% cut, renormalised weights."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from sits_observe.analytics.fragmentation.fgd.model import PodShape, normalise_gpu_types
from sits_observe.analytics.fragmentation.fgd.workload import (
    TargetWorkload,
    TypicalPodSettings,
    typical_pods,
)
from sits_observe.analytics.traces.cluster_trace import load_pod_list

GPU_HALF = PodShape(4000, 1, 500)
GPU_ONE = PodShape(8000, 1, 1000)
CPU = PodShape(2000, 0, 0)
RARE = PodShape(1000, 2, 1000)


def test_cut_at_coverage_and_renormalise() -> None:
    """60 + 25 + 10 + 5 pods: 60% -> 85% -> 95% reaches 0.95, so RARE (5%) is dropped;
    weights 60/95, 25/95, 10/95."""
    pods = [GPU_HALF] * 60 + [GPU_ONE] * 25 + [CPU] * 10 + [RARE] * 5
    wl = typical_pods(pods)
    assert [p.shape for p in wl.pods] == [GPU_HALF, GPU_ONE, CPU]
    assert [p.count for p in wl.pods] == [60, 25, 10]
    assert wl.weight.tolist() == pytest.approx([60 / 95, 25 / 95, 10 / 95])
    assert (wl.total_pods, wl.covered_pods, wl.coverage_ratio) == (100, 95, 0.95)
    assert wl.share_values.tolist() == [500, 1000]
    assert wl.share_index.tolist() == [0, 1, -1]


def test_cpu_only_pods_are_part_of_m_unless_excluded() -> None:
    pods = [GPU_HALF] * 50 + [CPU] * 50
    assert CPU in [p.shape for p in typical_pods(pods).pods]
    only_gpu = typical_pods(pods, TypicalPodSettings(include_cpu_only=False))
    assert [p.shape for p in only_gpu.pods] == [GPU_HALF]
    assert only_gpu.total_pods == 50
    with pytest.raises(ValueError, match="no pods"):
        typical_pods([CPU], TypicalPodSettings(include_cpu_only=False))


def test_ties_go_to_the_larger_shape_whatever_the_input_order() -> None:
    """Equal counts: CPU milli decides, then per-GPU milli, then GPU count, then models."""
    a = PodShape(4000, 1, 500)
    b = PodShape(4000, 1, 700)
    c = PodShape(9000, 0, 0)
    d = PodShape(4000, 1, 700, ("V100",))
    pods = [a, b, c, d] * 3
    expected = [c, d, b, a]
    for seed in range(5):
        random.Random(seed).shuffle(pods)
        wl = typical_pods(pods, TypicalPodSettings(coverage_ratio=1.0))
        assert [p.shape for p in wl.pods] == expected


def test_full_coverage_keeps_every_shape() -> None:
    pods = [GPU_HALF] * 3 + [RARE]
    assert len(typical_pods(pods, TypicalPodSettings(coverage_ratio=1.0))) == 2
    assert len(typical_pods(pods, TypicalPodSettings(coverage_ratio=0.75))) == 1


def test_settings_bounds() -> None:
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValidationError):
            TypicalPodSettings(coverage_ratio=bad)


def test_from_weights_renormalises_and_rejects_nonsense() -> None:
    wl = TargetWorkload.from_weights([(GPU_HALF, 2.0), (CPU, 6.0)])
    assert wl.weight.tolist() == [0.25, 0.75]
    with pytest.raises(ValueError):
        TargetWorkload.from_weights([])
    with pytest.raises(ValueError):
        TargetWorkload.from_weights([(CPU, 0.0)])


def test_pod_shape_validation_and_type_normalisation() -> None:
    assert PodShape(0, 1, 500, ("B", "A", "A")).gpu_types == ("A", "B")
    assert normalise_gpu_types(" V100M32 | | A10|V100M32") == ("A10", "V100M32")
    assert normalise_gpu_types(None) == ()
    for bad in ((-1, 0, 0), (0, 0, 500), (0, 1, 0), (0, 1, 1001), (0, 2, 500), (0, -1, 0)):
        with pytest.raises(ValueError, match="invalid pod shape"):
            PodShape(*bad)
    assert PodShape(3152, 1, 810).label() == "cpu 3.152 + 1x810m"
    assert PodShape(8000, 2, 1000, ("V100M32",)).label() == "cpu 8 + 2x1000m [V100M32]"


@pytest.mark.shared_data
def test_alibaba_default_workload(shared_data: Path) -> None:
    """The default workload: 35 shapes cover 95.26% of 8,152 pods; the most popular is
    3.152 CPU + 1 GPU x 810 (1,047 pods); CPU-only shapes weigh 13.6% of M."""
    pods = load_pod_list(
        shared_data / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    )
    wl = typical_pods(pods.shapes())
    assert (len(wl), wl.total_pods, wl.covered_pods) == (35, 8152, 7766)
    assert wl.pods[0].shape == PodShape(3152, 1, 810) and wl.pods[0].count == 1047
    assert float(wl.weight.sum()) == pytest.approx(1.0)
    assert float(wl.weight[wl.num_gpu == 0].sum()) == pytest.approx(0.13598, abs=1e-5)
    counts = np.array([p.count for p in wl.pods])
    assert (np.diff(counts) <= 0).all()
