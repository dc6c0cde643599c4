"""Which GPU(s) of a node a pod gets: the node's device plugin, after the scheduler chose the node.

kube-scheduler picks a node; the GPUs inside it are the device plugin's choice (kubelet asks
it at admission). Two plugins are modelled, as users run them:

- **whole GPUs** (``nvidia.com/gpu`` without a share): the NVIDIA device plugin hands out fully
  free GPUs; without topology preferences the lowest-indexed ones;
- **shared GPUs** (a per-GPU share below 1000 milli, the trace's ``gpu_milli``): a HAMi-style
  plugin. HAMi scores each candidate device by its predicted utilisation after the placement,
  ``10 x (slot + core + memory)`` with slot = (pods on the device + 1) / split count (10 by
  default), core and memory = (allocated share + request) / whole GPU (a pod's share is both
  its cores and its memory here), and its default GPU policy ``spread`` takes the *lowest*
  score (``binpack`` the highest); ties go to the lowest index. (Project-HAMi docs,
  "Scheduler Policy": ``gpu-scheduler-policy`` spread / binpack.)

Both honour HAMi's GPU hint: a pod annotated ``nvidia.com/use-gpuuuid`` (comma-separated
UUIDs) may only get those GPUs. That is how a scheduler extender that chose a GPU tells the
device plugin (docs/extender.md, the ``bind`` verb).

Pure functions over one node's arrays (free milli and pod count per GPU), so the replay, the
simulated nodes and the tests share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

MILLI_PER_GPU = 1000
#: HAMi's pod annotation restricting which GPUs a pod may get.
GPU_HINT_ANNOTATION = "nvidia.com/use-gpuuuid"
#: HAMi's default ``deviceSplitCount``: pods that may share one GPU.
DEFAULT_SPLIT_COUNT = 10

GpuPolicy = Literal["spread", "binpack"]
IntArray = npt.NDArray[np.int64]


class DeviceAllocationError(Exception):
    """No GPU of the node can take the pod (kubelet's UnexpectedAdmissionError)."""


def parse_hint(value: str | None) -> tuple[str, ...]:
    """The UUIDs of a ``nvidia.com/use-gpuuuid`` annotation (empty: no hint)."""
    if not value:
        return ()
    return tuple(u.strip() for u in value.split(",") if u.strip())


def allocate_gpus(
    free_milli: IntArray,
    pods_per_gpu: IntArray,
    uuids: Sequence[str],
    *,
    num_gpu: int,
    gpu_milli: int,
    hint: Sequence[str] = (),
    policy: GpuPolicy = "spread",
    split_count: int = DEFAULT_SPLIT_COUNT,
) -> tuple[int, ...]:
    """GPU indices for a pod of ``num_gpu`` GPUs x ``gpu_milli`` each on one node.

    ``free_milli[g]`` and ``pods_per_gpu[g]`` describe the node's GPUs (``uuids[g]`` names
    them). Raises :class:`DeviceAllocationError` when the pod does not fit, or fits only on
    GPUs its hint excludes.
    """
    if num_gpu <= 0:
        return ()
    count = len(uuids)
    free = np.asarray(free_milli[:count], dtype=np.int64)
    pods = np.asarray(pods_per_gpu[:count], dtype=np.int64)
    allowed = np.ones(count, dtype=np.bool_)
    if hint:
        wanted = set(hint)
        allowed = np.array([u in wanted for u in uuids], dtype=np.bool_)
    if gpu_milli >= MILLI_PER_GPU:
        candidates = np.flatnonzero(allowed & (free >= MILLI_PER_GPU))
        if candidates.shape[0] < num_gpu:
            raise DeviceAllocationError(_short(num_gpu, gpu_milli, candidates.shape[0], hint))
        return tuple(int(g) for g in candidates[:num_gpu])
    if num_gpu != 1:
        raise DeviceAllocationError(
            f"a share of {gpu_milli} milli is only for one GPU, not {num_gpu}"
        )
    candidates = np.flatnonzero(allowed & (free >= gpu_milli) & (pods < split_count))
    if candidates.shape[0] == 0:
        raise DeviceAllocationError(_short(1, gpu_milli, 0, hint))
    used = MILLI_PER_GPU - free[candidates] + gpu_milli
    score = 10.0 * ((pods[candidates] + 1) / split_count + 2.0 * used / MILLI_PER_GPU)
    best = score.min() if policy == "spread" else score.max()
    return (int(candidates[np.flatnonzero(np.isclose(score, best))[0]]),)


def _short(num_gpu: int, gpu_milli: int, found: int, hint: Sequence[str]) -> str:
    where = f" among the hinted GPUs {', '.join(hint)}" if hint else ""
    return f"pod needs {num_gpu} GPU(s) with {gpu_milli} milli free{where}; {found} found"
