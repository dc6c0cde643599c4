"""The target workload M of the FGD measure: the typical-pod set and its weights.

Weng et al. (USENIX ATC 2023, section 3) measure fragmentation *with respect to a workload*:
idle GPU capacity counts as fragmented for the pods that cannot use it. M is built from the
pods' request shapes (CPU milli, GPU count, per-GPU milli, allowed GPU models):

1. count the pods of each distinct shape; CPU-only pods are shapes too (their share of the
   workload can use no idle GPU, which is why an empty cluster is already 13.9% fragmented
   on the Alibaba default workload);
2. order the shapes by count, most popular first; ties go to the larger shape, comparing
   CPU milli, then per-GPU milli, then GPU count, then the allowed models as ``|``-joined
   text (the order of the authors' simulator, which sorts by count and then by those fields,
   descending), so the result never depends on input order;
3. keep the shortest prefix whose pods cover at least ``coverage_ratio`` (95%) of all pods;
4. weight each kept shape by its count over the kept pods' count (p_m, summing to 1).

The weights are held as numpy arrays next to the shapes so the fragmentation kernels read
them without Python loops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fragmentation.fgd.model import PodShape


class TypicalPodSettings(BaseModel):
    """How the typical-pod set is chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    coverage_ratio: float = Field(
        0.95,
        gt=0.0,
        le=1.0,
        description="fraction of all pods (0-1) the most popular shapes must cover (ATC'23: 0.95)",
    )
    include_cpu_only: bool = Field(
        True, description="count CPU-only pods as shapes of the workload (ATC'23: yes)"
    )


@dataclass(frozen=True)
class TypicalPod:
    """One shape of the target workload with its pod count and weight p_m (0-1)."""

    shape: PodShape
    count: int
    weight: float


@dataclass(frozen=True, eq=False)
class TargetWorkload:
    """The typical-pod set M with vectorised views of its shapes (index m = position)."""

    pods: tuple[TypicalPod, ...]
    total_pods: int
    covered_pods: int
    cpu_milli: npt.NDArray[np.int64] = field(init=False)
    num_gpu: npt.NDArray[np.int64] = field(init=False)
    gpu_milli: npt.NDArray[np.int64] = field(init=False)
    weight: npt.NDArray[np.float64] = field(init=False)
    #: Distinct per-GPU shares of the GPU shapes and, per shape, its index among them
    #: (-1 for CPU-only shapes); the kernels compare free shares once per distinct value.
    share_values: npt.NDArray[np.int64] = field(init=False)
    share_index: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        shapes = [p.shape for p in self.pods]
        cpu = np.array([s.cpu_milli for s in shapes], dtype=np.int64)
        num = np.array([s.num_gpu for s in shapes], dtype=np.int64)
        share = np.array([s.gpu_milli for s in shapes], dtype=np.int64)
        values = np.unique(share[num > 0])
        index = np.where(num > 0, np.searchsorted(values, share), -1).astype(np.int64)
        set_ = object.__setattr__
        set_(self, "cpu_milli", cpu)
        set_(self, "num_gpu", num)
        set_(self, "gpu_milli", share)
        set_(self, "weight", np.array([p.weight for p in self.pods], dtype=np.float64))
        set_(self, "share_values", values)
        set_(self, "share_index", index)

    def __len__(self) -> int:
        return len(self.pods)

    @property
    def coverage_ratio(self) -> float:
        """Fraction of all pods (0-1) whose shape is in M."""
        return self.covered_pods / self.total_pods if self.total_pods else 0.0

    @property
    def gpu_types(self) -> tuple[tuple[str, ...], ...]:
        """Allowed GPU models per shape (empty = any)."""
        return tuple(p.shape.gpu_types for p in self.pods)

    @classmethod
    def from_weights(cls, weighted: Sequence[tuple[PodShape, float]]) -> TargetWorkload:
        """A workload with given shapes and weights (renormalised to sum to 1).

        For hand-made workloads and tests; counts are left at 0.
        """
        total = sum(w for _, w in weighted)
        if not weighted or total <= 0 or any(w < 0 for _, w in weighted):
            raise ValueError("a workload needs at least one shape and non-negative weights > 0")
        pods = tuple(TypicalPod(shape, 0, w / total) for shape, w in weighted)
        return cls(pods, total_pods=0, covered_pods=0)


def typical_pods(
    shapes: Iterable[PodShape], settings: TypicalPodSettings | None = None
) -> TargetWorkload:
    """The typical-pod set of ``shapes`` (one entry per pod); see the module docstring.

    Raises ``ValueError`` when no pod is left (empty input, or only CPU-only pods excluded).
    """
    settings = settings or TypicalPodSettings()
    counts = Counter(s for s in shapes if settings.include_cpu_only or not s.cpu_only)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("no pods to build the typical-pod set from")
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], _tie_key(kv[0])), reverse=True)
    needed = settings.coverage_ratio * total
    kept: list[tuple[PodShape, int]] = []
    covered = 0
    for shape, count in ranked:
        kept.append((shape, count))
        covered += count
        # The relative slack keeps 0.95 * 8152 from missing by a rounding error.
        if covered >= needed * (1 - 1e-12):
            break
    pods = tuple(TypicalPod(shape, count, count / covered) for shape, count in kept)
    return TargetWorkload(pods, total_pods=total, covered_pods=covered)


def _tie_key(shape: PodShape) -> tuple[int, int, int, str]:
    return (shape.cpu_milli, shape.gpu_milli, shape.num_gpu, "|".join(shape.gpu_types))
