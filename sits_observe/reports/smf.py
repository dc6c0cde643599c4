"""Report ``smf``: the SMF fragmentation rate per container, GPU or (container, GPU) pair.

SMF = (GPU free framebuffer - the container's ``memory.current``) / GPU total framebuffer, on
cgroup samples aligned to the GPU sample taken at most ``max_skew_s`` before them
(docs/analytics/smf.md). ``raw`` gives every aligned sample instead of the summary.

With ``--promql-url`` both inputs come from a Prometheus-compatible store: GPU samples from
dcgm-exporter's (or the agent's) series, cgroup samples from the agent's cAdvisor-named
families (docs/scaling.md); containers then link to GPUs by the DCGM pod labels only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from sits_observe.analytics.fragmentation.settings import SmfSettings
from sits_observe.analytics.fragmentation.smf import (
    SmfAlignment,
    SmfGrouping,
    SmfInputs,
    align_smf,
    read_smf_inputs,
    read_smf_sources,
)
from sits_observe.analytics.fragmentation.smf_latest import SmfLatest, read_latest_smf
from sits_observe.analytics.fragmentation.smf_summary import summarize_smf
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.result import Column, Report, col, sorted_rows, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLContainerSource, PromQLGpuSource


class SmfQuery(SmfSettings):
    """Settings of the ``smf`` report."""

    by: SmfGrouping = Field(
        SmfGrouping.container, description="one row per container, GPU or (container, GPU)"
    )
    raw: bool = Field(False, description="every aligned sample instead of a summary")


_SMF = (
    col("latest_smf", "SMF now", Unit.ratio),
    col("mean_smf", "SMF mean", Unit.ratio),
    col("max_smf", "SMF max", Unit.ratio),
    col("samples", "samples", Unit.integer),
    col("unmatched_samples", "unmatched", Unit.integer, wide=True),
    col("latest_at", "latest", Unit.time, wide=True),
)
_CONTAINER = (
    col("namespace", "namespace"),
    col("pod", "pod"),
    col("container", "container"),
    col("container_id", "container id", wide=True),
)
_COLUMNS: dict[SmfGrouping, tuple[Column, ...]] = {
    SmfGrouping.container: (
        col("node", "node", wide=True),
        *_CONTAINER,
        col("gpus", "GPUs", Unit.integer),
        *_SMF,
    ),
    SmfGrouping.gpu: (
        col("gpu", "GPU"),
        col("gpu_uuid", "GPU UUID", wide=True),
        col("containers", "containers", Unit.integer),
        *_SMF,
    ),
    SmfGrouping.pair: (
        *_CONTAINER,
        col("gpu", "GPU"),
        col("gpu_uuid", "GPU UUID", wide=True),
        *_SMF,
    ),
}
_RAW = (
    col("ts", "time", Unit.time),
    col("node", "node"),
    col("pod", "pod"),
    col("container_id", "container id", wide=True),
    col("gpu_uuid", "GPU UUID", wide=True),
    col("smf", "SMF", Unit.ratio),
    col("skew_s", "skew", Unit.seconds),
)

FILLED_BY = "`sits-observe ingest cgroup` or the node agent"


def build(store: Store, window: Window, query: SmfQuery) -> Report:
    """The ``smf`` report over ``window``."""
    require_rows(store, window, "container_samples", FILLED_BY)
    inputs = read_smf_inputs(store, since=window.since, until=window.until, settings=query)
    return _report(window, inputs, query, gpu_labels(store, window))


def latest_smf(store: Store, window: Window, settings: SmfSettings) -> SmfLatest:
    """The latest SMF of every GPU and every container over ``window``: the ``latest_smf``
    column of the report's ``gpu`` and ``container`` summaries (the same rules and values,
    a mean over several rows possibly differing in the last bit), read without aligning the
    whole window (:mod:`sits_observe.analytics.fragmentation.smf_latest`); the exporter's
    ``sits_smf_*`` families."""
    return read_latest_smf(store, since=window.since, until=window.until, settings=settings)


def build_promql(reader: PromQLReader, window: Window, query: SmfQuery) -> Report:
    """The ``smf`` report over ``window`` of a PromQL store's GPU and cgroup series."""
    assert window.since is not None  # run_promql_report requires --since
    inputs = read_smf_sources(
        PromQLGpuSource(reader.client, matchers=reader.matchers),
        PromQLContainerSource(reader.client, matchers=reader.matchers),
        since=window.since,
        until=window.until,
        settings=query,
        step_s=reader.step_s,
    )
    if inputs.container_samples.num_rows == 0:
        raise NoDataError(
            f"no agent cgroup series (container_memory_usage_bytes with a container_id label) "
            f"in {window.describe()} at the PromQL store; check --promql-url, "
            "--promql-matchers and --since, and that the agents' /metrics are scraped"
        )
    return _report(window, inputs, query, gpu_labels_of(inputs.gpu_samples))


def _report(
    window: Window, inputs: SmfInputs, query: SmfQuery, labels: Mapping[str, str]
) -> Report:
    alignment = align_smf(
        inputs.gpu_samples, inputs.container_samples, inputs.gpu_processes, settings=query
    )
    notes = _notes(alignment)
    if query.raw:
        raw = alignment.rows
        main = table_of("samples", "SMF fragmentation rate, aligned samples", raw, _present(raw))
    else:
        rows = sorted_rows(
            [_row(s, labels) for s in summarize_smf(alignment, query.by)],
            ("namespace", "pod", "container", "node", "gpu"),
        )
        title = f"SMF fragmentation rate by {query.by.value}"
        main = table_of(query.by.value, title, rows, _COLUMNS[query.by])
    unlinked = table_of(
        "unlinked_gpus",
        "GPUs with no cgroup match",
        alignment.unlinked_gpus,
        (col("node", "node"), col("gpu_uuid", "GPU UUID"), col("reason", "why")),
    )
    facts = {
        "by": "sample" if query.raw else query.by.value,
        "max_skew_s": query.max_skew_s,
        "unmatched_samples": alignment.unmatched_samples,
        "linked_containers": alignment.linked_containers,
        "unlinked_containers": alignment.unlinked_containers,
        "skipped": dict(alignment.skipped),
    }
    return Report("smf", window, main, (unlinked,), tuple(notes), facts)


def _present(table: Any) -> tuple[Column, ...]:
    return tuple(c for c in _RAW if c.name in table.column_names)


def _row(s: Any, labels: dict[str, str] | Any) -> dict[str, Any]:
    gpus = list(s.gpu_uuids)
    return {
        "node": s.node,
        "namespace": s.namespace,
        "pod": s.pod,
        "container": s.container,
        "container_id": s.container_id,
        "gpu": labels.get(s.gpu_uuid, s.gpu_uuid) if s.gpu_uuid else None,
        "gpu_uuid": s.gpu_uuid,
        "gpus": len(gpus),
        "gpu_uuids": gpus,
        "containers": len(s.container_ids),
        "container_ids": list(s.container_ids),
        "latest_at": s.latest_at,
        "latest_smf": s.latest_smf,
        "mean_smf": s.mean_smf,
        "max_smf": s.max_smf,
        "samples": s.samples,
        "unmatched_samples": s.unmatched_samples,
    }


def _notes(alignment: SmfAlignment) -> list[str]:
    skew = alignment.settings.max_skew_s
    notes: list[str] = []
    if alignment.rows.num_rows == 0:
        notes.append(
            "no SMF samples: no cgroup sample of a GPU-linked container had a GPU sample "
            f"within {skew:g} s before it"
        )
    if alignment.unmatched_samples:
        notes.append(
            f"{alignment.unmatched_samples} cgroup samples (per linked GPU) had no GPU sample "
            f"within {skew:g} s before them and are counted as unmatched, not guessed"
        )
    if alignment.unlinked_gpus.num_rows:
        notes.append(
            f"{alignment.unlinked_gpus.num_rows} GPU(s) have no cgroup match, so no SMF (the "
            "formula needs the memory.current of the container using the GPU); see "
            "tables.unlinked_gpus"
        )
    if alignment.unlinked_containers:
        notes.append(
            f"{alignment.unlinked_containers} container(s) use no GPU that the samples show "
            "(no DCGM pod label and no NVML process row): left out"
        )
    for reason, count in sorted(alignment.skipped.items()):
        notes.append(f"skipped {count} {reason.replace('_', ' ')}")
    return notes


SPEC = ReportSpec(
    name="smf",
    summary="SMF fragmentation rate per container and GPU, on aligned DCGM / cgroup samples.",
    settings=SmfQuery,
    reads=("container_samples", "gpu_samples"),
    build=build,
    promql=build_promql,
)
