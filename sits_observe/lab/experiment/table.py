"""The experiment's measures as people read them: one label and one text cell per arm.

Shared by ``sits-observe experiment --format table`` and the Streamlit what-if page, so both
print the same rows with the same rounding.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the experiment imports the emulator, the service and the agents: lazily
    from sits_observe.lab.experiment.experiment import ArmResult, ExperimentResult, ModuleWorth
    from sits_observe.lab.experiment.measures import Spread

#: (measure, label, how to print a value) in table order.
MEASURE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("gpu_allocation_ratio", "GPU allocation (time-weighted)", "pct"),
    ("gpu_utilisation_ratio", "GPU utilisation (DCGM, time-weighted)", "pct"),
    ("frag_ratio", "FGD fragmentation ratio (time-weighted)", "pct"),
    ("frag_gpus", "FGD fragmentation amount, GPUs (time-weighted)", "num"),
    ("gpu_pods", "GPU pods arrived", "int"),
    ("gpu_pods_waited", "GPU pods that waited", "int"),
    ("gpu_pods_unscheduled", "GPU pods never scheduled", "int"),
    ("wait_p95_s", "GPU pod wait P95, s", "num"),
    ("latency_p50_s", "inference latency P50, s", "num"),
    ("latency_p95_s", "inference latency P95, s", "num"),
    ("latency_p99_s", "inference latency P99, s", "num"),
    ("ttft_p50_s", "inference TTFT P50, s", "num"),
    ("ttft_p95_s", "inference TTFT P95, s", "num"),
    ("requests", "inference requests completed", "int"),
    ("quota_rejections", "quota rejections (creation attempts)", "int"),
    ("pod_start_p95_s", "pod start P95 (created to running), s", "num"),
    ("controller_applied", "controller decisions applied", "int"),
    ("queued_gpu_hours", "queued GPU-hours, all GPU pods", "num"),
    ("queued_gpu_hours_training", "queued GPU-hours, training", "num"),
    ("queued_gpu_hours_research", "queued GPU-hours, research", "num"),
    ("queued_gpu_hours_team_a", "queued GPU-hours, team-a (idle quota)", "num"),
    ("queued_gpu_hours_team_b", "queued GPU-hours, team-b (sweeps)", "num"),
)


def format_cell(value: float, kind: str) -> str:
    """A measure as the table prints it (``kind``: pct, int or num; NaN is "-")."""
    if not math.isfinite(value):
        return "-"
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "int":
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return f"{value:,.2f}"


def headline(arm: ArmResult) -> str:
    """The SITS documents' three numbers for ``arm``: utilisation / P95 / fragmentation."""
    sp = arm.spread
    return (
        f"{format_cell(sp['gpu_utilisation_ratio'].mean, 'pct')} utilisation / "
        f"P95 {format_cell(sp['latency_p95_s'].mean, 'num')} s / "
        f"{format_cell(sp['frag_ratio'].mean, 'pct')} fragmentation"
    )


def spread_cell(value: Spread, kind: str) -> str:
    """``mean (min-max)`` of a measure over seeds."""
    low, high = format_cell(value.low, kind), format_cell(value.high, kind)
    return f"{format_cell(value.mean, kind)} ({low}-{high})"


def measure_rows(result: ExperimentResult) -> list[dict[str, str]]:
    """One row per measure: its label, then each arm's mean (one seed) or mean (min-max)."""
    rows = []
    for name, label, kind in MEASURE_ROWS:
        row = {"measure": label}
        for arm in result.arms:
            value = arm.spread[name]
            one = result.settings.seeds == 1
            row[arm.arm] = format_cell(value.mean, kind) if one else spread_cell(value, kind)
        rows.append(row)
    return rows


#: The measures the ablation table shows (by :data:`MEASURE_ROWS` name) and their headers.
ABLATION_MEASURES = {
    "gpu_allocation_ratio": "GPU allocation",
    "gpu_utilisation_ratio": "GPU utilisation",
    "frag_ratio": "FGD fragmentation",
    "gpu_pods_waited": "pods that waited",
    "wait_p95_s": "wait P95, s",
    "latency_p95_s": "latency P95, s",
    "ttft_p95_s": "TTFT P95, s",
    "queued_gpu_hours_team_b": "queued GPU-h, team-b",
    "queued_gpu_hours": "queued GPU-h, all",
    "controller_applied": "decisions applied",
}


def _signed(value: float, kind: str) -> str:
    text = format_cell(value, kind)
    if kind == "pct" and math.isfinite(value):  # a difference of ratios: percentage points
        text = f"{value * 100:.1f} pp"
    return f"+{text}" if math.isfinite(value) and value > 0 else text


def ablation_rows(worth: tuple[ModuleWorth, ...], seeds: int) -> list[dict[str, str]]:
    """One row per module switched off: ``kube-sits`` minus the arm without it, per measure
    (mean, and the min-max over seeds when there are several)."""
    kinds = {name: kind for name, _, kind in MEASURE_ROWS}
    rows = []
    for m in worth:
        row = {"module switched off": m.module, "arm": m.arm}
        for name, label in ABLATION_MEASURES.items():
            kind = kinds[name]
            value = m.worth[name]
            cell = _signed(value.mean, kind)
            if seeds > 1:
                cell += f" ({_signed(value.low, kind)} to {_signed(value.high, kind)})"
            row[label] = cell
        rows.append(row)
    return rows
