"""The rows each derived signal reads, so a pass rebuilds only the signals whose rows changed.

A function here returns, for one pass, exactly the spans of rows (table, time column, bounds)
its signal's builder reads: the same tables, the same columns, the same bounds, nothing more
and nothing less. A superset would not do: a row already stored but outside the signal's own
window (stamped after ``now``, or before a floored start) can enter it as the clock moves
while the wider span stays the same. When every span's fingerprint
(:mod:`sits_observe.analytics.row_changes`) equals the previous pass's, the builder would
return the same families, so the pass keeps them and their rendered text.

The inventory signals (``fragmentation``, ``pod_start``) read the ``pods`` / ``nodes`` views;
their spans are the snapshot times and the versions behind the views' rows, and, since every
new snapshot changes those, they declare the rows they read too
(:mod:`sits_observe.analytics.inventory_spans`): when a span changed, the pass compares the
fingerprints of those rows without their snapshot times, so a new snapshot that repeats every
row keeps their text, while any changed row (or, for pod start, a pod leaving its creation
window as the clock moves) rebuilds them. A reads function may return None for one pass
(FGD while a pod names assigned GPUs: it then reads an hour of GPU samples): the signal is
rebuilt in that pass.

A signal whose result depends on more than such spans (the clock itself, a window floored to
a bin, a whole sample table whose fingerprint would cost as much as the signal) declares none
and is rebuilt on every pass: ``collector_last_seen``, ``heatmap``, ``memory_classes`` and
``gpu_idle``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sits_observe.analytics.inventory_spans import live_cluster_reads, pod_start_reads
from sits_observe.analytics.row_changes import Read, RowSpan
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs


def requests(p: PassInputs) -> tuple[RowSpan, ...]:
    """The window's requests (latency, throughput, the latency histogram)."""
    return (RowSpan("requests", p.since, p.until),)


def requests_and_windows(p: PassInputs) -> tuple[RowSpan, ...]:
    """The window's requests and histogram windows (the SLO of every model seen)."""
    return (*requests(p), *server_windows(p))


def server_windows(p: PassInputs) -> tuple[RowSpan, ...]:
    """The window's inference-server histogram windows (latency estimates)."""
    return (RowSpan("server_windows", p.since, p.until),)


def gpu_window(p: PassInputs) -> tuple[RowSpan, ...]:
    """The window's GPU samples (GPU attribution; the GPU names of the window)."""
    return (RowSpan("gpu_samples", p.since, p.until),)


def interference(p: PassInputs) -> tuple[RowSpan, ...]:
    """The window's GPU samples and NUMA samples (the measured NUMA miss ratio)."""
    return (*gpu_window(p), RowSpan("numa_samples", p.since, p.until))


def smf(p: PassInputs) -> tuple[RowSpan, ...]:
    """SMF's inputs (``read_smf_inputs`` over the window: GPU samples from ``max_skew_s``
    before ``since``) and the GPU names of the window."""
    skew = timedelta(seconds=p.settings.smf.max_skew_s)
    return (
        RowSpan("gpu_samples", p.since - skew, p.until),
        RowSpan("container_samples", p.since, p.until),
        RowSpan("gpu_processes", p.since, p.until),
        *gpu_window(p),
    )


def framebuffer(p: PassInputs) -> tuple[RowSpan, ...]:
    """The occupancy series of the window (raw samples and minute roll-ups) and the GPU
    names of the window."""
    return (*_occupancy(p, p.since), *gpu_window(p))


def gpu_trends(p: PassInputs) -> tuple[RowSpan, ...]:
    """The occupancy series over ``trend_window_s`` and the GPU names of that window."""
    since = p.ago(p.settings.trend_window_s)
    return (*_occupancy(p, since), RowSpan("gpu_samples", since, p.until))


def decisions(_: PassInputs) -> tuple[RowSpan, ...]:
    """Every decision row (controller totals, quotas)."""
    return (RowSpan("decisions"),)


def collector_drops(_: PassInputs) -> tuple[RowSpan, ...]:
    """Every ``collector_drops`` row (a counter's total)."""
    return (RowSpan("collector_drops"),)


def _occupancy(p: PassInputs, since: datetime) -> tuple[RowSpan, ...]:
    return (
        RowSpan("gpu_samples", since, p.until),
        RowSpan("gpu_samples_1m", since, p.until, column="minute"),
    )


def fragmentation(p: PassInputs) -> tuple[Read, ...] | None:
    """FGD's inventory: the latest node and pod snapshots and the pods of the ``fgd_since_s``
    before the latter, as spans and by content (None, rebuilt, while a pod names assigned
    GPUs)."""
    return live_cluster_reads(p.store, since_s=p.settings.fgd_since_s)


def pod_start(p: PassInputs) -> tuple[Read, ...]:
    """The pods before now and those created in the last ``pod_start_window_s``, as spans
    and by content (each such pod's latest row, its snapshot time left out)."""
    return pod_start_reads(p.store, p.ago(p.settings.pod_start_window_s), p.until)
