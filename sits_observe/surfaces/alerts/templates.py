"""The subset of Prometheus alert templating the rules use, rendered in process.

Prometheus renders annotations with Go templates; the rules here use only
``{{ $labels.NAME }}``, ``{{ $value }}``, ``{{ $value | humanizeDuration }}``,
``{{ $value | humanizePercentage }}`` and ``{{ printf "%.Nf" $value }}``. This module renders
those forms the way Prometheus does (the number formats follow Prometheus's
``template/template.go``), so the in-process alerts carry the same text as the ones
Prometheus sends. Any other action is rejected by :func:`check` (a test runs it on every rule).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from sits_observe.errors import ConfigError

_ACTION = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
_PRINTF = re.compile(r'printf\s+"%\.(\d)f"\s+\$value')
_PIPE = re.compile(r"\$value\s*\|\s*(humanizeDuration|humanizePercentage)")


def _go_g4(value: float) -> str:
    """Go's ``%.4g`` (Python's matches it for finite values, bar the sign of NaN/Inf)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def humanize_duration(value: float) -> str:
    """Seconds as Prometheus's ``humanizeDuration``: ``4500`` -> ``1h 15m 0s``."""
    if math.isnan(value) or math.isinf(value):
        return _go_g4(value)
    if value == 0:
        return "0s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        whole = int(abs(value))
        secs, mins, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {mins}m {secs}s"
        if hours:
            return f"{sign}{hours}h {mins}m {secs}s"
        if mins:
            return f"{sign}{mins}m {secs}s"
        return f"{sign}{_go_g4(abs(value))}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return f"{_go_g4(value)}{prefix}s"


def _value(action: str, value: float) -> str | None:
    if action == "$value":
        return _go_g4(value) if not math.isfinite(value) else _shortest(value)
    pipe = _PIPE.fullmatch(action)
    if pipe is not None:
        if pipe.group(1) == "humanizeDuration":
            return humanize_duration(value)
        return f"{_go_g4(value * 100)}%"
    printf = _PRINTF.fullmatch(action)
    if printf is not None:
        return f"{value:.{int(printf.group(1))}f}"
    return None


def _shortest(value: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` for the usual magnitudes."""
    text = repr(value)
    return text.removesuffix(".0") if "e" not in text else f"{value:g}"


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """``template`` with its actions replaced (a missing label renders empty, as in Go)."""

    def one(match: re.Match[str]) -> str:
        action = match.group(1)
        label = _LABEL.fullmatch(action)
        if label is not None:
            return labels.get(label.group(1), "")
        text = _value(action, value)
        if text is None:
            raise ConfigError(f"unsupported template action {{{{ {action} }}}} in {template!r}")
        return text

    return _ACTION.sub(one, template)


def check(template: str) -> None:
    """Raise :class:`ConfigError` when ``template`` uses an action :func:`render` lacks."""
    render(template, {}, 1.0)
