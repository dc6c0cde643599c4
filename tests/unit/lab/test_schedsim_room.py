"""Where a replay's idle GPUs are: the share ledger and the hindsight repack."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.analytics.traces.cluster_trace import NodeList, PodList
from sits_observe.lab.replay.engine.replay import policy_names, replay
from sits_observe.lab.replay.engine.room import ShareLedger, repacked_remnant_milli

from .test_schedsim import NODES, PODS


def test_the_repack_fills_the_tightest_gpu_largest_share_first() -> None:
    # 810 -> new GPU (190 left); 470 -> new (530); 470 -> the 530 (60); 320 -> new (680);
    # 160 -> the 190 rather than the 680 (30). Left: 30 + 60 + 680.
    assert repacked_remnant_milli([320, 470, 160, 810, 470]) == 770
    assert repacked_remnant_milli([500, 500, 250, 250, 250, 250]) == 0
    assert repacked_remnant_milli([]) == 0


@pytest.mark.parametrize("bad", [0, 1000, -5])
def test_the_repack_refuses_what_is_not_a_share(bad: int) -> None:
    with pytest.raises(ValueError, match="1-999"):
        repacked_remnant_milli([500, bad])


def test_a_ledger_that_saw_no_placement_says_so() -> None:
    with pytest.raises(ValueError, match="no pod was placed"):
        ShareLedger().room()


def test_two_lone_shares_leave_their_remnants() -> None:
    nodes = NodeList(
        names=("n1",),
        cpu_milli=np.array([64000]),
        memory_mib=np.array([65536]),
        gpu_count=np.array([2]),
        gpu_model=("T4",),
    )
    pods = PodList(
        names=("a", "b"),
        cpu_milli=np.array([1000, 1000]),
        memory_mib=np.array([1024, 1024]),
        num_gpu=np.array([1, 1]),
        gpu_milli=np.array([810, 810]),
        gpu_types=((), ()),
    )
    ledger = ShareLedger()
    # 130 % of 2 GPUs: a third 810 arrives and finds no GPU with 810 free.
    result = replay(nodes, pods, "fgd", 0, on_place=ledger)
    assert result.pods_arrived == 3 and result.pods_failed == 1
    room = ledger.room()
    assert room.whole_idle_gpus == 0
    assert room.share_remnant_gpus == pytest.approx(0.38)
    assert room.lone_share_remnant_gpus == pytest.approx(0.38)
    assert room.repacked_remnant_gpus == pytest.approx(0.38)
    assert room.remnant_by_shares == {(810,): pytest.approx(0.38)}


@pytest.mark.parametrize("policy", [p for p in policy_names() if not p.startswith("kube")])
def test_the_idle_capacity_is_whole_gpus_plus_share_remnants(policy: str) -> None:
    ledger = ShareLedger()
    result = replay(NODES, PODS, policy, 3, on_place=ledger)
    room = ledger.room()
    assert room.idle_gpus == pytest.approx(result.unallocated_gpus)
    # Whole-GPU pods take whole GPUs, so every idle milli is on an empty GPU or beside a share.
    assert room.whole_idle_gpus + room.share_remnant_gpus == pytest.approx(room.idle_gpus)
    assert 0 <= room.lone_share_remnant_gpus <= room.share_remnant_gpus
    assert sum(room.remnant_by_shares.values()) == pytest.approx(room.share_remnant_gpus)
    assert list(room.remnant_by_shares.values()) == sorted(
        room.remnant_by_shares.values(), reverse=True
    )
    shares = sum(len(k) for k in room.remnant_by_shares)
    assert shares <= result.pods_placed
