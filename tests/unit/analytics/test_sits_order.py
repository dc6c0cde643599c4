"""The ``sits`` order shared by the replay policy and the extender (analytics/sits_order.py)."""

from __future__ import annotations

import numpy as np

from sits_observe.analytics.sits_order import RankKeys, leaders, rank_order


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
