"""Durations as Prometheus writes them, for metric labels, rule files and alert texts."""

from __future__ import annotations


def prom_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: ``900`` -> ``15m``, ``90`` -> ``90s``, ``86400`` ->
    ``1d``, ``0.25`` -> ``250ms`` (the largest unit that divides it)."""
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9:
        return f"{round(seconds * 1000)}ms"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"
