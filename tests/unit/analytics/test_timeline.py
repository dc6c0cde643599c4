"""Pod start timeline from hand-made ``pods`` rows (SPEC "Pod start jitter": p95 start
2,140 ms before and 480 ms after the documents' fixes)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.settings import TimelineSettings
from sits_observe.analytics.timeline import (
    CAUSES,
    compare_to_reference,
    load_pods,
    pod_timeline,
    pod_timelines,
    summarize,
)
from sits_observe.store import Store

S = TimelineSettings()
T0 = datetime(2026, 1, 1)


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def pod(
    uid: str,
    gaps: tuple[float | None, float | None, float | None, float | None],
    *,
    workload: str = "w",
    namespace: str = "ns",
    snapshot_s: float = 100,
    created_s: float = 0,
) -> dict[str, Any]:
    """A pods row whose four stage gaps (scheduling, init, containers, readiness) are given."""
    times: list[float | None] = [created_s]
    for gap in gaps:
        prev = times[-1]
        times.append(None if gap is None or prev is None else prev + gap)
    return {
        "ts": at(snapshot_s),
        "pod_uid": uid,
        "namespace": namespace,
        "pod": f"pod-{uid}",
        "workload": workload,
        "node": "n1",
        "phase": "Running" if times[-1] is not None else "Pending",
        "created_at": at(times[0]),
        "scheduled_at": at(times[1]),
        "initialized_at": at(times[2]),
        "containers_ready_at": at(times[3]),
        "ready_at": at(times[4]),
    }


def test_gaps_and_the_largest_one_named() -> None:
    t = pod_timeline(pod("a", (0.04, 0.3, 20.0, 0.0)))
    assert (t.scheduling_s, t.init_s, t.containers_s, t.readiness_s) == pytest.approx(
        (0.04, 0.3, 20.0, 0.0)
    )
    assert t.total_s == pytest.approx(20.34)
    assert t.reached == "ready"
    assert t.largest_stage == "containers"
    assert t.likely_cause == "image pull, container start, model load / CUDA context warm-up"
    assert t.anomaly is None


@pytest.mark.parametrize(
    ("gaps", "stage"),
    [
        ((5.0, 0.3, 1.0, 0.0), "scheduling"),
        ((0.1, 3.0, 1.0, 0.0), "init"),
        ((0.1, 0.2, 0.3, 0.9), "readiness"),
    ],
)
def test_each_stage_can_be_the_cause(gaps: tuple[float, float, float, float], stage: str) -> None:
    t = pod_timeline(pod("a", gaps))
    assert t.largest_stage == stage
    assert t.likely_cause == CAUSES[stage]


def test_scheduling_cause_mentions_late_device_plugin() -> None:
    assert "device plugin registered late" in CAUSES["scheduling"]


def test_pending_pod_stops_at_the_stage_it_reached() -> None:
    t = pod_timeline(pod("p", (1.5, None, None, None)))
    assert t.reached == "scheduled"
    assert (t.scheduling_s, t.init_s, t.total_s) == (1.5, None, None)
    assert t.largest_stage == "scheduling"
    never = pod_timeline(pod("q", (None, None, None, None)))
    assert (never.reached, never.largest_stage) == ("created", None)


def test_negative_gap_is_flagged_not_blamed() -> None:
    t = pod_timeline(pod("r", (1.0, -0.5, 3.0, 0.0)))
    assert t.anomaly is not None and "negative init gap" in t.anomaly
    assert t.largest_stage == "containers"


def test_latest_snapshot_per_pod_wins() -> None:
    rows = [pod("a", (1.0, None, None, None), snapshot_s=10), pod("a", (1.0, 1.0, 2.0, 0.0))]
    (t,) = pod_timelines(pl.DataFrame(rows))
    assert t.reached == "ready"
    assert t.total_s == pytest.approx(4.0)


def test_summary_percentiles_and_comparison() -> None:
    totals = [0.3, 0.4, 0.5, 0.6, 3.0]
    rows = [pod(str(i), (0.1, 0.1, total - 0.2, 0.0)) for i, total in enumerate(totals)]
    rows.append(pod("pending", (0.1, None, None, None)))
    rows.append(pod("odd", (1.0, -0.5, 3.0, 0.0)))  # anomaly: counted, not in the quantiles
    rows.append(pod("other", (0.1, 0.1, 0.1, 0.0), workload="x"))
    summary = {s.group: s for s in summarize(pod_timelines(pl.DataFrame(rows)), S)}
    w = summary[(("namespace", "ns"), ("workload", "w"))]
    assert (w.pods, w.pods_ready) == (7, 5)
    assert w.start_p50_s == pytest.approx(0.5)
    assert w.start_p95_s == pytest.approx(float(np.quantile(totals, 0.95)))  # 2.52
    assert w.start_max_s == pytest.approx(3.0)
    assert dict(w.stage_p95_s)["scheduling"] == pytest.approx(0.1)
    assert w.dominant_stage == "containers"
    assert (w.reference_before_p95_s, w.reference_after_p95_s) == (2.140, 0.480)
    assert w.comparison.startswith("p95 2,520 ms: above the before-fix figure")
    assert len(summary) == 2
    (everything,) = summarize(pod_timelines(pl.DataFrame(rows)), S, by=())
    assert everything.pods == 8


@pytest.mark.parametrize(
    ("p95_s", "verdict"),
    [
        (0.480, "at or below the after-fix figure"),
        (0.481, "between the after- and before-fix figures"),
        (2.140, "between the after- and before-fix figures"),
        (2.141, "above the before-fix figure"),
        (None, "no ready pods"),
    ],
)
def test_comparison_edges(p95_s: float | None, verdict: str) -> None:
    text = compare_to_reference(p95_s, S)
    assert verdict in text
    assert "spec: 2,140 ms before fixes, 480 ms after" in text


def test_empty_input() -> None:
    assert pod_timelines(pl.DataFrame()) == ()
    assert summarize((), S) == ()


def test_load_pods_reads_the_latest_snapshot() -> None:
    import pyarrow as pa

    with Store.open(":memory:") as store:
        rows = [
            pod("a", (1.0, None, None, None), snapshot_s=10),
            pod("a", (1.0, 1.0, 2.0, 0.0)),
            pod("b", (1.0, 1.0, 1.0, 0.0), created_s=50),
        ]
        store.append("pods", pa.Table.from_pylist(rows))
        frame = load_pods(store)
        assert sorted(frame.get_column("pod_uid").to_list()) == ["a", "b"]
        assert load_pods(store, since=at(40)).get_column("pod_uid").to_list() == ["b"]
        (a, _) = pod_timelines(frame)
        assert a.reached == "ready"
