"""The garbage collector paused while a command starts (sits_observe.surfaces.cli.startup)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sits_observe.surfaces.cli import startup


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    yield
    startup.resume_collection()
    gc.unfreeze()
    gc.enable()


def test_pause_then_resume_freezes_what_exists() -> None:
    startup.pause_collection()
    assert not gc.isenabled()
    made_while_paused = [[i] for i in range(100)]
    startup.resume_collection()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made_while_paused)


def test_resume_leaves_a_collector_it_did_not_turn_off() -> None:
    gc.disable()  # turned off by someone else
    startup.pause_collection()
    startup.resume_collection()
    assert not gc.isenabled()  # still theirs to turn on
    assert gc.get_freeze_count() == 0


def test_main_turns_it_back_on_before_a_command_other_than_serve_runs() -> None:
    """In a fresh interpreter, through ``main``: ``fleet --help`` exits inside the command,
    with the collector on again (``serve``'s own resume: tests/integration/
    test_serve_collector.py)."""
    probe = """
import atexit, gc, sys
from sits_observe.surfaces.cli import main as cli
atexit.register(lambda: print("enabled" if gc.isenabled() else "paused", file=sys.stderr))
sys.argv = ["sits-observe", *sys.argv[1:]]
cli.main()
"""
    done = subprocess.run(
        [sys.executable, "-c", probe, "fleet", "--help"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("enabled")
