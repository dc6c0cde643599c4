"""Controller ``plan()`` over 1,000 nodes x 8 GPUs and 10,000 pods (target: well under 200 ms,
the spec's arbitration period).

Synthetic signals (seeded): per node a fragmentation ratio and an interference score; per pod
a peak GPU memory, P95 / P99 latency, sequence length, SLA-violation rate, GPU utilisation and
link saturation of its GPU, and one of the spec's priority classes (8,000 GPU pods on the
8,000 GPUs, 2,000 CPU-only pods without GPU signals); 200 namespaces with 14 daily peaks of
three quota resources each.

Two cluster states are timed:

- ``cold``: nothing labelled or recommended yet, so every rule proposes for every object
  (the largest plan: tens of thousands of decisions);
- ``steady``: the state the cold plan's decisions leave behind (labels applied,
  recommendations annotated) and signals jittered by 2% noise: hysteresis and the change
  threshold make most proposals no-ops.

The ``naive`` baseline computes the same cold decisions object by object in plain Python by
calling scalar rule functions (``memory_class``, ``time_slice``, ``recommend_priority``,
``elastic_quota``: the plain-Python versions the tests keep as the oracle of the vectorised
rules, ``tests/unit/analytics/class_oracle.py``; and ``recommend_topology``) and building a
:class:`~sits_observe.control.controller.planning.model.Decision` per proposal, with dictionary
look-ups for the current state: what a straightforward per-object controller would do. It skips the
safety steps, so it flatters the baseline.

Median of ``--runs`` runs (default 5) after one warm-up, the three contenders interleaved
(one run of each per round) so that load from other processes hits them alike. The script
prints a Markdown section; docs/benchmarks.md holds a copy.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

# The naive baseline's rules are the tests' scalar oracle (tests/ beside bench/).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sits_observe.analytics.classes.classify import ElasticSignals, Task
from sits_observe.analytics.topology.interference import InterferenceScore, recommend_topology
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.model import (
    Decision,
    ObjectRef,
    Recommendation,
    recommendation_annotation,
)
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.quota_settings import QUOTA_RESOURCES
from sits_observe.control.controller.settings import ControllerSettings
from tests.unit.analytics.class_oracle import (
    elastic_quota,
    memory_class,
    recommend_priority,
    tasks_to_reset,
    time_slice,
)

GIB = 1024**3
AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
PRIORITIES = ("ultra-low-latency", "throughput-guaranteed", "best-effort")


def synthetic(nodes: int, gpus: int, pods: int, namespaces: int, seed: int) -> Signals:
    """Seeded signals of the benchmark's cluster."""
    rng = np.random.default_rng(seed)
    node_names = [f"node-{i:04d}" for i in range(nodes)]
    gpu_pods = min(pods, nodes * gpus)
    node_of = [
        node_names[i // gpus] if i < gpu_pods else node_names[i % nodes] for i in range(pods)
    ]
    has_gpu = np.arange(pods) < gpu_pods

    def gpu_only(values: np.ndarray) -> list[Any]:
        return [float(v) if g else None for v, g in zip(values, has_gpu, strict=True)]

    node_frame = pl.DataFrame(
        {
            "node": node_names,
            "fragmentation_ratio": rng.uniform(0, 1, nodes),
            "interference_score": rng.uniform(0, 1, nodes),
            "interference_partial": rng.uniform(0, 1, nodes) < 0.1,
            "sync_delay_breached": rng.uniform(0, 1, nodes) < 0.02,
        }
    )
    ns_of = [f"team-{i % namespaces:03d}" for i in range(pods)]
    pod_frame = pl.DataFrame(
        {
            "namespace": ns_of,
            "pod": [f"pod-{i:05d}" for i in range(pods)],
            "workload": [f"wl-{i // 4:05d}" for i in range(pods)],
            "node": node_of,
            "priority_class": [PRIORITIES[i % 3] for i in range(pods)],
            "peak_gpu_memory_bytes": [
                int(v) if g else None
                for v, g in zip(rng.uniform(0.2, 80, pods) * GIB, has_gpu, strict=True)
            ],
            "p95_latency_s": gpu_only(rng.lognormal(-4.6, 0.8, pods)),
            "p99_latency_s": gpu_only(rng.lognormal(-4.0, 0.8, pods)),
            "sequence_tokens": gpu_only(rng.uniform(100, 8000, pods)),
            "sla_p99_s": [0.12] * pods,
            "sla_violation_ratio": gpu_only(rng.beta(1, 12, pods)),
            "gpu_util_ratio": gpu_only(rng.uniform(0.5, 1.0, pods)),
            "link_saturation_ratio": gpu_only(rng.uniform(0.3, 1.0, pods)),
            "link_capacity_bytes_per_s": gpu_only(np.full(pods, 900e9)),
        }
    )
    ns_rows = []
    for n in range(namespaces):
        for resource, scale in zip(QUOTA_RESOURCES, (40, 64_000, 512 * GIB), strict=True):
            ns_rows.append(
                {
                    "namespace": f"team-{n:03d}",
                    "resource": resource,
                    "daily_peaks": list(rng.uniform(0.3, 1.0, 14) * scale),
                }
            )
    return Signals.of(AT, nodes=node_frame, pods=pod_frame, namespaces=pl.DataFrame(ns_rows))


def jitter(signals: Signals, ratio: float, seed: int) -> Signals:
    """``signals`` with every float multiplied by 1 +- ``ratio`` noise."""
    rng = np.random.default_rng(seed)

    def noisy(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(
            [
                (pl.col(c) * pl.Series(rng.uniform(1 - ratio, 1 + ratio, frame.height)))
                .cast(frame.schema[c])
                .alias(c)
                for c, t in frame.schema.items()
                if t in (pl.Float64(), pl.Int64()) and c != "sla_p99_s"
            ]
        )

    return Signals(signals.at, noisy(signals.nodes), noisy(signals.pods), signals.namespaces)


def state_after(cold: Any, signals: Signals) -> CurrentState:
    """The cluster state once every decision of ``cold`` was applied (act mode)."""
    frame = cold.frame
    objects = pl.concat(
        [
            signals.nodes.select(
                pl.lit("Node").alias("kind"),
                pl.lit(None, pl.String()).alias("namespace"),
                pl.col("node").alias("name"),
            ),
            signals.pods.select(
                pl.lit("Pod").alias("kind"), "namespace", pl.col("pod").alias("name")
            ),
            signals.namespaces.select(
                pl.lit("Namespace").alias("kind"),
                pl.lit(None, pl.String()).alias("namespace"),
                pl.col("namespace").alias("name"),
            ).unique(),
        ]
    ).with_columns(pl.lit(False).alias("opt_out"))
    values = frame.select(
        "kind",
        "namespace",
        "name",
        "action",
        pl.col("proposed").alias("current"),
        pl.col("proposed").alias("recommended"),
    )
    return CurrentState.of(objects=objects, values=values)


def naive(signals: Signals, settings: ControllerSettings) -> list[Decision]:
    """The cold decisions, object by object, with the analytics' scalar rules."""
    classes = settings.classes
    current: dict[tuple[str, str | None, str, str], str] = {}
    decisions: list[Decision] = []

    def add(ref: ObjectRef, action: Action, proposed: str, reason: str, ev: dict[str, Any]) -> None:
        if current.get((ref.kind, ref.namespace, ref.name, str(action))) == proposed:
            return
        rec = Recommendation(ref, action, None, proposed, reason, ev)
        decisions.append(Decision(rec))

    for row in signals.nodes.iter_rows(named=True):
        ref = ObjectRef("Node", None, row["node"])
        frag = row["fragmentation_ratio"]
        level = "high" if frag > 0.7 else "medium" if frag > 0.3 else "low"
        add(ref, Action.FRAGMENTATION, level, f"fragmentation {frag:.3f}", {"f": frag})
        score = InterferenceScore(row["interference_score"], None, None, None, ())
        delays = [1.0, 1.0, 1.0] if row["sync_delay_breached"] else None
        topo = recommend_topology(score, delays, settings.interference)
        if topo.policy is not None:
            add(ref, Action.TOPOLOGY_POLICY, topo.policy, topo.reason, {"s": score.score})
    node_frag = dict(zip(signals.nodes["node"], signals.nodes["fragmentation_ratio"], strict=True))
    tiers = settings.tier_by_priority_class
    prio = {p.name: p.value for p in classes.priority_classes}
    top: dict[str, int] = {}
    for row in signals.pods.iter_rows(named=True):
        value = prio.get(row["priority_class"], 0)
        top[row["node"]] = max(top.get(row["node"], 0), value)
    for row in signals.pods.iter_rows(named=True):
        ref = ObjectRef("Pod", row["namespace"], row["pod"])
        if row["peak_gpu_memory_bytes"] is not None:
            cls = memory_class(row["peak_gpu_memory_bytes"], classes)
            add(ref, Action.MEMORY_CLASS, cls, "peak", {"b": row["peak_gpu_memory_bytes"]})
        if row["p95_latency_s"] is not None or row["sequence_tokens"] is not None:
            ts = time_slice(row["p95_latency_s"], row["sequence_tokens"], classes)
            add(ref, Action.TIME_SLICE, f"{ts.slice_s * 1000:g}ms", ts.rule, {})
        rec = recommend_priority(
            row["priority_class"], row["sla_violation_ratio"], node_frag[row["node"]], classes
        )
        if rec.proposed is not None and rec.proposed != row["priority_class"]:
            add(ref, Action.PRIORITY_CLASS, rec.proposed, rec.reason, {})
        tier = tiers.get(row["priority_class"])
        if tier is None or row["gpu_util_ratio"] is None:
            continue
        quota = classes.tiers[tier]
        sig = ElasticSignals(
            5.0, 25, row["gpu_util_ratio"], row["link_saturation_ratio"], None, None
        )
        dec = elastic_quota(
            quota.memory_bytes,
            quota.bandwidth_bytes_per_s,
            sig,
            classes,
            memory_minimum_bytes=settings.qos_memory_min_bytes,
            bandwidth_maximum_bytes_per_s=row["link_capacity_bytes_per_s"],
        )
        task = Task(
            row["pod"], prio[row["priority_class"]], row["p99_latency_s"] > row["sla_p99_s"]
        )
        if dec.triggered and tasks_to_reset([task], top[row["node"]]):
            add(ref, Action.QOS_MEMORY_QUOTA, str(dec.memory_quota_bytes), dec.reason, {})
            add(
                ref,
                Action.QOS_BANDWIDTH_QUOTA,
                f"{dec.bandwidth_quota_bytes_per_s:.0f}",
                dec.reason,
                {},
            )
    quota_actions = dict(
        zip(QUOTA_RESOURCES, (Action.QUOTA_GPU, Action.QUOTA_CPU, Action.QUOTA_MEMORY), strict=True)
    )
    for row in signals.namespaces.iter_rows(named=True):
        peaks = row["daily_peaks"]
        q = float(np.quantile(peaks, settings.quota.percentile_ratio))
        value = q * (1 + settings.quota.margin_ratio) * (1 + 1 / len(peaks))
        ref = ObjectRef("Namespace", None, row["namespace"])
        add(ref, quota_actions[row["resource"]], f"{np.ceil(value):.0f}", "quota", {"q": q})
    _ = recommendation_annotation  # the naive controller would write these too
    return decisions


def interleaved(fns: dict[str, Any], runs: int) -> dict[str, tuple[float, list[float], Any]]:
    """Median wall seconds of each function, the runs interleaved (one of each per round) so
    that load from other processes hits every contender alike."""
    results = {name: fn() for name, fn in fns.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {n: (statistics.median(times[n]), times[n], results[n]) for n in fns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    settings = ControllerSettings(mode="act")
    signals = synthetic(args.nodes, args.gpus_per_node, args.pods, args.namespaces, args.seed)
    empty = CurrentState.of(complete=False)
    history = History.of()
    cold = plan(signals, empty, settings, history)
    state = state_after(cold, signals)
    noisy = jitter(signals, 0.02, args.seed + 1)
    timed = interleaved(
        {
            "cold": lambda: plan(signals, empty, settings, history),
            "steady": lambda: plan(noisy, state, settings, history),
            "naive": lambda: naive(signals, settings),
        },
        args.runs,
    )
    cold_s, cold_runs, cold = timed["cold"]
    steady_s, steady_runs, steady = timed["steady"]
    naive_s, naive_runs, naive_out = timed["naive"]
    cpu = os.cpu_count()
    print("## Controller plan()\n")
    print(
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {cpu} cores, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}, Polars {pl.__version__}; "
        f"median of {args.runs} interleaved runs after one warm-up; load average "
        f"{os.getloadavg()[0]:.1f} at the end (other work shared the machine)."
    )
    print(
        f"Input: {args.nodes:,} nodes x {args.gpus_per_node} GPUs, {args.pods:,} pods, "
        f"{args.namespaces} namespaces x 3 quota resources x 14 days (seed {args.seed}).\n"
    )
    print("| what is timed | decisions | median ms | runs ms |")
    print("|---|---:|---:|---|")
    fmt = lambda xs: ", ".join(f"{x * 1000:.1f}" for x in xs)  # noqa: E731
    print(
        f"| `plan()` cold (nothing applied yet) | {len(cold):,} | {cold_s * 1000:.1f} | "
        f"{fmt(cold_runs)} |"
    )
    print(
        f"| `plan()` steady (cold plan applied, signals +-2% noise) | {len(steady):,} | "
        f"{steady_s * 1000:.1f} | {fmt(steady_runs)} |"
    )
    print(
        f"| naive per-object Python, analytics scalar rules (cold) | {len(naive_out):,} | "
        f"{naive_s * 1000:.1f} | {fmt(naive_runs)} |"
    )
    print(
        f"\nRatio naive / plan() cold: {naive_s / cold_s:.2f}x. "
        f"Steady-state suppressed: {dict(steady.suppressed)}."
    )
    print(f"\nCommand: `.venv/bin/python bench/bench_controller_plan.py --runs {args.runs}`.")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
