"""A strict, fast reader of the Prometheus text exposition format (version 0.0.4).

dcgm-exporter, vLLM and Triton all serve this format. The reader never raises for bad
input: a line it cannot read is dropped and counted under a reason, and the rest of the body
is still read (a truncated body loses at most its last, partial line). Values are returned
as floats exactly as written, NaN and infinities included: whether a non-finite value is a
sample or a sentinel is the caller's decision. A last line without its newline is still
read here (hand-written bodies often lack it), although a body cut mid-value yields a value
cut short; the DCGM collector, which reads whole scrapes, drops such a line instead.

Format reference: https://prometheus.io/docs/instrumenting/exposition_formats/
(``metric_name{label="value",...} value [timestamp_ms]``; label values escape ``\\``,
``\"`` and ``\n``; ``# HELP`` and ``# TYPE`` comment lines; other comments ignored).

Speed: exporters repeat the same label set on many lines (dcgm-exporter writes one label
set per GPU on every family), so each distinct label text is parsed once per body and
cached, and a line is split with ``str.partition`` / ``str.rpartition`` rather than a
regular expression. Reading a label set costs two C-level regex calls (one to validate the
whole text, one to pull the pairs out). The building blocks (:func:`parse_labels`,
:func:`read_value`, :func:`valid_name`) are public so that a collector with a columnar fast
path (see :mod:`.dcgm`) reads lines with exactly the same rules.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A quoted value as an "unrolled loop" (runs of plain characters between escapes): much
# faster in Python's re than a per-character alternation.
_VALUE = r'[^"\\]*(?:\\.[^"\\]*)*'
_PAIR = rf'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"{_VALUE}"'
# A whole label set: pairs separated by commas, an optional trailing comma, blanks around.
# Each blank run has one place to go, so a failing match backtracks in linear time.
_LABEL_SET = re.compile(rf"(?:{_PAIR}(?:\s*,{_PAIR})*(?:\s*,)?)?\s*", re.DOTALL)
_LABEL_PAIRS = re.compile(rf'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"({_VALUE})"', re.DOTALL)
_ESCAPES = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}

#: Drop reasons (keys of :attr:`Exposition.dropped`).
MALFORMED_LINE = "malformed line"
MALFORMED_VALUE = "malformed value"
MALFORMED_TIMESTAMP = "malformed timestamp"
BLANK_VALUE = "blank value"
DUPLICATE_SERIES = "duplicate series"

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


def valid_name(name: str) -> bool:
    """True when ``name`` is a legal metric name."""
    return _NAME.fullmatch(name) is not None


def parse_labels(text: str) -> Labels | None:
    """The text between ``{`` and ``}`` -> (name, value) pairs; None when it is not valid."""
    if _LABEL_SET.fullmatch(text) is None:
        return None
    pairs: list[tuple[str, str]] = _LABEL_PAIRS.findall(text)
    if "\\" not in text:  # nothing to unescape: the common case
        return tuple(pairs)
    return tuple((k, _unescape(v)) for k, v in pairs)


def read_value(tail: str) -> tuple[float, int | None] | str:
    """The text after the labels (or the name) -> (value, timestamp_ms), or a drop reason."""
    try:
        return float(tail), None
    except ValueError:
        pass
    parts = tail.split()
    if not parts:
        return BLANK_VALUE
    if len(parts) > 2:
        return MALFORMED_LINE
    if len(parts) == 1:  # float() refused it above
        return MALFORMED_VALUE
    try:
        value = float(parts[0])
    except ValueError:
        return MALFORMED_VALUE
    try:
        return value, int(parts[1])
    except ValueError:
        return MALFORMED_TIMESTAMP


def parse_exposition(text: str) -> Exposition:
    """Read a whole exposition body; see the module docstring for the error policy."""
    result = Exposition()
    samples = result.samples
    dropped = result.dropped
    seen: set[tuple[str, Labels]] = set()
    label_cache: dict[str, Labels | None] = {}
    name_ok: dict[str, bool] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                result.types[parts[2]] = parts[3].strip()
            continue
        name, brace, rest = line.partition("{")
        labels: Labels | None
        if brace:
            label_text, close, tail = rest.rpartition("}")
            if not close:
                dropped[MALFORMED_LINE] += 1
                continue
            name = name.rstrip()
            if label_text in label_cache:
                labels = label_cache[label_text]
            else:
                labels = label_cache[label_text] = parse_labels(label_text)
        else:
            pieces = line.split(None, 1)
            name = pieces[0]
            tail = pieces[1] if len(pieces) == 2 else ""
            labels = ()
        ok = name_ok.get(name)
        if ok is None:
            ok = name_ok[name] = valid_name(name)
        if labels is None or not ok:
            dropped[MALFORMED_LINE] += 1
            continue
        read = read_value(tail)
        if isinstance(read, str):
            dropped[read] += 1
            continue
        key = (name, labels)
        if key in seen:
            dropped[DUPLICATE_SERIES] += 1
            continue
        seen.add(key)
        samples.append(Sample(name, labels, read[0], read[1]))
    return result


def is_finite(value: float) -> bool:
    """True for an ordinary number (not NaN, not +-Inf)."""
    return math.isfinite(value)
