"""The experiment's worker processes start with one polars thread (``WORKER_ENV``)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import NoReturn

import pytest

from sits_observe.lab.experiment import experiment
from sits_observe.lab.experiment.experiment import WORKER_ENV, worker_environment
from sits_observe.lab.experiment.settings import ExperimentSettings


def _polars_threads() -> int:
    import polars

    return int(polars.thread_pool_size())


def test_a_worker_started_in_the_environment_has_one_polars_thread() -> None:
    assert WORKER_ENV["POLARS_MAX_THREADS"] == "1"
    context = multiprocessing.get_context("spawn")
    with (
        worker_environment(WORKER_ENV),
        ProcessPoolExecutor(max_workers=1, mp_context=context) as pool,
    ):
        assert pool.submit(_polars_threads).result(timeout=120) == 1


def test_the_environment_is_restored_and_the_users_value_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SITS_TEST_WORKER_VAR", raising=False)
    monkeypatch.setenv("SITS_TEST_USER_VAR", "4")
    values = {"SITS_TEST_WORKER_VAR": "1", "SITS_TEST_USER_VAR": "1"}
    with worker_environment(values):
        assert os.environ["SITS_TEST_WORKER_VAR"] == "1"
        assert os.environ["SITS_TEST_USER_VAR"] == "4"  # set by the user: kept
    assert "SITS_TEST_WORKER_VAR" not in os.environ
    assert os.environ["SITS_TEST_USER_VAR"] == "4"


class _Stop(Exception):
    pass


def test_run_experiment_starts_its_workers_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's workers start at its first submit: the environment must hold then."""
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    seen: list[str | None] = []

    class Pool(ProcessPoolExecutor):
        def submit(self, *args: object, **kwargs: object) -> NoReturn:
            seen.append(os.environ.get("POLARS_MAX_THREADS"))
            raise _Stop

    monkeypatch.setattr(experiment, "ProcessPoolExecutor", Pool)
    settings = ExperimentSettings(seeds=2, hours=0.01, nodes=1, jobs=2)
    assert settings.workers == 2
    with pytest.raises(_Stop):
        experiment.run_experiment(settings)
    assert seen == ["1"]
    assert "POLARS_MAX_THREADS" not in os.environ
