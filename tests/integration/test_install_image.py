"""The agent image, replayed: no image can be built here (no engine, no registry), so the
Dockerfile's install steps run into a fresh venv and the result is checked for what the agent
image would import and weigh.

The Dockerfile keeps its install in one script (``deploy/image/install.sh``); the test reads
the Dockerfile for the Python version, the wheel step and the script's arguments, so the
replay cannot drift from the build. The replayed venv must carry none of the packages a GPU
node must not (DuckDB, Polars, Streamlit, scikit-learn, kmock, ...), must run a real agent
(``tests/agent_smoke.py``), must have been trimmed as the script says, and must weigh less
than the agent's budget (docs/install.md, "Images").
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
#: The agent venv's budget on disk (docs/install.md, "Images"); today's single install,
#: everything for every role, weighs about 1 GB.
AGENT_VENV_BUDGET_MB = 260

pytestmark = pytest.mark.slow


def dockerfile_lines() -> list[str]:
    """Instructions with continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def stages() -> dict[str, list[str]]:
    """Stage name -> its instructions."""
    found: dict[str, list[str]] = {}
    current = None
    for line in dockerfile_lines():
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            current = match.group(1)
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


def install_args(role: str) -> list[str]:
    """The install.sh arguments of ``role``'s build stage (ROLE VENV LOCK WHEEL_DIR)."""
    runs = [ln for ln in stages()[f"{role}-build"] if ln.startswith("RUN ")]
    assert len(runs) == 1, runs
    words = shlex.split(runs[0][4:])
    assert words[:2] == ["sh", "/build/install.sh"], words
    return words[2:]


def image_python() -> str:
    """An interpreter of the image's Python version (``ARG PYTHON_VERSION``)."""
    version = next(
        ln.split("=", 1)[1] for ln in dockerfile_lines() if ln.startswith("ARG PYTHON_VERSION=")
    )
    candidates = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    found = [str(p) for p in candidates] + [shutil.which(f"python{version}") or ""]
    found = [p for p in found if p]
    if not found:
        pytest.skip(f"no Python {version} (the image's) under ~/.pyenv or on PATH")
    return found[0]


def test_the_images_run_as_the_manifests_user_and_copy_only_what_the_context_holds() -> None:
    built = stages()
    for role, entry in (("agent", '["sits-observe-agent"]'), ("service", '["sits-observe"]')):
        final = built[role]
        assert "USER 65532:65532" in final, role
        assert f"ENTRYPOINT {entry}" in final, role
        assert any(ln.startswith("ENV ") and "PYTHONDONTWRITEBYTECODE=1" in ln for ln in final)
    assert install_args("agent")[0] == "agent"
    assert install_args("service")[0] == "service"
    # Every file a COPY takes from the context is let through by .dockerignore.
    allowed = {
        ln[1:].rstrip("/")
        for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if ln.startswith("!")
    }
    for line in dockerfile_lines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources = shlex.split(line)[1:-1]
            for source in sources:
                assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
                assert (ROOT / source).exists(), source


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agent stage's install, replayed: wheel step, then install.sh with its arguments."""
    work = tmp_path_factory.mktemp("agent-image")
    src = work / "src"  # a copy: building in the checkout would leave build/ behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "sits_observe", src / "sits_observe", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = work / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    role, venv, lock, wheel_dir = install_args("agent")
    assert (venv, wheel_dir) == ("/opt/sits-observe", "/wheels")
    target = work / "venv"
    result = subprocess.run(
        [
            "sh",
            str(ROOT / "deploy/image/install.sh"),
            role,
            str(target),
            str(ROOT / Path(lock).name),
            str(wheels),
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHON": image_python(), "HOME": str(work)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return target


def _python(venv: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin/python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_agent_image_runs_a_real_agent_and_carries_nothing_else(agent_venv: Path) -> None:
    smoke = subprocess.run(
        [str(agent_venv / "bin/python"), str(ROOT / "tests/agent_smoke.py"), "--slim"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert smoke.returncode == 0, smoke.stderr
    # No installer in the image, and what the script trims is really gone.
    assert _python(agent_venv, "import pip").returncode != 0
    assert _python(agent_venv, "import pyarrow.flight").returncode != 0
    assert _python(agent_venv, "import pyarrow.compute, pyarrow.ipc").returncode == 0


def test_the_agent_image_weighs_less_than_its_budget(agent_venv: Path) -> None:
    size_bytes = sum(p.stat().st_size for p in agent_venv.rglob("*") if p.is_file())
    size_mb = size_bytes / 1e6
    print(f"agent venv: {size_mb:.0f} MB")
    assert size_mb < AGENT_VENV_BUDGET_MB, f"{size_mb:.0f} MB"
