"""Numbered schema migrations, applied in order by :meth:`Store.migrate`.

Each ``NNNN_name.sql`` file is one migration; the number is the schema version it produces.
A released file is never edited: change the schema by adding the next number.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class Migration:
    """One schema step."""

    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this build, in order."""
    found = []
    for entry in resources.files(__package__).iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration numbers must run 1..N without gaps, found {versions}")
    return tuple(found)


def latest_version() -> int:
    """The schema version this build produces."""
    return migrations()[-1].version
