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
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.heatmap import HeatmapSettings, compute_heatmaps
from sits_observe.analytics.schedsim_results import PolicyResult, Spread
from sits_observe.analytics.smf import SmfAlignment, SmfSettings
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.domain.tables import GPU_SAMPLES
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.surfaces.cli import (
    analyze_fragmentation,
    analyze_latency,
    analyze_trends,
    analyze_workloads,
    controller,
    ingest_dcgm,
    simulate,
)
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    cli_errors,
    err,
    out,
    print_rejected,
    print_rows,
)
from sits_observe.surfaces.cli.console import note, shown, styled

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


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_latency_table(text: str) -> None:
    rows = [{"model": text, "requests": 5, "p50_s": 0.1, "p95_s": 0.2}]
    rows.append({"model": None, "requests": 1, "p50_s": 0.3, "p95_s": 0.3})
    stdout, stderr = capture(
        lambda: analyze_latency._print_latency(rows, OutputFormat.table, text, "model")
    )
    assert shown(text) in stdout and "(not recorded)" in stdout
    assert stderr.count("\n") == 1  # the note about the null group, on one line


@pytest.fixture(scope="module")
def heatmap_store() -> Store:
    return Store.open(":memory:")


@settings(max_examples=20, deadline=None)
@given(text=TEXT.filter(bool))
def test_heatmap_table(heatmap_store: Store, text: str) -> None:
    heatmap_store.execute("DELETE FROM requests")
    rows = [
        {
            "ts": NOW + timedelta(seconds=i / 10),
            "model": text,
            "latency_s": 0.01 * (1 + i % 7),
            "ok": True,
        }
        for i in range(200)
    ]
    heatmap_store.append_batch({"requests": pa.Table.from_pylist(rows)})
    settings_ = HeatmapSettings(slo_ms=40.0, min_bin_requests=1)
    [h] = compute_heatmaps(heatmap_store, settings_, by="model")
    stdout, _ = capture(lambda: analyze_latency._print_heatmap_table(h))
    assert f"model = {shown(text)}: 200 requests" in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_fragmentation_tables(text: str) -> None:
    doc = {
        "source": {"placed_pods": 1},
        "frag_ratio": 0.5,
        "frag_amount_ratio": 0.25,
        "frag_milli": 500.0,
        "idle_milli": 1000,
        "total_milli": 2000,
        "alloc_ratio": 0.5,
        "by_cause": {text: {"milli": 500.0, "share": 1.0}},
        "typical_pods": [
            {
                "cpu_milli": 1,
                "num_gpu": 1,
                "gpu_milli": 1000,
                "gpu_types": [text],
                "count": 1,
                "weight": 1.0,
            }
        ],
        "typical_pods_coverage_ratio": 1.0,
        "workload_pods": 1,
        "node_count": 1,
        "nodes": [
            {
                "node": text,
                "gpu_model": text,
                "gpu_count": 8,
                "cpu_free_milli": 1,
                "idle_milli": 1,
                "frag_milli": 1.0,
                "frag_ratio": 1.0,
            }
        ],
    }
    stdout, _ = capture(lambda: analyze_fragmentation._print_tables(doc))
    assert shown(text) in stdout


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
    )
    stdout, _ = capture(lambda: simulate._print_tables([result], total_gpus=8, workload="default"))
    assert shown(text) in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT.filter(bool))
def test_trends_smf_notes(text: str) -> None:
    unlinked = pa.Table.from_pylist(
        [{"node": text, "gpu_uuid": "GPU-1", "labelled_as": text, "reason": text}]
    )
    alignment = SmfAlignment(
        rows=pa.table({"x": pa.array([], pa.int64())}),
        unmatched=pa.table({"unmatched_samples": pa.array([3], pa.int64())}),
        unlinked_gpus=unlinked,
        skipped={},
        linked_containers=0,
        unlinked_containers=0,
        settings=SmfSettings(),
    )
    _, stderr = capture(
        lambda: analyze_trends._notes(alignment, unlinked.to_pylist(), OutputFormat.table)
    )
    assert f"  {shown(text)} GPU-1 [labelled {shown(text)}]: {shown(text)}\n" in stderr


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_workloads_table(text: str) -> None:
    rows = [{"node": text, "score": 0.5, "pods": [text, "b"]}]
    stdout, _ = capture(
        lambda: analyze_workloads._print(rows, OutputFormat.table, text, ["node", "score"])
    )
    assert shown(text) in stdout


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_recommend_table(text: str) -> None:
    row = {key: text for key in controller.RECOMMENDATION_KEYS}
    stdout, _ = capture(
        lambda: controller.print_recommendations([row], controller.RecommendFormat.table)
    )
    assert shown(text) in stdout
