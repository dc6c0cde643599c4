"""The docs match the flags: docs/cli.md is written from the commands, and every
``sits-observe ...`` example in the README and docs/ uses flags the command has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from sits_observe.surfaces.cli.main import kubectl_app
from sits_observe.surfaces.cli.reference import command_flags, reference, root, walk

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = ("sits-observe", "kubectl sits", "kubectl-sits")
FENCE = re.compile(r"^```")
INLINE = re.compile(r"`((?:sits-observe|kubectl sits) [^`]+)`")


def test_the_reference_is_current() -> None:
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == reference(), (
        "docs/cli.md is stale: python -m sits_observe.surfaces.cli.reference > docs/cli.md"
    )


def examples(path: Path) -> list[tuple[int, str]]:
    """``(line number, command line)`` of every sits-observe example in ``path``."""
    found: list[tuple[int, str]] = []
    in_code, pending, start = False, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if in_code:
            text = line.strip().removeprefix("$ ")
            if pending:
                pending += " " + text
            elif text.startswith(PROGRAMS):
                pending, start = text, number
            if pending and not pending.endswith("\\"):
                found.append((start, pending))
                pending = ""
            elif pending:
                pending = pending[:-1]
        else:
            found.extend((number, m.group(1)) for m in INLINE.finditer(line))
    return found


def _tokens(line: str) -> list[str]:
    text = line.split(" # ", 1)[0].split(" | ", 1)[0]
    text = re.sub(r"\s#\s.*$", "", text)
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        words = text.split()
    return [w.strip("[]()") for w in words if w.strip("[]()")]


def test_the_checker_catches_what_it_should() -> None:
    assert check("sits-observe heatmap --window-s 1") == "heatmap has no flag --window-s"
    assert check("sits-observe ingest dcgm --nope") == "ingest dcgm has no flag --nope"
    assert check("kubectl sits serve --db x") == "no command 'serve'"
    assert check("sits-observe smf --db d.duckdb --until newest -o wide") is None


COMMANDS = {path: command for path, command in walk(root())}
KUBECTL = {path: command for path, command in walk(typer.main.get_command(kubectl_app()))}
GROUPS = {"ingest"}


def check(line: str) -> str | None:
    """Why ``line`` is wrong (None when its command and flags exist)."""
    words = _tokens(line)
    kubectl = words[:2] == ["kubectl", "sits"] or words[:1] == ["kubectl-sits"]
    words = words[2:] if words[:2] == ["kubectl", "sits"] else words[1:]
    commands, groups = (KUBECTL, set()) if kubectl else (COMMANDS, GROUPS)
    if words and words[0].startswith("<"):  # a placeholder: sits-observe <report> --db
        return None
    path: list[str] = []
    for word in words:
        if word.startswith("-"):
            break
        if " ".join([*path, word]) in commands or " ".join([*path, word]) in groups:
            path.append(word)
        else:
            break
    name = " ".join(path)
    if not name:
        return None if not words or words[0].startswith("-") else f"no command {words[0]!r}"
    if name in groups:
        return None
    command = commands[name]
    flags = command_flags(command)
    for word in words[len(path) :]:
        if word == "--":
            break
        if word.startswith("-") and not word.startswith("---") and len(word) > 1:
            flag = word.split("=", 1)[0].rstrip(",.;:")
            if (flag.startswith("--") or len(flag) == 2) and flag not in flags:
                return f"{name} has no flag {flag}"
    return None


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_uses_flags_that_exist(path: Path) -> None:
    problems = [
        f"{path.name}:{n}: {why}: {line}" for n, line in examples(path) if (why := check(line))
    ]
    assert not problems, "\n".join(problems)
