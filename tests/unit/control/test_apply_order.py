"""Under the write budget, the controller applies one decision of each action in turn, so a
rule that decides once per pod cannot take every token of a pass from the quota and
time-slice rules."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from sits_observe.control.controller.apply import interleaved


def decisions(*actions: str) -> list[Any]:
    return [SimpleNamespace(action=a, n=i) for i, a in enumerate(actions)]


def test_one_of_each_action_in_turn() -> None:
    plan = decisions("memory-class", "memory-class", "memory-class", "quota-gpu", "time-slice")
    order = interleaved(cast(list[Any], plan))
    assert [plan[i].action for i in order] == [
        "memory-class",
        "quota-gpu",
        "time-slice",
        "memory-class",
        "memory-class",
    ]
    assert sorted(order) == list(range(len(plan)))  # every decision once


def test_each_action_keeps_its_plan_order_and_an_empty_plan_is_empty() -> None:
    plan = decisions("a", "b", "a", "b", "a")
    order = interleaved(cast(list[Any], plan))
    assert order == [0, 1, 2, 3, 4]
    assert [plan[i].n for i in order if plan[i].action == "a"] == [0, 2, 4]
    assert interleaved([]) == []
