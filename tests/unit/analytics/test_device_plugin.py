"""GPU choice inside a node (simulator.device_plugin): NVIDIA whole GPUs, HAMi shares and hints."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.analytics.placement.device_plugin import (
    DeviceAllocationError,
    allocate_gpus,
    parse_hint,
)

UUIDS = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")


def _node(free: list[int], pods: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(free, dtype=np.int64), np.array(pods, dtype=np.int64)


def test_whole_gpus_are_the_lowest_indexed_fully_free_ones() -> None:
    free, pods = _node([1000, 400, 1000, 1000], [0, 1, 0, 0])
    assert allocate_gpus(free, pods, UUIDS, num_gpu=2, gpu_milli=1000) == (0, 2)


def test_spread_takes_the_device_with_the_lowest_predicted_utilisation() -> None:
    # HAMi score 10 x ((pods+1)/10 + 2 x (used + request)/1000) for a 200 milli request:
    # GPU-0 used 600, 1 pod -> 10 x (0.2 + 1.6) = 18; GPU-1 used 0 -> 10 x (0.1 + 0.4) = 5;
    # GPU-2 used 300, 2 pods -> 10 x (0.3 + 1.0) = 13; GPU-3 full.
    free, pods = _node([400, 1000, 700, 0], [1, 0, 2, 1])
    assert allocate_gpus(free, pods, UUIDS, num_gpu=1, gpu_milli=200) == (1,)
    assert allocate_gpus(free, pods, UUIDS, num_gpu=1, gpu_milli=200, policy="binpack") == (0,)


def test_a_hint_restricts_the_choice_and_a_hint_that_does_not_fit_fails() -> None:
    free, pods = _node([400, 1000, 700, 0], [1, 0, 2, 1])
    assert allocate_gpus(free, pods, UUIDS, num_gpu=1, gpu_milli=200, hint=("GPU-2",)) == (2,)
    with pytest.raises(DeviceAllocationError, match="hinted"):
        allocate_gpus(free, pods, UUIDS, num_gpu=1, gpu_milli=500, hint=("GPU-0",))


def test_a_device_holds_at_most_split_count_pods() -> None:
    free, pods = _node([900, 0, 0, 0], [10, 0, 0, 0])
    with pytest.raises(DeviceAllocationError):
        allocate_gpus(free, pods, UUIDS, num_gpu=1, gpu_milli=100)


def test_parse_hint_reads_comma_separated_uuids() -> None:
    assert parse_hint(" GPU-a, GPU-b ,,") == ("GPU-a", "GPU-b")
    assert parse_hint(None) == ()
