"""Ablation: the arms that switch one module of ``kube-sits`` off, and what each module is worth
(``kube-sits`` minus the arm without it, seed by seed)."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.lab.experiment.experiment import ModuleWorth
from sits_observe.lab.experiment.measures import RunMeasures, differences
from sits_observe.lab.experiment.parts import ARMS
from sits_observe.lab.experiment.settings import (
    ABLATIONS,
    ARM_DOCS,
    RULES_OFF,
    ExperimentSettings,
)
from sits_observe.lab.experiment.table import ablation_rows


def measures(**values: float) -> RunMeasures:
    base = {f.name: 0.0 for f in fields(RunMeasures)}
    return RunMeasures(**{**base, **values})  # type: ignore[arg-type]


def test_each_ablation_arm_is_kube_sits_with_one_module_off() -> None:
    full = ARMS["kube-sits"]
    assert set(ABLATIONS) <= set(ARM_DOCS)
    for name in ABLATIONS:
        arm = ARMS[name]
        changed = [
            part
            for part, differs in (
                ("extender", arm.extender != full.extender),
                ("controller", arm.controller != full.controller),
                ("scoring", arm.extender_settings.scoring != full.extender_settings.scoring),
                ("gpu_hint", arm.extender_settings.gpu_hint != full.extender_settings.gpu_hint),
                ("bind", name == "kube-sits-nobind"),
                ("rules", arm.rules_off != full.rules_off),
            )
            if differs
        ]
        assert len(changed) == 1, (name, changed)
    scoring = ARMS["kube-sits-no-interference"].extender_settings.scoring
    assert scoring.interference_weight == 0 and scoring.fragmentation_weight > 0
    assert not ARMS["kube-sits-no-controller"].controller
    assert ARMS["kube-sits-with-namespace-quota"].rules_on == (
        "quota-gpu",
        "quota-cpu",
        "quota-memory",
    )
    assert "kube-sits-no-namespace-quota" not in ARMS  # off by default: kube-sits is that arm
    for name in RULES_OFF:  # every rule arm names real actions (the settings validate them)
        ControllerSettings(rules_off=ARMS[name].rules_off)
    assert ExperimentSettings(arms="kube-sits,kube-sits-no-fragmentation").arms == (
        "kube-sits",
        "kube-sits-no-fragmentation",
    )


def test_worth_is_the_full_arm_minus_the_arm_without_seed_by_seed() -> None:
    full = [measures(frag_ratio=0.30, wait_p95_s=10), measures(frag_ratio=0.20, wait_p95_s=4)]
    without = [
        measures(frag_ratio=0.40, wait_p95_s=12),
        measures(frag_ratio=0.25, wait_p95_s=math.nan),
    ]
    worth = differences(full, without)
    assert worth["frag_ratio"].mean == pytest.approx(-0.075)  # (-0.10 - 0.05) / 2
    assert (worth["frag_ratio"].low, worth["frag_ratio"].high) == pytest.approx((-0.10, -0.05))
    assert worth["wait_p95_s"].mean == -2  # the seed without a value is left out
    with pytest.raises(ValueError):
        differences(full, without[:1])
    rows = ablation_rows((ModuleWorth("kube-sits-no-x", "module x", worth),), seeds=2)
    assert rows[0]["FGD fragmentation"] == "-7.5 pp (-10.0 pp to -5.0 pp)"
    assert rows[0]["wait P95, s"] == "-2.00 (-2.00 to -2.00)"
    assert rows[0]["module switched off"] == "module x"
