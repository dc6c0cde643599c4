"""Workload variants (analytics.traces_variants): each knob moves what it names, and only that."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.analytics.traces.cluster_trace import NodeList, PodList
from sits_observe.analytics.traces.variants import make_variant
from sits_observe.errors import ConfigError
from tests.unit.lab.test_schedsim import synthetic_trace

NODES, PODS = synthetic_trace(nodes=24, pods=4000, seed=11)
GPU = PODS.num_gpu > 0


def _share(pods: PodList) -> float:
    gpu = pods.num_gpu > 0
    return float(((pods.num_gpu == 1) & (pods.gpu_milli < 1000))[gpu].mean())


def test_default_is_the_list_itself() -> None:
    assert make_variant(PODS, NODES, "default") is PODS


def test_cpu_scales_the_cpu_only_request_and_keeps_the_gpu_pods() -> None:
    doubled = make_variant(PODS, NODES, "cpu200", seed=1)
    gpu = doubled.num_gpu > 0
    before = PODS.cpu_milli[~GPU].sum()
    assert 2.0 <= doubled.cpu_milli[~gpu].sum() / before < 2.0 + 8000 / before
    assert int(gpu.sum()) == int(GPU.sum())


def test_gpushare_sets_the_share_of_sharing_pods() -> None:
    assert _share(make_variant(PODS, NODES, "gpushare100", seed=1)) == 1.0
    assert _share(make_variant(PODS, NODES, "gpushare40", seed=1)) == pytest.approx(0.40, abs=0.03)


def test_multigpu_sets_the_share_of_the_gpu_request() -> None:
    pods = make_variant(PODS, NODES, "multigpu50", seed=2)
    request = pods.num_gpu * pods.gpu_milli
    assert request[pods.num_gpu > 1].sum() / request.sum() == pytest.approx(0.5, abs=0.04)


def test_gpuspec_constrains_that_share_of_gpu_pods_to_models_of_the_cluster() -> None:
    pods = make_variant(PODS, NODES, "gpuspec33", seed=3)
    gpu = pods.num_gpu > 0
    constrained = np.array([bool(t) for t in pods.gpu_types])
    assert constrained[gpu].mean() == pytest.approx(0.33, abs=0.03)
    assert not constrained[~gpu].any()
    assert {t[0] for t in pods.gpu_types if t} <= set(NODES.gpu_model)


def test_the_same_seed_gives_the_same_variant_and_names_stay_unique() -> None:
    one = make_variant(PODS, NODES, "gpushare60", seed=5)
    two = make_variant(PODS, NODES, "gpushare60", seed=5)
    assert np.array_equal(one.gpu_milli, two.gpu_milli)
    assert len(set(one.names)) == len(one)


@pytest.mark.parametrize("name", ["gpushare", "gpushare101", "half", "cpu-5"])
def test_a_bad_name_is_a_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match=r"variant|at most"):
        make_variant(PODS, NODES, name)


def test_a_variant_needs_pods_of_its_kind() -> None:
    no_cpu_only = PodList(
        ("a",), np.array([1000]), np.array([1024]), np.array([1]), np.array([1000]), ((),)
    )
    nodes = NodeList(("n",), np.array([8000]), np.array([8192]), np.array([1]), ("T4",))
    with pytest.raises(ConfigError, match="CPU-only"):
        make_variant(no_cpu_only, nodes, "cpu200")
