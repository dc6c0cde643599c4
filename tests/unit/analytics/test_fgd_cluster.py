"""Cluster state arrays: construction, fit checks, placement and its validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState, apply_placements
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.traces.cluster_trace import load_placements, load_pod_list
from sits_observe.errors import ParseError


def small() -> ClusterState:
    return ClusterState.empty(["a", "b", "cpu"], [8000, 4000, 16000], [2, 1, 0], ["V100", "T4", ""])


def test_empty_layout() -> None:
    state = small()
    assert state.gpu_models == ("T4", "V100")
    assert state.gpu_model_id.tolist() == [1, 0, -1]
    np.testing.assert_array_equal(state.gpu_free_milli, [[1000, 1000], [1000, 0], [0, 0]])
    assert (state.total_gpu_milli, state.idle_gpu_milli) == (3000, 3000)
    assert state.node_index("b") == 1
    with pytest.raises(KeyError, match="'zz'"):
        state.node_index("zz")
    with pytest.raises(ValueError, match="unique"):
        ClusterState.empty(["a", "a"], [1, 1], [0, 0], ["", ""])


def test_fits_checks_cpu_gpu_count_share_and_model() -> None:
    state = small()
    assert state.fits(PodShape(1000, 0, 0)).tolist() == [True, True, True]
    assert state.fits(PodShape(5000, 1, 500)).tolist() == [True, False, False]
    assert state.fits(PodShape(100, 2, 1000)).tolist() == [True, False, False]
    assert state.fits(PodShape(100, 1, 100, ("T4",))).tolist() == [False, True, False]
    state.place(0, PodShape(0, 1, 700), [1])
    assert state.fits(PodShape(0, 2, 1000)).tolist() == [False, False, False]


def test_place_default_gpus_and_errors_leave_state_unchanged() -> None:
    state = small()
    assert state.place(0, PodShape(1000, 1, 1000)) == (0,)
    assert state.place(0, PodShape(1000, 1, 400), [1]) == (1,)
    np.testing.assert_array_equal(state.gpu_free_milli[0], [0, 600])
    assert state.cpu_free_milli[0] == 6000
    before = (state.cpu_free_milli.copy(), state.gpu_free_milli.copy())
    bad = [
        (0, PodShape(1000, 1, 700), [1], "GPU 1 has 600 milli free"),
        (0, PodShape(9000, 0, 0), None, "milli-CPU"),
        (1, PodShape(0, 1, 100, ("V100",)), [0], "GPU model T4"),
        (1, PodShape(0, 1, 100), [3], "out of range"),
        (0, PodShape(0, 2, 1000), [1, 1], "distinct"),
        (2, PodShape(0, 0, 0), [0], "CPU-only"),
        (7, PodShape(0, 0, 0), None, "row 7"),
    ]
    for node, pod, gpus, message in bad:
        with pytest.raises(ValueError, match=message):
            state.place(node, pod, gpus)
    np.testing.assert_array_equal(state.cpu_free_milli, before[0])
    np.testing.assert_array_equal(state.gpu_free_milli, before[1])


def test_per_node_idle_milli_and_nodes_in_use() -> None:
    state = small()
    assert state.node_idle_milli().tolist() == [2000, 1000, 0]
    # A CPU-only node has no GPU to be in use.
    assert state.nodes_in_use().tolist() == [False, False, False]
    state.place(1, PodShape(0, 1, 100))
    state.place(2, PodShape(1000, 0, 0))
    assert state.node_idle_milli().tolist() == [2000, 900, 0]
    assert state.nodes_in_use().tolist() == [False, True, False]


def test_copy_is_independent() -> None:
    state = small()
    twin = state.copy()
    twin.place(0, PodShape(100, 1, 1000))
    assert state.idle_gpu_milli == 3000 and twin.idle_gpu_milli == 2000


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_apply_placements_and_its_errors(tmp_path: Path) -> None:
    pods = load_pod_list(
        write(
            tmp_path / "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
            "p-half,1000,0,1,500,\np-two,1000,0,2,1000,\np-cpu,3000,0,0,0,\n"
            "p-t4,100,0,1,1000,T4\n",
        )
    )
    state = small()
    placements = load_placements(
        write(tmp_path / "ok.csv", "pod,node,gpu_index\np-half,a,1\np-two,b,\np-cpu,cpu,\n")
    )
    with pytest.raises(ParseError, match=r"line 3: cannot place .* 'b': needs 2 distinct"):
        apply_placements(state, pods, placements)

    cases = {
        "pod,node\nghost,a\n": "line 2: unknown pod 'ghost'",
        "pod,node\np-cpu,zz\n": "line 2: unknown node 'zz'",
        "pod,node\np-half,a\n": "give its gpu_index",
        "pod,node,gpu_index\np-half,a,0\np-half,a,1\n": "line 3: pod 'p-half' already placed",
        "pod,node\np-t4,a\n": "GPU model V100 not among allowed T4",
        "pod,node,gpu_index\np-half,a,5\n": "GPU index 5 out of range 0-1",
    }
    for i, (text, message) in enumerate(cases.items()):
        with pytest.raises(ParseError, match=message):
            apply_placements(small(), pods, load_placements(write(tmp_path / f"{i}.csv", text)))

    state = small()
    count = apply_placements(
        state,
        pods,
        load_placements(
            write(tmp_path / "good.csv", "pod,node,gpu_index\np-two,a,\np-t4,b,0\np-cpu,cpu,\n")
        ),
    )
    assert count == 3
    np.testing.assert_array_equal(state.gpu_free_milli[:2], [[0, 0], [0, 0]])
    assert state.cpu_free_milli.tolist() == [7000, 3900, 13000]
