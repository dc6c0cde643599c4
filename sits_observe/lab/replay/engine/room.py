"""Where the GPU capacity a replay left idle is, and how much of it the shares' sizes fix.

At 130 % arrived almost no idle GPU is usable by a typical pod (F(M) is within a few GPUs of
the idle capacity; docs/analytics/simulator.md, "How much room is left"), so a better policy
can only leave fewer idle GPUs behind, and what it can win is bounded by where they are:

- ``whole_idle_gpus``: GPUs with nothing on them (their node's CPU, memory or GPU model left
  them unused);
- ``share_remnant_gpus``: the free part of GPUs that hold shares (pods asking part of one GPU),
  and of it ``lone_share_remnant_gpus``, on GPUs holding a single share. Its largest part is
  set by the workload's share sizes, not by the policy: a share of 810 milli (the Alibaba
  trace's most common) leaves 190, which only shares of 190 milli or less can fill;
- ``repacked_remnant_gpus``: a reference, not a bound: the remnant left if the *same* shares
  were repacked with hindsight, largest first, each onto the GPU it fills best (best-fit
  decreasing), ignoring CPU, memory and GPU models. The difference to ``share_remnant_gpus``
  is roughly what a better order of placing these shares could win;
- ``remnant_by_shares``: the remnant by the set of share sizes on the GPU, largest first
  (``(810,)``: a GPU holding one 810-milli share).

:class:`ShareLedger` records the shares of a replay through
:func:`sits_observe.lab.replay.engine.replay.replay`'s ``on_place``; after the replay,
:meth:`ShareLedger.room` reads the end state. Units: whole GPUs (milli / 1000) unless a
name says milli.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.lab.replay.engine.policies import is_partial
from sits_observe.lab.replay.engine.state import SimPod, SimState


@dataclass(frozen=True)
class RoomLeft:
    """The idle GPU capacity at the end of one replay, by where it is (see the module)."""

    idle_gpus: float
    whole_idle_gpus: int
    share_remnant_gpus: float
    lone_share_remnant_gpus: float
    repacked_remnant_gpus: float
    #: Remnant (GPUs) by the share sizes (milli, largest first) on the GPU, largest remnant
    #: first; sets that fill their GPUs exactly are left out.
    remnant_by_shares: dict[tuple[int, ...], float]


class ShareLedger:
    """The shares on every GPU of a replay (pass it as ``replay(..., on_place=ledger)``)."""

    def __init__(self) -> None:
        self.shares: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
        #: The replay's cluster (None until the first placement).
        self.sim: SimState | None = None

    def __call__(self, sim: SimState, pod: SimPod, node: int, gpus: tuple[int, ...]) -> None:
        """Record ``pod`` on ``node`` when it is a share (the ``on_place`` hook)."""
        self.sim = sim
        if is_partial(pod):
            self.shares[(node, gpus[0])].append(pod.shape.gpu_milli)

    def room(self) -> RoomLeft:
        """Where the idle capacity of the replay's cluster is now (after the replay: at the
        end). Raises :class:`ValueError` when nothing was placed."""
        sim = self.sim
        if sim is None:
            raise ValueError("no pod was placed: the ledger has not seen the replay's cluster")
        free = sim.gpu_free_milli
        by_shares: defaultdict[tuple[int, ...], int] = defaultdict(int)
        lone = 0
        for (node, gpu), sizes in self.shares.items():
            left = int(free[node, gpu])
            by_shares[tuple(sorted(sizes, reverse=True))] += left
            lone += left if len(sizes) == 1 else 0
        ranked = sorted(((k, v) for k, v in by_shares.items() if v), key=lambda kv: (-kv[1], kv[0]))
        placed = [m for sizes in self.shares.values() for m in sizes]
        return RoomLeft(
            idle_gpus=(sim.total_gpu_milli - sim.allocated_gpu_milli) / MILLI_PER_GPU,
            # Columns past a node's GPU count hold 0 (ClusterState), so never count as idle.
            whole_idle_gpus=int((free == MILLI_PER_GPU).sum()),
            share_remnant_gpus=sum(by_shares.values()) / MILLI_PER_GPU,
            lone_share_remnant_gpus=lone / MILLI_PER_GPU,
            repacked_remnant_gpus=repacked_remnant_milli(placed) / MILLI_PER_GPU,
            remnant_by_shares={k: v / MILLI_PER_GPU for k, v in ranked},
        )


def repacked_remnant_milli(shares: Sequence[int]) -> int:
    """The free milli left on the GPUs that ``shares`` (milli each, 1-999) take when packed
    largest first, each onto the used GPU with the least free share that still fits it, or
    onto a new GPU when none does (best-fit decreasing; ignores CPU, memory and models).

    GPUs are kept as counts per free level (at most 1,000 levels), so the cost grows with the
    shares, not with shares x GPUs.
    """
    if any(not 0 < m < MILLI_PER_GPU for m in shares):
        raise ValueError("shares must be 1-999 milli-GPU each")
    gpus_with_free = np.zeros(MILLI_PER_GPU, dtype=np.int64)
    for milli in sorted(shares, reverse=True):
        fitting = np.flatnonzero(gpus_with_free[milli:]) + milli
        if fitting.shape[0]:
            gpus_with_free[fitting[0]] -= 1
            gpus_with_free[fitting[0] - milli] += 1
        else:
            gpus_with_free[MILLI_PER_GPU - milli] += 1
    levels = np.arange(MILLI_PER_GPU, dtype=np.int64)
    return int((gpus_with_free[1:] * levels[1:]).sum())
