"""Every CLI renderer prints data as written: Rich markup, emoji codes and control characters
in paths, labels, model names or flag values are never interpreted (issue 9, item 3).

Each test pushes arbitrary text through one renderer (with the real ``out`` / ``err``
consoles, writing to a non-terminal stream as a pipe would) and checks that nothing raises
and that the text comes out verbatim: exactly as given, except that control characters are
shown as their Python escapes (:func:`~sits_observe.surfaces.cli.console.shown`).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
import typer
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.model import CAUSES, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TypicalPodSettings, typical_pods
from sits_observe.analytics.trends.clusters import (
    EpsChoice,
    SeriesPoint,
    TrendCluster,
    TrendClusters,
)
from sits_observe.analytics.trends.series import TrendLevel
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.domain.tables import GPU_SAMPLES, conform
from sits_observe.errors import ConfigError
from sits_observe.lab.replay.engine.results import PolicyResult, Spread
from sits_observe.reports import fragmentation, smf, timeline, trends
from sits_observe.reports.actions import recommend
from sits_observe.reports.result import Report, table_of
from sits_observe.reports.serving import heatmap, heatmap_query, latency
from sits_observe.reports.serving.heatmap_maps import heatmaps_of
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    cli_errors,
    err,
    out,
    print_rejected,
    print_rows,
)
from sits_observe.surfaces.cli.console import note, shown, styled
from sits_observe.surfaces.cli.ingest import dcgm as ingest_dcgm
from sits_observe.surfaces.cli.lab import simulate
from sits_observe.surfaces.cli.reports.heatmap_extras import print_grid
from sits_observe.surfaces.cli.reports.output import Output, print_report

NASTY = ["[", "]", "[/x]", "[/]", "[bold]", "[red]no[/]", "\\[x]", ":smile:", "\x1b[31m", "\n"]
NASTY += ["\t", "\r", "\x00", "\x7f", "\x9b", "\u2028", "[link=http://x]", "node[/x]", "✓", "漢字"]
#: Arbitrary text, biased towards what Rich would read as markup or a terminal as control.
TEXT = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=12)), max_size=6).map("".join)
NOW = datetime(2026, 1, 2, 3, 4, 5)


def capture(render: Callable[[], object]) -> tuple[str, str]:
    """(stdout, stderr) of ``render``, written to plain streams as a pipe would get them."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        render()
    return stdout.getvalue(), stderr.getvalue()


def test_shown_escapes_control_characters_only() -> None:
    assert shown("a[/x]b :smile: ✓") == "a[/x]b :smile: ✓"
    assert shown("a\nb\x1b[2J\t\x9b\u2028") == "a\\nb\\x1b[2J\\t\\x9b\\u2028"


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_print_rows_title_header_and_cells(text: str) -> None:
    assume(text != "n")  # the other column's key
    rows = [{text: text, "n": 1}, {text: f"{text} again", "n": None}]
    stdout, _ = capture(lambda: print_rows(rows, OutputFormat.table, title=text))
    assert shown(text) in stdout.splitlines()[0]  # the title, on one line
    assert shown(f"{text} again") in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_error_printer_and_notes_are_one_line_each(text: str) -> None:
    def fail() -> None:
        with pytest.raises(typer.Exit), cli_errors():
            raise ConfigError(f"bad value {text} for --x")

    _, stderr = capture(fail)
    assert stderr == f"error: bad value {shown(text)} for --x\n"
    _, stderr = capture(lambda: note(text, label="warning"))
    assert stderr == f"warning: {shown(text)}\n"
    stdout, _ = capture(lambda: out.print(styled((text, "bold"), ": ", text)))
    assert stdout == f"{shown(text)}: {shown(text)}\n"
    stdout, _ = capture(lambda: out.print(f"wrote 3 rows of t to {text}"))
    assert stdout == f"wrote 3 rows of t to {shown(text)}\n"
    _, stderr = capture(lambda: err.print(f"window: {text}"))
    assert stderr == f"window: {shown(text)}\n"


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_ingest_dcgm_gpu_lines_and_rejections(text: str) -> None:
    label = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    body = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="{label}"}} 50\n'
    samples = parse_dcgm(body, now=NOW, node=None).tables[GPU_SAMPLES.name]
    assert samples.column("node").to_pylist() == [text or None]
    stdout, _ = capture(
        lambda: print_rows(ingest_dcgm.gpu_lines(samples), OutputFormat.table, title=text)
    )
    assert shown(text) in stdout
    stdout, _ = capture(lambda: print_rejected({text: 2}, title=text))
    assert shown(text) in stdout


@pytest.fixture(scope="module")
def requests_store() -> Store:
    return Store.open(":memory:")


def _requests(store: Store, model: str | None, n: int, step_s: float = 1.0) -> None:
    rows = [
        {
            "ts": NOW + timedelta(seconds=i * step_s),
            "model": model,
            "latency_s": 0.01 * (1 + i % 7),
            "ok": True,
        }
        for i in range(n)
    ]
    store.append_batch({"requests": pa.Table.from_pylist(rows)})


WINDOW = Window(None, NOW + timedelta(hours=1), "given")


@settings(max_examples=50, deadline=None)
@given(text=TEXT)
def test_latency_table(requests_store: Store, text: str) -> None:
    requests_store.execute("DELETE FROM requests")
    _requests(requests_store, text, 5)
    _requests(requests_store, None, 1)
    report = latency.build(requests_store, WINDOW, latency.LatencyQuery())
    stdout, stderr = capture(lambda: print_report(report, Output.table))
    assert shown(text) in stdout
    window, null_group = stderr.splitlines()  # each note on one line
    assert window.startswith("window: ") and "without a recorded model" in null_group


@settings(max_examples=20, deadline=None)
@given(text=TEXT.filter(bool))
def test_heatmap_table(requests_store: Store, text: str) -> None:
    requests_store.execute("DELETE FROM requests")
    _requests(requests_store, text, 200, step_s=0.1)
    query = heatmap_query.HeatmapQuery(
        by=heatmap_query.HeatmapBy.model,
        slo_ms=40.0,
        min_bin_requests=1,
        bin_s=1,
        throughput_bin_rps=10,
        latency_bin_ms=100,
    )
    report = heatmap.build(requests_store, WINDOW, query)
    stdout, stderr = capture(lambda: print_report(report, Output.table))
    assert shown(text) in stdout and f"model {shown(text)}: " in stderr
    [h] = heatmaps_of(
        heatmap.build(
            requests_store,
            WINDOW,
            query.model_copy(update={"table": heatmap_query.HeatmapTable.cells}),
        )
    )
    stdout, _ = capture(lambda: print_grid(h))
    assert f"model = {shown(text)}: 200 requests" in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_fragmentation_tables(text: str) -> None:
    state = ClusterState.empty([text], [1000], [8], [text])
    workload = typical_pods([PodShape(1, 1, 1000, (text,))], TypicalPodSettings())
    inputs = fragmentation.FgdInputs(state, workload, 0, {}, (text,))
    report = fragmentation.report_of(WINDOW, inputs, fragmentation.FragmentationQuery())
    stdout, stderr = capture(lambda: print_report(report, Output.table))
    assert shown(text) in stdout and shown(text) in stderr


@settings(max_examples=100, deadline=None)
@given(text=TEXT.filter(bool))
def test_simulate_tables(text: str) -> None:
    steps = 11
    curve = np.tile(np.linspace(0.0, 1.0, steps), (3, 1))
    spread = Spread(1.0, 1.0, 1.0)
    result = PolicyResult(
        policy=text,
        seeds=(1,),
        arrived_ratio=np.linspace(0.0, 1.0, steps),
        alloc_ratio=curve,
        frag_ratio=curve,
        frag_amount_ratio=curve,
        first_failure_arrived=None,
        seeds_with_failure=0,
        unallocated_gpus=spread,
        final_alloc_ratio=spread,
        pods_per_s=10.0,
        replays=(),
        frag_by_cause_gpus={str(c): spread for c in CAUSES},
        failed_pods_by_kind={text: spread},
        failed_gpus_by_kind={text: spread},
    )
    stdout, _ = capture(lambda: simulate._print_tables([result], total_gpus=8, workload="default"))
    assert shown(text) in stdout


@settings(max_examples=20, deadline=None)
@given(text=TEXT.filter(bool))
def test_smf_unlinked_gpus(requests_store: Store, text: str) -> None:
    requests_store.execute("DELETE FROM gpu_samples")
    requests_store.execute("DELETE FROM container_samples")
    gpu = {"ts": NOW, "node": text, "gpu_uuid": "GPU-1", "fb_free_bytes": 1, "fb_total_bytes": 2}
    requests_store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist([gpu])))
    cgroup = {"ts": NOW, "node": text, "container_id": "c1", "memory_current_bytes": 1}
    requests_store.append(
        "container_samples", conform("container_samples", pa.Table.from_pylist([cgroup]))
    )
    report = smf.build(requests_store, WINDOW, smf.SmfQuery())
    stdout, stderr = capture(lambda: print_report(report, Output.table))
    assert shown(text) in stdout and "GPU-1" in stdout and "no cgroup match" in stderr


@settings(max_examples=100, deadline=None)
@given(text=TEXT.filter(bool))
def test_trends_tables(text: str) -> None:
    point = SeriesPoint(key="GPU-1", node=text, features={}, points=3, span_h=1.0)
    centroid = dict.fromkeys(("level", "slope_per_h", "resid_std", "daily_amplitude"), 0.1)
    cluster = TrendCluster(0, (text,), text, centroid | {"drops_per_h": 0.0}, (point,), ((text,),))
    result = TrendClusters(
        level=TrendLevel.gpu,
        bucket_s=60,
        n_series=2,
        eps=EpsChoice(1.0, "given", 1, None, 0.0, np.zeros(0)),
        min_samples=1,
        clusters=(cluster,),
        noise=(replace(cluster, label=-1),),
        dropped={},
        dropped_keys=(),
        notes=(text,),
    )
    report = trends.report_of(WINDOW, result, {"GPU-1": text})
    stdout, stderr = capture(lambda: print_report(report, Output.table))
    assert stdout.count(shown(text)) >= 4 and shown(text) in stderr


@settings(max_examples=50, deadline=None)
@given(text=TEXT)
def test_timeline_table(requests_store: Store, text: str) -> None:
    # pods is a view over versions since schema version 6: clear what it reads.
    requests_store.execute("DELETE FROM pod_versions")
    requests_store.execute("DELETE FROM inventory_snapshots WHERE kind = 'pods'")
    row = {"ts": NOW, "pod_uid": "u1", "namespace": text, "pod": text, "workload": text,
           "created_at": NOW, "scheduled_at": NOW + timedelta(seconds=1),
           "ready_at": NOW + timedelta(seconds=2)}  # fmt: skip
    requests_store.append("pods", pa.Table.from_pylist([row]))
    for pods in (False, True):
        report = timeline.build(requests_store, WINDOW, timeline.TimelineQuery(pods=pods))
        stdout, _ = capture(lambda: print_report(report, Output.table))  # noqa: B023
        assert shown(text) in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_recommend_table(text: str) -> None:
    row = {c.name: text for c in recommend._COLUMNS} | {"proposed_value": 1.0}
    report = Report("recommend", WINDOW, table_of("r", text, [row], recommend._COLUMNS))
    stdout, _ = capture(lambda: print_report(report, Output.wide))
    assert shown(text) in stdout
