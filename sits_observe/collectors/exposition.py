"""A strict, fast reader of the Prometheus text exposition format (version 0.0.4).

dcgm-exporter, vLLM and Triton all serve this format. The reader never raises for bad
input: a line it cannot read is dropped and counted under a reason, and the rest of the body
is still read (a truncated body loses only its last, partial line). Values are returned as
floats exactly as written, NaN and infinities included: whether a non-finite value is a
sample or a sentinel is the caller's decision.

Format reference: https://prometheus.io/docs/instrumenting/exposition_formats/
(``metric_name{label="value",...} value [timestamp_ms]``; label values escape ``\\``,
``\"`` and ``\n``; ``# HELP`` and ``# TYPE`` comment lines; other comments ignored).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|\Z)')
_ESCAPES = re.compile(r"\\(.)")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}

#: Labels of one sample, as (name, value) pairs in exposition order.
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposition line."""

    name: str
    labels: Labels
    value: float
    timestamp_ms: int | None = None

    def label(self, key: str, default: str | None = None) -> str | None:
        """The value of label ``key`` (``default`` when absent)."""
        for k, v in self.labels:
            if k == key:
                return v
        return default


@dataclass
class Exposition:
    """Everything read from one body."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPES.sub(lambda m: _UNESCAPE.get(m.group(1), "\\" + m.group(1)), value)


def _parse_labels(text: str) -> Labels | None:
    """``a="1",b="2"`` -> pairs; None when the text is not a valid label set."""
    labels: list[tuple[str, str]] = []
    pos = 0
    end = len(text)
    while pos < end:
        if text[pos:].strip() == "":
            break
        m = _LABEL.match(text, pos)
        if m is None:
            return None
        labels.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
        if m.group(3) == "":
            break
    return tuple(labels)


def _parse_value(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_exposition(text: str) -> Exposition:
    """Read a whole exposition body; see the module docstring for the error policy."""
    result = Exposition()
    seen: set[tuple[str, Labels]] = set()
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                result.types[parts[2]] = parts[3].strip()
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                result.dropped["malformed line"] += 1
                continue
            name = line[:brace].strip()
            labels = _parse_labels(line[brace + 1 : close])
            rest = line[close + 1 :].split()
        else:
            pieces = line.split()
            name, labels, rest = pieces[0], (), pieces[1:]
        if labels is None or not _NAME.match(name) or not 1 <= len(rest) <= 2:
            result.dropped["malformed line"] += 1
            continue
        value = _parse_value(rest[0])
        if value is None:
            result.dropped["malformed value"] += 1
            continue
        timestamp_ms: int | None = None
        if len(rest) == 2:
            try:
                timestamp_ms = int(rest[1])
            except ValueError:
                result.dropped["malformed timestamp"] += 1
                continue
        key = (name, labels)
        if key in seen:
            result.dropped["duplicate series"] += 1
            continue
        seen.add(key)
        result.samples.append(Sample(name, labels, value, timestamp_ms))
    return result


def is_finite(value: float) -> bool:
    """True for an ordinary number (not NaN, not +-Inf)."""
    return math.isfinite(value)
