"""Strict parsers of the cgroup v2 interface files the container collector reads.

Formats (Linux ``Documentation/admin-guide/cgroup-v2.rst``, "Interface Files" and "PSI"):

- single value: ``memory.current`` is one unsigned integer in bytes.
- ``memory.max``: bytes, or ``max`` for no limit.
- flat keyed: ``memory.stat``, ``memory.events``, ``cpu.stat`` are ``<key> <value>`` lines;
  entries may appear in any order and new ones appear between kernel releases, so values are
  looked up by key and unknown lines are ignored.
- ``cpu.max``: ``<quota> <period>`` in microseconds, quota ``max`` for no limit.
- pressure (PSI): ``some avg10=0.00 avg60=0.00 avg300=0.00 total=0`` and a ``full`` line;
  ``avgN`` are percentages of wall time with two decimals, ``total`` is microseconds.

Numbers are accepted only as plain ASCII digits (Python's ``int()`` would also take ``+5``,
``1_000`` and surrounding blanks) and must fit in a signed 64-bit column. Every parser raises
:class:`ParseError` or reports bad entries; none raises anything else on any text.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from sits_observe.errors import ParseError

INT64_MAX = (1 << 63) - 1
_PERCENT = r"([0-9]{1,3}(?:\.[0-9]{1,6})?)"
# The kernel prints "%s avg10=%lu.%02lu avg60=%lu.%02lu avg300=%lu.%02lu total=%llu".
_PSI_LINE = re.compile(
    rf"(some|full) avg10={_PERCENT} avg60={_PERCENT} avg300={_PERCENT} total=([0-9]{{1,20}})"
)


@dataclass(frozen=True, slots=True)
class Pressure:
    """One PSI line: share of wall time stalled over 10/60/300 s (0-1), and total stall."""

    avg10_ratio: float
    avg60_ratio: float
    avg300_ratio: float
    total_s: float


@dataclass(frozen=True, slots=True)
class KeyedValues:
    """Values read from a flat-keyed file, for the keys asked for.

    A key in ``malformed`` was present with a value that is not an unsigned integer; a key in
    neither ``values`` nor ``malformed`` was absent.
    """

    values: dict[str, int]
    malformed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PressureLines:
    """The lines of a PSI file by kind (``some`` / ``full``), and how many lines were bad."""

    lines: dict[str, Pressure]
    malformed: int = 0


def parse_uint(text: str) -> int:
    """``text`` (digits only) as an int that fits int64; raises :class:`ParseError`."""
    if not (text.isascii() and text.isdigit()):
        raise ParseError(f"expected an unsigned integer, got {text[:40]!r}")
    value = int(text)
    if value > INT64_MAX:
        raise ParseError(f"value {text[:40]} exceeds the int64 range (max {INT64_MAX})")
    return value


def parse_single_value(text: str) -> int:
    """A one-value file such as ``memory.current``: the integer on its single line."""
    return parse_uint(_one_line(text))


def parse_memory_max(text: str) -> int | None:
    """``memory.max``: the limit in bytes, None for ``max`` (unlimited)."""
    line = _one_line(text)
    if line == "max":
        return None
    return parse_uint(line)


def parse_cpu_max(text: str) -> float | None:
    """``cpu.max``: the limit in cores (quota / period), None when the quota is ``max``."""
    fields = _one_line(text).split(" ")
    if len(fields) != 2:
        raise ParseError(f"cpu.max must be '<quota> <period>', got {text[:40]!r}")
    quota, period_text = fields
    period_us = parse_uint(period_text)
    if period_us == 0:
        raise ParseError("cpu.max period is 0 microseconds; the kernel allows 1000 and above")
    if quota == "max":
        return None
    quota_us = parse_uint(quota)
    if quota_us == 0:
        raise ParseError("cpu.max quota is 0 microseconds; the kernel allows 1000 and above")
    return quota_us / period_us


def parse_flat_keyed(text: str, keys: Collection[str]) -> KeyedValues:
    """The unsigned values of ``keys`` in a flat-keyed file (first line of each key wins).

    Each key is found with one substring search instead of splitting every line: memory.stat
    has some 40 lines and the collector wants three of them, 200 times a second.
    """
    values: dict[str, int] = {}
    malformed: list[str] = []
    for key in keys:
        needle = key + " "
        if text.startswith(needle):
            start = len(needle)
        else:
            found = text.find("\n" + needle)
            if found < 0:
                continue
            start = found + 1 + len(needle)
        end = text.find("\n", start)
        try:
            values[key] = parse_uint(text[start:] if end < 0 else text[start:end])
        except ParseError:
            malformed.append(key)
    return KeyedValues(values, tuple(malformed))


def parse_pressure(text: str) -> PressureLines:
    """A PSI file (``memory.pressure``, ``cpu.pressure``): its lines by kind."""
    lines: dict[str, Pressure] = {}
    malformed = 0
    for line in text.split("\n"):
        if not line:
            continue
        m = _PSI_LINE.fullmatch(line)
        if m is None:
            malformed += 1
            continue
        kind, avg10, avg60, avg300, total = m.groups()
        ratios = (float(avg10) / 100.0, float(avg60) / 100.0, float(avg300) / 100.0)
        total_us = int(total)
        if max(ratios) > 1.0 or total_us > INT64_MAX:
            malformed += 1
            continue
        lines[kind] = Pressure(ratios[0], ratios[1], ratios[2], total_us / 1e6)
    return PressureLines(lines, malformed)


def _one_line(text: str) -> str:
    """The content of a one-line file without its newline; extra lines are an error."""
    line = text[:-1] if text.endswith("\n") else text
    if "\n" in line:
        raise ParseError(f"expected one line, got {text[:40]!r}")
    return line
