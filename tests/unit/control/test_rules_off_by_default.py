"""Rules off by default where the controller writes: the fragmentation and memory-class label
rules and the namespace quota rule's three actions are neither recommended nor applied in
annotate and act mode unless ``rules_on`` names them; dry-run (and so ``recommend``) still
plans them."""

from __future__ import annotations

import pytest

from sits_observe.control.controller.settings import RULES_OFF_BY_DEFAULT, ControllerSettings


def test_the_label_rules_are_off_in_the_writing_modes_only() -> None:
    assert RULES_OFF_BY_DEFAULT == (
        "fragmentation",
        "memory-class",
        "quota-gpu",
        "quota-cpu",
        "quota-memory",
    )
    assert ControllerSettings().rules_off == ()
    for mode in ("annotate", "act"):
        assert ControllerSettings(mode=mode).rules_off == RULES_OFF_BY_DEFAULT


def test_rules_on_switches_it_back_on_and_rules_off_still_wins() -> None:
    on = ControllerSettings(mode="act", rules_on="memory-class")
    assert on.rules_off == ("fragmentation", "quota-gpu", "quota-cpu", "quota-memory")
    both = ControllerSettings(
        mode="act",
        rules_on=RULES_OFF_BY_DEFAULT,
        rules_off=("memory-class", "time-slice"),
    )
    assert set(both.rules_off) == {"memory-class", "time-slice"}
    ablation = ControllerSettings(mode="act", rules_off="time-slice")
    assert ablation.rules_off == ("time-slice", *RULES_OFF_BY_DEFAULT)
    # A round trip keeps the effective set.
    assert ControllerSettings(**ablation.model_dump()).rules_off == ablation.rules_off


def test_rules_on_takes_only_rules_that_are_off_by_default() -> None:
    with pytest.raises(ValueError, match="'time-slice' is not off by default"):
        ControllerSettings(rules_on="time-slice")
