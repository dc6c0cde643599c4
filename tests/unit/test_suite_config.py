"""The suite's own configuration: a background thread that dies fails its test.

pytest only warns about an exception in a thread by default, which is how a controller panic
once went unnoticed. pyproject.toml turns that warning into an error; this runs pytest with
the project's configuration on a test whose thread dies, and on one whose thread does not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _pytest(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_thread.py"
    test.write_text(f"import threading\n\n\ndef test_it():\n    {body}\n", encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(PYPROJECT),
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_thread_that_dies_fails_the_test(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "t = threading.Thread(target=lambda: 1 / 0); t.start(); t.join()")
    assert result.returncode == 1, result.stdout
    assert "PytestUnhandledThreadExceptionWarning" in result.stdout


def test_a_thread_that_ends_well_passes(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "t = threading.Thread(target=lambda: None); t.start(); t.join()")
    assert result.returncode == 0, result.stdout
