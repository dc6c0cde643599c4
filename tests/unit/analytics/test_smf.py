"""SMF fragmentation rate: links, as-of alignment, the exact formula, summaries."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.fragmentation.smf import (
    SMF_ROW_SCHEMA,
    SmfGrouping,
    SmfSettings,
    align_smf,
    read_smf_inputs,
    smf_value,
)
from sits_observe.analytics.fragmentation.smf_summary import summarize_smf
from sits_observe.domain.tables import conform
from sits_observe.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)
GIB = 1024**3
TOTAL = 80 * GIB
CID = "c" * 64
CID2 = "d" * 64


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def gpu_rows(rows: list[dict[str, Any]]) -> pa.Table:
    defaults = {"node": "n1", "fb_total_bytes": TOTAL, "source": "dcgm"}
    return conform("gpu_samples", pa.Table.from_pylist([defaults | r for r in rows]))


def cg_rows(rows: list[dict[str, Any]]) -> pa.Table:
    defaults = {"node": "n1", "container_id": CID, "pod_uid": "uid-1"}
    return conform("container_samples", pa.Table.from_pylist([defaults | r for r in rows]))


def labelled(**kw: Any) -> dict[str, Any]:
    return {"namespace": "inference", "pod": "vllm-0", "container": "vllm", **kw}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "smf.duckdb") as s:
        yield s


def aligned(store: Store, max_skew_s: float = 2.0) -> Any:
    cfg = SmfSettings(max_skew_s=max_skew_s)
    inputs = read_smf_inputs(store, settings=cfg)
    return align_smf(
        inputs.gpu_samples, inputs.container_samples, inputs.gpu_processes, settings=cfg
    )


def test_aligned_samples_give_the_exact_formula_and_attribution(store: Store) -> None:
    free = 30 * GIB + 12345
    mem = 7 * GIB + 999
    store.append(
        "gpu_samples",
        gpu_rows([labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=free, fb_total_bytes=TOTAL)]),
    )
    store.append("container_samples", cg_rows([labelled(ts=at(0.5), memory_current_bytes=mem)]))
    result = aligned(store)
    assert result.rows.schema == SMF_ROW_SCHEMA
    (row,) = result.rows.to_pylist()
    assert row["smf"] == (free - mem) / TOTAL  # Python's correctly rounded int division
    assert row["skew_s"] == 0.5
    assert (row["ts"], row["gpu_ts"]) == (at(0.5), at(0))
    assert (row["node"], row["container_id"], row["gpu_uuid"]) == ("n1", CID, "GPU-a")
    assert (row["namespace"], row["pod"], row["container"]) == ("inference", "vllm-0", "vllm")
    assert (row["fb_free_bytes"], row["fb_total_bytes"], row["memory_current_bytes"]) == (
        free,
        TOTAL,
        mem,
    )
    assert row["link"] == "labels"
    assert result.unmatched_samples == 0
    assert result.unlinked_gpus.num_rows == 0


def test_free_not_above_memory_current_gives_zero(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=5 * GIB),
                labelled(ts=at(10), gpu_uuid="GPU-a", fb_free_bytes=5 * GIB),
            ]
        ),
    )
    store.append(
        "container_samples",
        cg_rows(
            [
                labelled(ts=at(0), memory_current_bytes=5 * GIB),  # equal: not greater
                labelled(ts=at(10), memory_current_bytes=9 * GIB),
            ]
        ),
    )
    assert aligned(store).rows.column("smf").to_pylist() == [0.0, 0.0]


def test_latest_gpu_sample_at_or_before_is_used(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(-1.5), gpu_uuid="GPU-a", fb_free_bytes=10 * GIB),
                labelled(ts=at(-0.2), gpu_uuid="GPU-a", fb_free_bytes=20 * GIB),
                labelled(ts=at(0.1), gpu_uuid="GPU-a", fb_free_bytes=40 * GIB),  # after: never
            ]
        ),
    )
    store.append("container_samples", cg_rows([labelled(ts=at(0), memory_current_bytes=GIB)]))
    (row,) = aligned(store).rows.to_pylist()
    assert row["fb_free_bytes"] == 20 * GIB
    assert row["skew_s"] == pytest.approx(0.2, abs=1e-12)
    assert row["smf"] == (20 * GIB - GIB) / TOTAL


def test_skew_beyond_tolerance_is_unmatched_not_guessed(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=10 * GIB),
                labelled(ts=at(20), gpu_uuid="GPU-a", fb_free_bytes=10 * GIB),
            ]
        ),
    )
    store.append(
        "container_samples",
        cg_rows(
            [
                labelled(ts=at(-1), memory_current_bytes=GIB),  # no GPU sample before it
                labelled(ts=at(1), memory_current_bytes=GIB),  # 1 s: matched
                labelled(ts=at(3), memory_current_bytes=GIB),  # 3 s: too old at 2 s
                labelled(ts=at(2), memory_current_bytes=GIB),  # exactly 2 s: matched
            ]
        ),
    )
    result = aligned(store, max_skew_s=2.0)
    assert result.rows.column("skew_s").to_pylist() == [1.0, 2.0]
    (miss,) = result.unmatched.to_pylist()
    assert miss["unmatched_samples"] == 2
    assert miss["closest_skew_s"] == 3.0
    assert result.unmatched_samples == 2
    # A wider tolerance matches the 3 s sample; the one before any GPU sample never matches.
    wider = aligned(store, max_skew_s=5.0)
    assert wider.rows.column("skew_s").to_pylist() == [1.0, 2.0, 3.0]
    assert wider.unmatched.to_pylist()[0]["closest_skew_s"] is None
    (summary,) = summarize_smf(result, SmfGrouping.container)
    assert (summary.samples, summary.unmatched_samples) == (2, 2)


def test_other_node_or_other_gpu_samples_never_match(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(-30), gpu_uuid="GPU-a", fb_free_bytes=10 * GIB),  # the link
                {"ts": at(0), "gpu_uuid": "GPU-a", "node": "n2", "fb_free_bytes": 10 * GIB},
                {"ts": at(0), "gpu_uuid": "GPU-b", "fb_free_bytes": 10 * GIB},
            ]
        ),
    )
    store.append(
        "container_samples",
        cg_rows([labelled(ts=at(-30), memory_current_bytes=GIB), {"ts": at(0.5)}]),
    )
    result = aligned(store)
    assert result.rows.num_rows == 1  # only the -30 s pair
    assert result.unmatched_samples == 0  # the 0.5 s sample has no memory.current: skipped
    assert result.skipped == {"container_rows_without_memory_current": 1}
    unlinked = {r["gpu_uuid"]: r for r in result.unlinked_gpus.to_pylist()}
    assert set(unlinked) == {"GPU-a", "GPU-b"}  # GPU-a on n2 is another device entry
    assert "no pod labels" in unlinked["GPU-b"]["reason"]


def test_multi_gpu_container_and_per_container_and_per_gpu_summaries(store: Store) -> None:
    rows = []
    for s, (fa, fb) in enumerate([(10, 20), (12, 30)]):
        rows.append(labelled(ts=at(s * 10), gpu_uuid="GPU-a", fb_free_bytes=fa * GIB))
        rows.append(labelled(ts=at(s * 10), gpu_uuid="GPU-b", fb_free_bytes=fb * GIB))
    store.append("gpu_samples", gpu_rows(rows))
    store.append(
        "container_samples",
        cg_rows([labelled(ts=at(s * 10 + 1), memory_current_bytes=4 * GIB) for s in range(2)]),
    )
    result = aligned(store)
    assert result.rows.num_rows == 4
    smf = {(r["gpu_uuid"], r["ts"]): r["smf"] for r in result.rows.to_pylist()}
    expected = {
        ("GPU-a", at(1)): (10 - 4) * GIB / TOTAL,
        ("GPU-b", at(1)): (20 - 4) * GIB / TOTAL,
        ("GPU-a", at(11)): (12 - 4) * GIB / TOTAL,
        ("GPU-b", at(11)): (30 - 4) * GIB / TOTAL,
    }
    assert smf == expected

    (per_container,) = summarize_smf(result, SmfGrouping.container)
    assert per_container.container_id == CID
    assert per_container.gpu_uuids == ("GPU-a", "GPU-b")
    assert per_container.samples == 4
    assert per_container.latest_at == at(11)
    assert per_container.latest_smf == pytest.approx((8 + 26) / 2 * GIB / TOTAL, rel=1e-15)
    assert per_container.mean_smf == pytest.approx(sum(expected.values()) / 4, rel=1e-15)
    assert per_container.max_smf == expected[("GPU-b", at(11))]

    per_gpu = {s.gpu_uuid: s for s in summarize_smf(result, SmfGrouping.gpu)}
    assert set(per_gpu) == {"GPU-a", "GPU-b"}
    assert per_gpu["GPU-a"].container_ids == (CID,)
    assert per_gpu["GPU-a"].latest_smf == expected[("GPU-a", at(11))]
    assert per_gpu["GPU-a"].max_smf == expected[("GPU-a", at(11))]
    assert per_gpu["GPU-b"].mean_smf == pytest.approx((16 + 26) / 2 * GIB / TOTAL, rel=1e-15)
    assert per_gpu["GPU-a"].samples == 2
    pairs = summarize_smf(result, SmfGrouping.pair)
    assert [(p.container_id, p.gpu_uuid) for p in pairs] == [(CID, "GPU-a"), (CID, "GPU-b")]


def test_nvml_process_rows_link_without_labels(store: Store) -> None:
    store.append(
        "gpu_samples", gpu_rows([{"ts": at(0), "gpu_uuid": "GPU-a", "fb_free_bytes": 9 * GIB}])
    )
    store.append(
        "container_samples",
        cg_rows([{"ts": at(1), "memory_current_bytes": GIB, "container_id": CID2}]),
    )
    store.append(
        "gpu_processes",
        conform(
            "gpu_processes",
            pa.Table.from_pylist(
                [{"ts": at(0), "node": "n1", "gpu_uuid": "GPU-a", "pid": 42, "container_id": CID2}]
            ),
        ),
    )
    (row,) = aligned(store).rows.to_pylist()
    assert (row["container_id"], row["gpu_uuid"], row["link"]) == (CID2, "GPU-a", "nvml_process")
    assert row["smf"] == 8 * GIB / TOTAL
    assert row["namespace"] is None  # never attributed by the inventory


def test_unattributed_samples_of_a_linked_container_take_its_names(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB),
                labelled(ts=at(1), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB),
            ]
        ),
    )
    store.append(
        "container_samples",
        cg_rows(
            [
                labelled(ts=at(0), memory_current_bytes=GIB),
                {"ts": at(1), "memory_current_bytes": 2 * GIB},  # inventory not there yet
            ]
        ),
    )
    rows = aligned(store).rows.to_pylist()
    assert [r["pod"] for r in rows] == ["vllm-0", "vllm-0"]
    assert [r["memory_current_bytes"] for r in rows] == [GIB, 2 * GIB]


def test_labelled_gpu_without_cgroup_match_is_listed_with_its_label(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows([labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB, pod="other-0")]),
    )
    store.append("container_samples", cg_rows([labelled(ts=at(0), memory_current_bytes=GIB)]))
    result = aligned(store)
    assert result.rows.num_rows == 0
    (gpu,) = result.unlinked_gpus.to_pylist()
    assert gpu["labelled_as"] == "inference/other-0/vllm"
    assert "match no container_samples" in gpu["reason"]
    assert result.unlinked_containers == 1
    assert summarize_smf(result) == ()


def test_label_of_a_later_pod_with_the_same_name_does_not_link_an_old_container(
    store: Store,
) -> None:
    # The old container lived at 0-1 s; a new pod with the same name holds GPU-b from 100 s.
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB),
                labelled(ts=at(100), gpu_uuid="GPU-b", fb_free_bytes=9 * GIB),
            ]
        ),
    )
    store.append(
        "container_samples",
        cg_rows(
            [
                labelled(ts=at(0), memory_current_bytes=GIB),
                labelled(ts=at(1), memory_current_bytes=GIB),
            ]
        ),
    )
    rows = aligned(store).rows.to_pylist()
    assert {r["gpu_uuid"] for r in rows} == {"GPU-a"}


def test_dcgm_rows_win_over_nvml_rows_of_the_same_gpu(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB),
                labelled(ts=at(0.5), gpu_uuid="GPU-a", fb_free_bytes=3 * GIB, source="nvml"),
            ]
        ),
    )
    store.append("container_samples", cg_rows([labelled(ts=at(1), memory_current_bytes=GIB)]))
    (row,) = aligned(store).rows.to_pylist()
    assert row["fb_free_bytes"] == 9 * GIB


def test_mig_instances_are_matched_to_their_own_samples(store: Store) -> None:
    store.append(
        "gpu_samples",
        gpu_rows(
            [
                labelled(ts=at(0), gpu_uuid="GPU-a", mig_instance_id=1, fb_free_bytes=4 * GIB,
                         fb_total_bytes=10 * GIB),
                {"ts": at(0.5), "gpu_uuid": "GPU-a", "mig_instance_id": 2,
                 "fb_free_bytes": 9 * GIB, "fb_total_bytes": 10 * GIB},
            ]
        ),
    )  # fmt: skip
    store.append("container_samples", cg_rows([labelled(ts=at(1), memory_current_bytes=GIB)]))
    result = aligned(store)
    (row,) = result.rows.to_pylist()
    assert (row["mig_instance_id"], row["fb_free_bytes"]) == (1, 4 * GIB)
    assert row["smf"] == 3 * GIB / (10 * GIB)
    assert result.unlinked_gpus.column("mig_instance_id").to_pylist() == [2]


def test_since_window_reads_gpu_samples_from_one_skew_earlier(store: Store) -> None:
    store.append(
        "gpu_samples", gpu_rows([labelled(ts=at(9), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB)])
    )
    store.append(
        "container_samples",
        cg_rows([labelled(ts=at(s), memory_current_bytes=GIB) for s in (5, 10)]),
    )
    cfg = SmfSettings(max_skew_s=2.0)
    inputs = read_smf_inputs(store, since=at(10), settings=cfg)
    assert inputs.container_samples.num_rows == 1
    result = align_smf(inputs.gpu_samples, inputs.container_samples, settings=cfg)
    assert result.rows.column("ts").to_pylist() == [at(10)]


def test_empty_inputs_give_empty_answers() -> None:
    result = align_smf(pa.table({}), pa.table({}))
    assert result.rows.num_rows == 0
    assert result.unmatched.num_rows == 0
    assert result.unlinked_gpus.num_rows == 0
    assert result.unmatched_samples == 0
    assert (result.linked_containers, result.unlinked_containers) == (0, 0)
    for by in SmfGrouping:
        assert summarize_smf(result, by) == ()


def test_gpu_rows_without_framebuffer_are_skipped_and_counted() -> None:
    gpus = gpu_rows(
        [
            labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=9 * GIB),
            labelled(ts=at(0.5), gpu_uuid="GPU-a", fb_free_bytes=None),
            labelled(ts=at(0.7), gpu_uuid="GPU-a", fb_free_bytes=5 * GIB, fb_total_bytes=0),
        ]
    )
    result = align_smf(gpus, cg_rows([labelled(ts=at(1), memory_current_bytes=GIB)]))
    (row,) = result.rows.to_pylist()
    assert row["gpu_ts"] == at(0)
    assert result.skipped == {"gpu_rows_without_framebuffer": 2}


def test_settings_bounds() -> None:
    with pytest.raises(ValueError):
        SmfSettings(max_skew_s=0)


@given(
    free=st.integers(0, 200 * GIB),
    mem=st.integers(0, 2**40),
    total=st.integers(1, 200 * GIB),
    skew_ms=st.integers(0, 2000),
)
@settings(max_examples=40, deadline=None)
def test_sql_matches_the_formula_exactly(free: int, mem: int, total: int, skew_ms: int) -> None:
    result = align_smf(
        gpu_rows([labelled(ts=at(0), gpu_uuid="GPU-a", fb_free_bytes=free, fb_total_bytes=total)]),
        cg_rows([labelled(ts=at(skew_ms / 1000), memory_current_bytes=mem)]),
    )
    (row,) = result.rows.to_pylist()
    assert row["smf"] == smf_value(free, mem, total)
    assert row["smf"] >= 0.0
    if free <= total:
        assert row["smf"] <= 1.0
    if free <= mem:
        assert row["smf"] == 0.0
