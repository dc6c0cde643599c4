"""The command-line reference (docs/cli.md), written from the commands themselves.

``python -m sits_observe.surfaces.cli.reference > docs/cli.md`` rewrites it; a test checks
the file is what this module writes, so the reference cannot drift from ``--help``. Another
test checks every ``sits-observe ...`` example in the README and docs/ against the flags the
command has (:func:`command_flags`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

import sits_observe

HEADER = """# Command-line reference

Written from the commands by `python -m sits_observe.surfaces.cli.reference > docs/cli.md`
(a test checks it is current). Every read command (the reports) takes the same source, window
and output flags; see [README](../README.md) for examples and docs/analytics/ for what each
report computes.
"""


def walk(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("ingest dcgm", command)`` for every command under ``group``, in --help order."""
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            yield from walk(command, path + " ")
        else:
            yield path, command


def root() -> Any:
    """The ``sits-observe`` command tree as Typer builds it (a Click group)."""
    from sits_observe.surfaces.cli.main import app

    return typer.main.get_command(app)


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and not p.hidden]


def command_flags(command: Any) -> set[str]:
    """Every flag ``command`` accepts (``--no-x`` forms and ``--help`` included)."""
    flags = {"--help"}
    for param in _options(command):
        flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    return flags


#: The checkout the defaults point into (``deploy/scheduler-config.yaml``, the Streamlit app):
#: printed relative to it, so the reference reads the same from any clone.
REPO = str(Path(sits_observe.__file__).resolve().parents[1]) + "/"


def _cell(text: str) -> str:
    return " ".join(text.replace(REPO, "").split()).replace("|", "\\|")


def reference() -> str:
    """The whole reference as Markdown: per command its summary and, per flag, what
    ``--help`` says (metavar, help, default, environment variable)."""
    parts = [HEADER]
    top = root()
    for path, command in walk(top):
        parts.append(f"\n## `sits-observe {path}`\n\n")
        summary = (command.help or "").strip().split("\n\n")[0]
        parts.append(_cell(summary) + "\n")
        options = _options(command)
        if not options:
            continue
        context = command.make_context(path, [], resilient_parsing=True)
        parts.append("\n| flag | meaning |\n|---|---|\n")
        for param in options:
            record = param.get_help_record(context)
            if record is None:
                continue
            names, meaning = record
            parts.append(f"| `{_cell(names)}` | {_cell(meaning)} |\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(reference())
