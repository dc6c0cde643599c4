"""Results of the scheduling simulator: one replay, and one policy over its seeds.

Curves are numpy arrays indexed by arrived-load step (0, 1%, ...); ratios are 0-1, GPUs are
whole GPUs (milli / 1000). :class:`PolicyResult` holds, for each curve, a ``[3, steps]`` array
of the mean, min and max over seeds, and :class:`Spread` (mean, min, max) for the scalars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class ReplayResult:
    """One replay: one policy, one seed. Curve arrays are indexed by arrived-load step."""

    policy: str
    seed: int
    arrived_ratio: FloatArray
    alloc_ratio: FloatArray
    frag_ratio: FloatArray
    frag_amount_ratio: FloatArray
    first_failure_arrived: float | None
    unallocated_gpus: float
    pods_arrived: int
    pods_placed: int
    pods_failed: int
    elapsed_s: float
    #: F(M) at the end split by cause
    #: (:class:`~sits_observe.analytics.fragmentation.fgd.model.Cause`, every cause present), in
    #: whole GPUs: why the idle capacity left is unusable to typical pods.
    frag_by_cause_gpus: dict[str, float]
    #: Pods that failed, by kind (:attr:`~sits_observe.lab.replay.engine.state.SimPod.kind`,
    #: every kind of the pod list present), and the whole GPUs they requested.
    failed_pods_by_kind: dict[str, int]
    failed_gpus_by_kind: dict[str, float]

    @property
    def final_alloc_ratio(self) -> float:
        """Allocation at the end of the replay (at ``load_ratio``)."""
        return float(self.alloc_ratio[-1])


@dataclass(frozen=True)
class Spread:
    """Mean, min and max of one measure over seeds."""

    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        """None when there are no values."""
        if not values:
            return None
        arr = np.asarray(values, dtype=np.float64)
        return cls(float(arr.mean()), float(arr.min()), float(arr.max()))


@dataclass(frozen=True, eq=False)
class PolicyResult:
    """A policy over all its seeds: curves as ``[3, steps]`` arrays of mean, min, max."""

    policy: str
    seeds: tuple[int, ...]
    arrived_ratio: FloatArray
    alloc_ratio: FloatArray
    frag_ratio: FloatArray
    frag_amount_ratio: FloatArray
    first_failure_arrived: Spread | None
    #: Seeds in which some pod failed (``first_failure_arrived`` is over these).
    seeds_with_failure: int
    unallocated_gpus: Spread
    final_alloc_ratio: Spread
    pods_per_s: float
    replays: tuple[ReplayResult, ...]
    #: Per cause, :attr:`ReplayResult.frag_by_cause_gpus` over the seeds.
    frag_by_cause_gpus: dict[str, Spread]
    #: Per pod kind, :attr:`ReplayResult.failed_pods_by_kind` and ``failed_gpus_by_kind``.
    failed_pods_by_kind: dict[str, Spread]
    failed_gpus_by_kind: dict[str, Spread]

    @classmethod
    def combine(cls, replays: Sequence[ReplayResult]) -> PolicyResult:
        """Aggregate replays of one policy (same load, so same steps)."""
        if not replays:
            raise ValueError("no replays to combine")
        ordered = tuple(sorted(replays, key=lambda r: r.seed))

        def band(name: str) -> FloatArray:
            stack = np.stack([getattr(r, name) for r in ordered])
            return np.stack([stack.mean(axis=0), stack.min(axis=0), stack.max(axis=0)])

        failures = [r.first_failure_arrived for r in ordered if r.first_failure_arrived is not None]
        unallocated = Spread.of([r.unallocated_gpus for r in ordered])
        final = Spread.of([r.final_alloc_ratio for r in ordered])
        assert unallocated is not None and final is not None  # replays is not empty
        rates = [r.pods_arrived / r.elapsed_s for r in ordered if r.elapsed_s > 0]

        def per_key(name: str) -> dict[str, Spread]:
            first: dict[str, float] = getattr(ordered[0], name)
            spreads = {k: Spread.of([getattr(r, name)[k] for r in ordered]) for k in first}
            return {k: v for k, v in spreads.items() if v is not None}

        return cls(
            policy=ordered[0].policy,
            seeds=tuple(r.seed for r in ordered),
            arrived_ratio=ordered[0].arrived_ratio,
            alloc_ratio=band("alloc_ratio"),
            frag_ratio=band("frag_ratio"),
            frag_amount_ratio=band("frag_amount_ratio"),
            first_failure_arrived=Spread.of(failures),
            seeds_with_failure=len(failures),
            unallocated_gpus=unallocated,
            final_alloc_ratio=final,
            pods_per_s=float(np.median(rates)) if rates else 0.0,
            replays=ordered,
            frag_by_cause_gpus=per_key("frag_by_cause_gpus"),
            failed_pods_by_kind=per_key("failed_pods_by_kind"),
            failed_gpus_by_kind=per_key("failed_gpus_by_kind"),
        )
