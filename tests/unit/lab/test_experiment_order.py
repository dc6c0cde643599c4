"""Runs side by side start the costliest first, so a core never idles through a long run's
tail while the short ones are done (longest processing time first)."""

from __future__ import annotations

from sits_observe.lab.experiment.experiment import job_order, run_cost
from sits_observe.lab.experiment.settings import ExperimentSettings


def test_the_extender_and_controller_arms_cost_more_than_the_baseline() -> None:
    assert run_cost("kube-sits") > run_cost("kube-sits-no-controller") > run_cost("kube-default")


def test_side_by_side_the_costliest_runs_start_first_in_seed_order() -> None:
    settings = ExperimentSettings(arms=("kube-default", "kube-sits"), seeds=3, jobs=2)
    assert job_order(settings) == [
        ("kube-sits", 0),
        ("kube-sits", 1),
        ("kube-sits", 2),
        ("kube-default", 0),
        ("kube-default", 1),
        ("kube-default", 2),
    ]


def test_one_at_a_time_the_runs_go_seed_by_seed() -> None:
    settings = ExperimentSettings(arms=("kube-default", "kube-sits"), seeds=2, jobs=1)
    assert job_order(settings) == [
        ("kube-default", 0),
        ("kube-sits", 0),
        ("kube-default", 1),
        ("kube-sits", 1),
    ]
