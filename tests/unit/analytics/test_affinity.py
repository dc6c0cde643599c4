"""Device affinity rules: the generation table, the rule file, and which rule a pod follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from sits_observe.analytics.topology.affinity import (
    AffinityRule,
    AffinityRules,
    allowed_products,
    generation_of,
    load_affinity_rules,
    parse_affinity_rules,
)
from sits_observe.errors import ConfigError

EXAMPLE = Path(__file__).parents[3] / "deploy" / "affinity-rules.yaml"


@pytest.mark.parametrize(
    ("product", "generation"),
    [
        # GPU Feature Discovery's label form, and NVML's name form.
        ("NVIDIA-H100-80GB-HBM3", "hopper"),
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA-H200", "hopper"),
        ("NVIDIA-GH200-480GB", "hopper"),
        ("NVIDIA-A100-SXM4-80GB", "ampere"),
        ("NVIDIA-A10G", "ampere"),
        ("NVIDIA-RTX-A6000", "ampere"),
        ("NVIDIA L40S", "ada"),
        ("NVIDIA-L4", "ada"),
        ("NVIDIA-RTX-6000-Ada-Generation", "ada"),
        ("NVIDIA-B200", "blackwell"),
        ("Tesla-T4", "turing"),
        ("Tesla-V100-SXM2-16GB", "volta"),
        ("Tesla-P100-PCIE-16GB", "pascal"),
        ("Ascend910B", "other:Ascend910B"),
        (None, "none"),
    ],
)
def test_generation_of_products(product: str | None, generation: str) -> None:
    assert generation_of(product) == generation


def test_product_tokens_do_not_match_inside_longer_names() -> None:
    # "A10" must not make an "A1000"-like or "XA100" product Ampere by accident.
    assert generation_of("XA100") == "other:XA100"
    assert generation_of("NVIDIA-H1000") == "other:NVIDIA-H1000"


RULES = AffinityRules(
    rules=(
        AffinityRule(model_pattern="llama-70b.*", generations=("hopper",), precisions=("fp8",)),
        AffinityRule(model_pattern="llama-70b.*", gpu_products="A100|H100", precisions=("bf16",)),
        AffinityRule(model_pattern="whisper-large-v3.*", gpu_products="A100.*80GB"),
    )
)


def test_first_rule_for_the_model_and_precision_decides() -> None:
    assert RULES.rule_for("llama-70b-instruct", "fp8") is RULES.rules[0]
    assert RULES.rule_for("llama-70b-instruct", "bf16") is RULES.rules[1]
    # No precision declared: the model alone picks the first rule.
    assert RULES.rule_for("Llama-70B-chat", None) is RULES.rules[0]
    # A precision no rule of the model is for, an unmatched model, no model: unconstrained.
    assert RULES.rule_for("llama-70b-instruct", "int4") is None
    assert RULES.rule_for("llama-8b", "fp8") is None
    assert RULES.rule_for(None, "fp8") is None
    # The pattern must match the whole name.
    assert RULES.rule_for("my-whisper-large-v3", None) is None


def test_allowed_products_by_rule() -> None:
    products = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]
    fp8 = allowed_products(RULES, "llama-70b", "fp8", products)
    assert fp8 is not None
    assert fp8.mask(products).tolist() == [False, False, True]
    bf16 = allowed_products(RULES, "llama-70b", "bf16", products)
    assert bf16 is not None
    assert bf16.mask(products).tolist() == [True, True, True]
    whisper = allowed_products(RULES, "whisper-large-v3-turbo", "fp16", products)
    assert whisper is not None
    assert whisper.mask(products).tolist() == [False, True, False]
    assert allowed_products(RULES, "resnet-50", None, products) is None


def test_products_and_generations_must_both_hold() -> None:
    rule = AffinityRule(model_pattern="m", gpu_products="80GB", generations=("ampere",))
    assert rule.allows("NVIDIA-A100-SXM4-80GB")
    assert not rule.allows("NVIDIA-H100-80GB-HBM3")  # 80GB, but Hopper
    assert not rule.allows("NVIDIA-A100-SXM4-40GB")  # Ampere, but 40GB
    assert not rule.allows(None)


def test_documents_keys_read(tmp_path: Path) -> None:
    """The documents' sits-config.yaml writes ``device_mapping`` and one ``precision``."""
    path = tmp_path / "rules.yaml"
    path.write_text(
        "device_mapping:\n"
        '  - model_pattern: "whisper-large-v3.*"\n'
        '    gpu_products: "A100.*80G"\n'
        '    precision: "FP16"\n',
        encoding="utf-8",
    )
    rules = load_affinity_rules(path)
    assert rules.rules[0].precisions == ("fp16",)
    assert rules.rule_for("whisper-large-v3", "fp16") is rules.rules[0]


def test_example_file_parses() -> None:
    rules = load_affinity_rules(EXAMPLE)
    assert rules.rules, "deploy/affinity-rules.yaml holds rules"
    rule = rules.rule_for("llama-3.1-70b-instruct", "fp8")
    assert rule is not None and rule.allows("NVIDIA-H200") and not rule.allows("NVIDIA-L40S")


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"rules": [{"model_pattern": "x"}]}, "give gpu_products"),
        ({"rules": [{"model_pattern": "x(", "generations": ["hopper"]}]}, "not a regular"),
        ({"rules": [{"model_pattern": "x", "gpu_products": "H100", "precisions": ["fp9"]}]}, "fp9"),
        ({"rules": [{"model_pattern": "x", "generations": ["kepler"]}]}, "generations"),
        ({"rules": [{"model_pattern": "x", "target_device": "a100-80g"}]}, "target_device"),
        ("just text", "expected a mapping"),
    ],
)
def test_bad_rules_are_config_errors(document: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_affinity_rules(document, source="rules.yaml")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read affinity rules"):
        load_affinity_rules(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not YAML"):
        load_affinity_rules(bad)


def test_example_quantised_rule_keeps_to_inference_gpus() -> None:
    rule = load_affinity_rules(EXAMPLE).rule_for("bert-base-quant-v2", "int8")
    assert rule is not None
    assert [rule.allows(p) for p in ("NVIDIA-A10G", "NVIDIA L4", "Tesla-T4")] == [True] * 3
    assert not rule.allows("NVIDIA-A100-SXM4-80GB")
    assert not rule.allows("NVIDIA-H100-80GB-HBM3")


def test_config_map_without_the_rules_key_is_refused() -> None:
    document = {"kind": "ConfigMap", "data": {"a.yaml": "rules: []", "b.yaml": "rules: []"}}
    with pytest.raises(ConfigError, match=r"needs the key affinity-rules\.yaml"):
        parse_affinity_rules(document)
    single = {"kind": "ConfigMap", "data": {"rules.yaml": "rules: []"}}
    assert parse_affinity_rules(single) == AffinityRules()
