"""The agent smoke test that ``make smoke`` runs on Python 3.12 and 3.13, run here on the
suite's interpreter: it passes with a real agent, and its slim check fails on an install that
carries the service's packages (this venv), naming them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SMOKE = Path(__file__).resolve().parents[1] / "agent_smoke.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SMOKE), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_smoke_test_runs_a_real_agent() -> None:
    result = run()
    assert result.returncode == 0, result.stderr
    assert "passed" in result.stdout


def test_the_slim_check_fails_on_an_install_with_the_store_and_the_service() -> None:
    result = run("--slim")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "FAILED: the agent's install carries duckdb, polars" in line
