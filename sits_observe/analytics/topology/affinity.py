"""Heterogeneous device affinity: which GPU products a model may run on, at which precision.

The source documents ask that a model be bound to the GPU type and precision it was sized for
("FP16 large models bound to A100-80G, quantised models elsewhere") and that GPU generations
not be mixed in one job (a job spread over two generations runs at the pace of the slower one
and contends for PCIe bandwidth). Their example configuration maps model-name patterns to a
target device and a precision (``device_mapping: [{model_pattern, target_device,
precision}]``); :class:`AffinityRules` is that list, typed:

- ``model_pattern``: a regex that must match the *whole* model name (``llama-70b.*``),
  case-insensitive, as the documents' patterns are written;
- ``gpu_products``: a regex searched in the node's GPU product (the ``nvidia.com/gpu.product``
  label, ``NVIDIA-H100-80GB-HBM3``), case-insensitive; and/or ``generations``: the GPU
  generations allowed (:data:`GENERATIONS`). A node is allowed when it satisfies both where
  both are given;
- ``precisions``: the precisions the rule is for (empty: any). A pod that declares a
  precision matches only rules for it (or for any); a pod that declares none matches on its
  model alone.

The first rule that matches a pod decides (order rules most specific first); a pod whose model
matches no rule, or that names no model, is unconstrained. A pod names its model and
precision in the ``sits.io/model`` / ``sits.io/precision`` label or annotation
(:mod:`sits_observe.collectors.kube.gpu_stack`). The extender's filter enforces the rules
(:mod:`sits_observe.control.extender.scoring`); the ``affinity`` report finds pods placed
against them and workloads spread over GPU generations (:mod:`sits_observe.analytics.
affinity_placement`).

Generations are NVIDIA's architecture names, by product, from NVIDIA's CUDA GPU list
(developer.nvidia.com/cuda-gpus: Pascal 6.x, Volta 7.0, Turing 7.5, Ampere 8.0/8.6, Ada 8.9,
Hopper 9.0, Blackwell 10.0/12.0). A product the table does not know is its own generation
(``other:<product>``), so two unknown products never count as one generation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sits_observe.errors import ConfigError

BoolArray = npt.NDArray[np.bool_]

#: The key of the rules file in a ConfigMap manifest (deploy/affinity-rules.yaml), the file
#: name it is mounted under.
CONFIG_MAP_KEY = "affinity-rules.yaml"

Generation = Literal["pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]

#: Precision classes a rule may name (lower case): the numeric formats inference and training
#: stacks declare (vLLM ``--dtype`` / ``--quantization``, TensorRT-LLM build precisions).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8", "int4")

# A product token: not preceded or followed by a letter or digit ("H100" in
# "NVIDIA-H100-80GB-HBM3" and "NVIDIA H100 PCIe", not in "XH1000").
_A, _Z = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
#: (generation, regex of its products), newest first; data-centre and workstation parts as
#: GPU Feature Discovery and NVML name them.
GENERATIONS: tuple[tuple[Generation, str], ...] = (
    ("blackwell", rf"{_A}(GB|B)(100|200|300){_Z}|RTX[ -]PRO[ -]\d000|{_A}RTX[ -]50\d0{_Z}"),
    ("hopper", rf"{_A}(GH|H)(100|200|800|20){_Z}"),
    ("ada", rf"{_A}L(4|20|40|40S|40G){_Z}|RTX[ -]\d000[ -]Ada|{_A}RTX[ -]40\d0{_Z}"),
    (
        "ampere",
        rf"{_A}A(100|800|40|30|16|10|10G|10M|2){_Z}|{_A}RTX[ -]A\d{{3,4}}{_Z}|{_A}RTX[ -]30\d0{_Z}",
    ),
    ("turing", rf"{_A}T4{_Z}|{_A}RTX[ -]20\d0{_Z}|Quadro[ -]RTX"),
    ("volta", rf"{_A}V100S?{_Z}|TITAN[ -]V{_Z}"),
    ("pascal", rf"{_A}P(100|40|4|6){_Z}"),
)
_GENERATION_RES = tuple((g, re.compile(p, re.IGNORECASE)) for g, p in GENERATIONS)


def generation_of(product: str | None) -> str:
    """The GPU generation of ``product`` (``hopper``); ``other:<product>`` when the table
    does not know it, ``none`` without a product."""
    if not product:
        return "none"
    for generation, regex in _GENERATION_RES:
        if regex.search(product):
            return generation
    return f"other:{product}"


def _regex(value: str, what: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{what} {value!r} is not a regular expression: {exc}") from None
    return value


class AffinityRule(BaseModel):
    """One model pattern and the GPUs (and precisions) it is for."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    model_pattern: str = Field(
        ..., min_length=1, description="regex the whole model name must match (case-insensitive)"
    )
    gpu_products: str | None = Field(
        None,
        min_length=1,
        description="regex searched in the node's GPU product (nvidia.com/gpu.product)",
    )
    generations: tuple[Generation, ...] = Field(
        (), description="GPU generations allowed (empty: any the product regex allows)"
    )
    precisions: tuple[str, ...] = Field(
        (),
        validation_alias=AliasChoices("precisions", "precision"),
        description=f"precisions the rule is for ({', '.join(PRECISIONS)}; empty: any)",
    )

    @field_validator("precisions", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]  # the documents write one precision per entry
        if isinstance(value, list | tuple):
            return tuple(str(v).strip().lower() for v in value)
        return value

    @model_validator(mode="after")
    def _valid(self) -> AffinityRule:
        _regex(self.model_pattern, "model_pattern")
        if self.gpu_products is not None:
            _regex(self.gpu_products, "gpu_products")
        if self.gpu_products is None and not self.generations:
            raise ValueError(
                f"rule for {self.model_pattern!r} allows every GPU: give gpu_products "
                "(a regex of GPU products) or generations"
            )
        unknown = [p for p in self.precisions if p not in PRECISIONS]
        if unknown:
            raise ValueError(
                f"unknown precision(s) {', '.join(unknown)}; the precisions are "
                f"{', '.join(PRECISIONS)}"
            )
        return self

    def applies_to(self, model: str, precision: str | None) -> bool:
        """Whether this rule is the one for a pod of ``model`` at ``precision``."""
        if not re.fullmatch(self.model_pattern, model, re.IGNORECASE):
            return False
        return precision is None or not self.precisions or precision in self.precisions

    def allows(self, product: str | None) -> bool:
        """Whether a node of GPU ``product`` satisfies the rule."""
        if not product:
            return False
        if self.gpu_products is not None and not re.search(
            self.gpu_products, product, re.IGNORECASE
        ):
            return False
        return not self.generations or generation_of(product) in self.generations

    def describe(self) -> str:
        """The rule in one line, for filter messages and reports."""
        parts = []
        if self.gpu_products is not None:
            parts.append(f"products /{self.gpu_products}/")
        if self.generations:
            parts.append(f"generations {'|'.join(self.generations)}")
        at = f" at {'|'.join(self.precisions)}" if self.precisions else ""
        return f"{self.model_pattern}{at} -> {' and '.join(parts)}"


class AffinityRules(BaseModel):
    """The device affinity rules, in order (the first that applies to a pod decides)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    rules: tuple[AffinityRule, ...] = Field(
        (),
        # The documents' own key for the list (sits-config.yaml) reads as well.
        validation_alias=AliasChoices("rules", "device_mapping"),
        description="model pattern -> GPU products / generations and precisions",
    )

    def rule_for(self, model: str | None, precision: str | None) -> AffinityRule | None:
        """The rule a pod of ``model`` at ``precision`` follows (None: unconstrained)."""
        if model is None:
            return None
        return next((r for r in self.rules if r.applies_to(model, precision)), None)


@dataclass(frozen=True)
class Allowed:
    """Per GPU product: may the pod run there, under which rule."""

    rule: AffinityRule
    by_product: Mapping[str, bool]

    def mask(self, products: Sequence[str]) -> BoolArray:
        """One bool per product of ``products``."""
        return np.array([self.by_product[p] for p in products], dtype=np.bool_)


def allowed_products(
    rules: AffinityRules, model: str | None, precision: str | None, products: Sequence[str]
) -> Allowed | None:
    """Which of ``products`` a pod of ``model`` / ``precision`` may use (None: any)."""
    rule = rules.rule_for(model, precision)
    if rule is None:
        return None
    return Allowed(rule, {p: rule.allows(p) for p in products})


def parse_affinity_rules(document: Any, *, source: str = "affinity rules") -> AffinityRules:
    """The rules of a parsed YAML / JSON document; a :class:`ConfigError` names the bad
    entry."""
    if document is None:
        document = {}
    if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        document = _from_config_map(document, source)
    if isinstance(document, list):
        document = {"rules": document}
    if not isinstance(document, Mapping):
        raise ConfigError(f"{source}: expected a mapping with a 'rules' list, got {document!r}")
    try:
        return AffinityRules.model_validate(dict(document))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise ConfigError(
            f"{source}: {problems} (each rule: model_pattern, gpu_products and/or "
            "generations, optional precisions; docs/extender.md 'Device affinity')"
        ) from None


def _from_config_map(document: Mapping[str, Any], source: str) -> Any:
    """The rules document inside a ConfigMap manifest (deploy/affinity-rules.yaml): its
    ``affinity-rules.yaml`` key, or its one key."""
    import yaml  # here, as in load_affinity_rules

    data = document.get("data")
    data = data if isinstance(data, Mapping) else {}
    text = data.get(CONFIG_MAP_KEY, next(iter(data.values())) if len(data) == 1 else None)
    if not isinstance(text, str):
        raise ConfigError(
            f"{source}: a ConfigMap of affinity rules needs the key {CONFIG_MAP_KEY} "
            f"(it has {', '.join(map(str, data)) or 'no data'})"
        )
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: {CONFIG_MAP_KEY} is not YAML: {exc}") from exc


#: The example rules, shipped with the package (the same manifest as the repository's
#: deploy/affinity-rules.yaml): ``example`` names them wherever a rules file is asked for.
EXAMPLE_RULES = Path(__file__).with_name("affinity-rules.yaml")
EXAMPLE = "example"


def load_affinity_rules(path: str | Path) -> AffinityRules:
    """The rules in the YAML file ``path``: a rules document, or a ConfigMap manifest holding
    one; ``example`` is the example the package ships (:data:`EXAMPLE_RULES`).

    yaml is imported here, not at the top: ``serve`` imports this module (the extender's
    scoring) before its port is up, and needs yaml only when it is given a rules file."""
    import yaml

    if str(path) == EXAMPLE:
        path = EXAMPLE_RULES
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read affinity rules {path}: {exc.strerror or exc}; '{EXAMPLE}' reads the "
            f"example rules the package ships ({EXAMPLE_RULES})"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"affinity rules {path} are not YAML: {exc}") from exc
    return parse_affinity_rules(document, source=f"affinity rules {path}")
