"""Agent install: size on disk and memory of the node agent, before and after the extras.

Two installs of the agent, each into a fresh venv under a temporary directory:

- ``before``: the package as it was at ``--before-rev`` (default ``1aee510``, the last
  commit with one dependency list for every role), ``pip install``-ed with that commit's
  ``requirements.lock`` as constraints: what a GPU node had to install.
- ``after``: this tree through ``deploy/image/install.sh agent`` (the agent image's only
  install step: the ``agent`` extra from ``requirements-agent.lock``, no pip, pyarrow
  trimmed), with the image's Python (``ARG PYTHON_VERSION`` of the Dockerfile).

Measured for each: the venv's size on disk (every file, MB = 10^6 bytes), and the agent's
RSS (peak ``VmHWM`` and current ``VmRSS``) while it runs the workload of
``bench_agent_cost.py`` (8 GPUs of dcgm-exporter's default counters over loopback HTTP, 200
container cgroups, one batch a second to a real ``sits-observe serve``), started as the
DaemonSet starts it (``python -m sits_observe.surfaces.cli.agent``). Medians of ``--runs``
runs of ``--seconds`` each. ``--write-docs`` puts the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench_agent_cost import Rig, Usage, measure, status_kb, stop

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- agent-install:begin -->", "<!-- agent-install:end -->"


def size_mb(path: Path) -> float:
    return (
        sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6
    )


def run(args: list[str], **kwargs: object) -> None:
    subprocess.run(args, check=True, **kwargs)  # type: ignore[call-overload]


def image_python() -> str:
    text = (ROOT / "Dockerfile").read_text()
    version = next(
        ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("ARG PYTHON_VERSION=")
    )
    found = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    return str(found[0]) if found else shutil.which(f"python{version}") or sys.executable


def before_install(work: Path, rev: str) -> Path:
    """The old single install: the package at ``rev`` with all of its dependencies."""
    src = work / "before-src"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "pyproject.toml", "README.md", "sits_observe"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    lock = work / "before.lock"
    lock.write_bytes(
        subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:requirements.lock"],
            check=True,
            capture_output=True,
        ).stdout
    )
    venv = work / "before"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin/pip"), "install", "--quiet", "-c", str(lock), str(src)])
    return venv


def after_install(work: Path, python: str, name: str) -> Path:
    """This tree's agent image install (deploy/image/install.sh agent) with ``python``."""
    src = work / f"{name}-src"
    src.mkdir()
    for file in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / file, src / file)
    shutil.copytree(
        ROOT / "sits_observe", src / "sits_observe", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = work / f"{name}-wheels"
    run(
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
        ]
    )
    venv = work / name
    run(
        [
            "sh",
            str(ROOT / "deploy/image/install.sh"),
            "agent",
            str(venv),
            str(ROOT / "requirements-agent.lock"),
            str(wheels),
        ],
        env={**os.environ, "PYTHON": python},
    )
    return venv


@dataclass
class Memory:
    """One run: CPU and RSS (``Usage``), and RSS split into anonymous and file-backed."""

    usage: Usage
    anon_mb: float
    file_mb: float


def agent_usage(rig: Rig, venv: Path, seconds: float, warmup_s: float) -> Memory:
    entry = [str(venv / "bin/python"), "-m", "sits_observe.surfaces.cli.agent"]
    proc = rig.agent(entry, uuid.uuid4().hex[:8])
    try:
        usage = measure({"agent": proc}, seconds, warmup_s, set())[0]["agent"]
        anon, file = (status_kb(proc.pid, key) / 1024 for key in ("RssAnon", "RssFile"))
        return Memory(usage, anon, file)
    finally:
        stop(proc)


def python_version(venv: Path) -> str:
    return subprocess.run(
        [str(venv / "bin/python"), "-c", "import platform; print(platform.python_version())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def markdown(rows: dict[str, tuple[float, list[Memory], str]], args: argparse.Namespace) -> str:
    lines = [
        f"The node agent's install before the extras (`pip install` of the package at "
        f"`{args.before_rev}`, every dependency of every role) and after (the agent image's "
        "install, `deploy/image/install.sh agent`: the `agent` extra, no pip, pyarrow trimmed). "
        "Size is every file of the venv; RSS is the agent's, started as the DaemonSet starts it "
        "(`python -m sits_observe.surfaces.cli.agent`), on `bench_agent_cost.py`'s workload "
        "(8 GPUs over loopback HTTP, 200 container cgroups, a batch a second to a real "
        f"`serve`). Medians of {args.runs} runs of {args.seconds:.0f} s after a "
        f"{args.warmup:.0f} s warm-up.",
        "",
        "| install | Python | venv on disk MB | agent peak RSS MB | RSS anonymous MB "
        "| RSS file-backed MB | CPU % of one core |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (mb, runs, version) in rows.items():
        peak = statistics.median(r.usage.peak_rss_mb for r in runs)
        anon = statistics.median(r.anon_mb for r in runs)
        file = statistics.median(r.file_mb for r in runs)
        cpu = statistics.median(r.usage.cpu_pct for r in runs)
        lines.append(
            f"| {name} | {version} | {mb:.0f} | {peak:.0f} | {anon:.0f} | {file:.0f} | {cpu:.2f} |"
        )
    lines += [
        "",
        "RSS anonymous is the agent's own memory (heap, arenas, Arrow buffers). RSS "
        "file-backed is the mapped pages of the shared libraries (libarrow alone maps 47 MB), "
        "and depends on how those files sit in the page cache, not only on what is loaded: the "
        "same venv measured 25-30 MB more file-backed RSS right after one pip version wrote "
        "it than after another did. Compare installs on the anonymous column.",
        f"Command: `.venv/bin/python bench/bench_agent_install.py --runs {args.runs} --seconds "
        f"{args.seconds:.0f}`. Machine: {os.cpu_count()} cores.",
    ]
    return "\n".join(lines)


def write_docs(section: str) -> None:
    text = DOCS.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{section}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-rev", default="1aee510")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sits-agent-install-") as tmp:
        work = Path(tmp)
        venvs = {
            "before": before_install(work, args.before_rev),
            # Same interpreter as before, then the image's.
            "after": after_install(work, sys.executable, "after"),
            "after, image Python": after_install(work, image_python(), "after-image"),
        }
        (work / "rig").mkdir()
        rig = Rig(work / "rig")
        try:
            rows = {}
            for name, venv in venvs.items():
                usages = [
                    agent_usage(rig, venv, args.seconds, args.warmup) for _ in range(args.runs)
                ]
                rows[name] = (size_mb(venv), usages, python_version(venv))
                print(
                    f"{name}: {rows[name][0]:.0f} MB, peak RSS "
                    f"{[round(u.usage.peak_rss_mb) for u in usages]}, anon "
                    f"{[round(u.anon_mb) for u in usages]}",
                    file=sys.stderr,
                )
        finally:
            rig.close()
    section = markdown(rows, args)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
