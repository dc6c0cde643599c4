"""The extender's filter with device affinity rules, on the hand-computed cluster of
:mod:`tests.unit.control.extender_support` (gpu-a, gpu-b, gpu-d: 8 x H100, Hopper; gpu-c:
4 x L40S, Ada; cpu-1: no GPU; gpu-d has no GPU free) and the pod as the wire reads it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sits_observe.analytics.topology.affinity import AffinityRule, AffinityRules
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.scoring import PodRequest, filter_nodes
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import parse_extender_args
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from tests.unit.control.extender_payloads import CANDIDATES, POD_1GPU_JSON, args_by_name
from tests.unit.control.extender_support import NOW, write_cluster

RULES = AffinityRules(
    rules=(
        AffinityRule(model_pattern="llama-70b.*", generations=("hopper",), precisions=("fp8",)),
        AffinityRule(model_pattern="llama-70b.*", gpu_products="L40S|H100", precisions=("bf16",)),
        AffinityRule(model_pattern="embed-.*", gpu_products="L40S"),
    )
)
WITH_RULES = ScoringSettings(affinity=RULES)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterView]:
    path: Path = tmp_path_factory.mktemp("affinity") / "cluster.duckdb"
    with Store.open(path) as store:
        write_cluster(store)
        yield build_view(store, NOW, ViewSettings())


def pod(model: str | None, precision: str | None = None, gpus: int = 1) -> PodRequest:
    return PodRequest("serve", "new", gpus, 1000, model=model, precision=precision)


def test_fp8_llama_is_kept_to_hopper(view: ClusterView) -> None:
    """gpu-c's L40S is Ada: unresolvable (evicting pods cannot change its GPU); gpu-d is
    Hopper but full: failed as before; the unknown node passes as before."""
    out = filter_nodes(pod("llama-70b-instruct", "fp8"), view, CANDIDATES, WITH_RULES)
    assert out.passing == ("gpu-a", "gpu-b", "new-node")
    assert set(out.failed) == {"gpu-d"}
    assert out.unresolvable == {
        "cpu-1": "node has no allocatable nvidia.com/gpu",
        "gpu-c": "node's GPU product NVIDIA L40S (ada) is not one the device affinity rule "
        "llama-70b.* at fp8 -> generations hopper allows for model llama-70b-instruct at fp8",
    }


def test_bf16_llama_follows_its_own_rule(view: ClusterView) -> None:
    out = filter_nodes(pod("llama-70b-instruct", "bf16"), view, CANDIDATES, WITH_RULES)
    assert out.passing == ("gpu-a", "gpu-b", "gpu-c", "new-node")
    assert set(out.unresolvable) == {"cpu-1"}


def test_undeclared_precision_takes_the_first_rule_of_the_model(view: ClusterView) -> None:
    out = filter_nodes(pod("llama-70b-instruct"), view, CANDIDATES, WITH_RULES)
    assert out.passing == ("gpu-a", "gpu-b", "new-node")
    assert set(out.unresolvable) == {"cpu-1", "gpu-c"}


def test_rule_excluding_the_h100s(view: ClusterView) -> None:
    """An embed-* pod may use only the L40S: every H100 node is unresolvable, gpu-d too
    (the GPU product is checked before free GPUs: preemption would not help there)."""
    out = filter_nodes(pod("embed-small"), view, CANDIDATES, WITH_RULES)
    assert out.passing == ("gpu-c", "new-node")
    assert set(out.unresolvable) == {"cpu-1", "gpu-a", "gpu-b", "gpu-d"}
    assert out.failed == {}
    assert "NVIDIA H100 80GB HBM3 (hopper)" in out.unresolvable["gpu-a"]
    assert out.unresolvable["gpu-a"].endswith("for model embed-small")


@pytest.mark.parametrize(
    "request_",
    [
        pod(None, "fp8"),  # names no model
        pod("resnet-50", "fp16"),  # matches no rule
        pod("llama-70b-instruct", "int4"),  # no rule for that precision
    ],
)
def test_unconstrained_pods_filter_as_without_rules(
    view: ClusterView, request_: PodRequest
) -> None:
    with_rules = filter_nodes(request_, view, CANDIDATES, WITH_RULES)
    without = filter_nodes(request_, view, CANDIDATES, ScoringSettings())
    assert with_rules == without
    assert with_rules.passing == ("gpu-a", "gpu-b", "gpu-c", "new-node")


def test_off_by_default(view: ClusterView) -> None:
    assert ScoringSettings().affinity is None
    out = filter_nodes(pod("embed-small"), view, CANDIDATES, ScoringSettings())
    assert out.passing == ("gpu-a", "gpu-b", "gpu-c", "new-node")


def test_cpu_only_pod_ignores_rules(view: ClusterView) -> None:
    out = filter_nodes(pod("embed-small", gpus=0), view, CANDIDATES, WITH_RULES)
    assert out.passing == tuple(CANDIDATES)


def test_settings_read_the_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "rules:\n  - model_pattern: 'embed-.*'\n    gpu_products: L40S\n", encoding="utf-8"
    )
    settings = ScoringSettings(affinity_file=path)
    assert settings.affinity == AffinityRules(
        rules=(AffinityRule(model_pattern="embed-.*", gpu_products="L40S"),)
    )
    with pytest.raises(ConfigError, match="cannot read affinity rules"):
        ScoringSettings(affinity_file=tmp_path / "missing.yaml")


def _with_meta(labels: dict[str, str], annotations: dict[str, str]) -> bytes:
    pod_json = json.loads(POD_1GPU_JSON)
    pod_json["metadata"]["labels"].update(labels)
    pod_json["metadata"].setdefault("annotations", {}).update(annotations)
    return args_by_name(json.dumps(pod_json)).encode()


def test_wire_reads_model_and_precision_annotation_over_label() -> None:
    call = parse_extender_args(
        _with_meta(
            {"sits.io/model": "label-model", "sits.io/precision": "FP16"},
            {"sits.io/model": "llama-70b-instruct"},
        )
    )
    assert call.pod.model == "llama-70b-instruct"
    assert call.pod.precision == "fp16"  # from the label, lower-cased


def test_wire_without_keys_declares_nothing() -> None:
    call = parse_extender_args(args_by_name(POD_1GPU_JSON).encode())
    assert call.pod.model is None and call.pod.precision is None
