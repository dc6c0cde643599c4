"""The ranked extender order's tie levels (control/extender/rank.py) and the bind verb's GPU
for a share (the tightest of FGD's best), the same levels as the ``sits`` replay policy."""

from __future__ import annotations

import numpy as np

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.placement.sits_order import RankKeys
from sits_observe.control.extender.gpus import node_choices
from sits_observe.control.extender.rank import ranked_scores


def _keys(n: int, **levels: list[int]) -> RankKeys:
    zeros = np.zeros(n, dtype=np.int64)
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in levels.items()}
    in_use = arrays.pop("in_use", None)
    return RankKeys(
        points=arrays.pop("points", zeros),
        fit=arrays.pop("fit", zeros),
        in_use=None if in_use is None else in_use.astype(np.bool_),
        tie_rank=arrays.pop("tie_rank", np.arange(n, dtype=np.int64)),
        **arrays,
    )


FITS = np.ones(3, dtype=np.bool_)


def test_equal_points_go_to_the_least_idle_node_for_a_cpu_pod() -> None:
    keys = _keys(3, idle_gpu=[3000, 1000, 2000], in_use=[1, 0, 1])
    assert ranked_scores(keys, FITS).tolist() == [8, 10, 9]  # before in_use


def test_equal_nodes_in_use_go_to_the_tightest_share_then_the_smaller_node() -> None:
    keys = _keys(3, in_use=[1, 1, 0], share_free=[700, 400, 100], gpu_count=[2, 8, 2])
    assert ranked_scores(keys, FITS).tolist() == [9, 10, 8]  # in use first, then the share
    keys = _keys(3, in_use=[1, 1, 1], share_free=[400, 400, 400], gpu_count=[8, 2, 4])
    assert ranked_scores(keys, FITS).tolist() == [8, 10, 9]


def test_points_outrank_every_tie_level() -> None:
    keys = _keys(3, points=[49, 50, 49], idle_gpu=[0, 9000, 0], share_free=[0, 999, 0])
    assert ranked_scores(keys, FITS).tolist()[1] == 10


def test_the_hinted_gpu_is_the_tightest_of_fgds_best() -> None:
    # GPUs free [700, 400, 1000]; M is one whole-GPU shape, so any partial GPU is all
    # fragment: a 300 share on GPU 0 (-> 400) or GPU 1 (-> 100) both lower F by 300.
    state = ClusterState.empty(["n0"], [8000], [3], ["G"])
    index = FragmentationIndex(state, TargetWorkload.from_weights([(PodShape(1000, 1, 1000), 1.0)]))
    index.place(0, PodShape(0, 1, 300), (0,))
    index.place(0, PodShape(0, 1, 600), (1,))
    pods = np.zeros((1, 3), dtype=np.int64)
    shape = PodShape(0, 1, 300)
    lowest = node_choices(
        index, pods, shape, choice="fgd", policy="spread", split_count=10, tightest=False
    )
    tight = node_choices(
        index, pods, shape, choice="fgd", policy="spread", split_count=10, tightest=True
    )
    assert lowest.delta_milli.tolist() == tight.delta_milli.tolist() == [-300.0]
    assert (lowest.gpu.tolist(), tight.gpu.tolist()) == ([0], [1])
