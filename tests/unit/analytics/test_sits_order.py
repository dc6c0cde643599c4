"""The ``sits`` order shared by the replay policy and the extender
(analytics/placement/sits_order.py)."""

from __future__ import annotations

import numpy as np

from sits_observe.analytics.placement.sits_order import (
    CPU_SHORT_STEP_MILLI,
    RankKeys,
    cpu_short_steps,
    leaders,
    rank_order,
)


def ints(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


KEYS = RankKeys(
    points=ints(50, 60, 60, 60, 60),
    fit=None,
    in_use=np.array([True, False, True, True, True]),
    tie_rank=ints(0, 4, 3, 2, 1),
    gpu_count=ints(2, 2, 8, 4, 4),
)
ROWS = np.arange(5)


def test_each_level_decides_only_among_equals_of_the_levels_before() -> None:
    # points: 1-4 beat 0; in_use: 2-4 beat 1; gpu_count: 3 and 4 beat 2; tie_rank: 4 beats 3.
    assert rank_order(KEYS, ROWS).tolist() == [4, 3, 2, 1, 0]


def test_leaders_are_the_best_but_for_the_tie_rank_in_the_given_order() -> None:
    assert leaders(KEYS, ROWS).tolist() == [3, 4]
    assert leaders(KEYS, ints(4, 3, 0)).tolist() == [4, 3]
    assert leaders(KEYS, ints(1, 0)).tolist() == [1]


def test_a_level_left_out_does_not_decide() -> None:
    keys = RankKeys(points=KEYS.points, fit=None, in_use=None, tie_rank=KEYS.tie_rank)
    assert leaders(keys, ROWS).tolist() == [1, 2, 3, 4]
    assert rank_order(keys, ROWS).tolist() == [4, 3, 2, 1, 0]


def test_cpu_short_counts_the_usable_idle_gpu_the_free_cpu_cannot_feed() -> None:
    # A 2-CPU 1-GPU pod (2 CPU per GPU). After it lands, per node: usable idle GPU (idle minus
    # F_n(M), minus the pod's GPU) against what the CPU left feeds at 2 CPU per GPU:
    # n0 2000 vs 3000: 0; n1 2000 vs 1000: 1000 short, 4 steps of 250; n2 every idle milli is
    # fragment: 0; n3 1000 - 1000 (F rounds to 1000) = 0 usable: 0; n4 1000 vs 400: 600, 2 steps.
    steps = cpu_short_steps(
        ints(8000, 4000, 2000, 10000, 2800),
        ints(3000, 3000, 1000, 2000, 2000),
        np.array([0.0, 0.0, 800.0, 1000.4, 0.0]),
        cpu_milli=2000,
        gpu_milli=1000,
    )
    assert steps.tolist() == [0, 4, 0, 0, 2]
    assert CPU_SHORT_STEP_MILLI == 250
    no_cpu = cpu_short_steps(ints(0), ints(8000), np.zeros(1), cpu_milli=0, gpu_milli=1000)
    assert no_cpu.tolist() == [0]


def test_cpu_short_decides_after_the_share_and_before_the_node_size() -> None:
    keys = RankKeys(
        points=ints(60, 60, 60),
        fit=None,
        in_use=None,
        tie_rank=ints(0, 1, 2),
        share_free=ints(100, 100, 50),
        cpu_short=ints(3, 0, 9),
        gpu_count=ints(2, 8, 2),
    )
    # share_free: 2 first; then cpu_short: 1 before 0 although 0 is smaller.
    assert rank_order(keys, ints(0, 1, 2)).tolist() == [2, 1, 0]
