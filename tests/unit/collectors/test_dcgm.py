"""dcgm-exporter text -> gpu_samples: exact values and units from every real capture in
``../shared/data/dcgm``, every drop reason, the parser kept between scrapes, and two
properties (generated bodies convert exactly; arbitrary text never raises)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.collectors.dcgm import (
    BLANK_SENTINEL,
    DUPLICATE,
    NO_GPU_LABELS,
    NON_FINITE,
    UNMAPPED_FAMILY,
    UNTERMINATED,
    DcgmParser,
    parse_dcgm,
)
from sits_observe.collectors.dcgm_collector import DcgmCollector
from sits_observe.collectors.exposition import (
    BLANK_VALUE,
    MALFORMED_LINE,
    MALFORMED_TIMESTAMP,
    MALFORMED_VALUE,
)
from sits_observe.domain.schema.dcgm_fields import MIB
from sits_observe.domain.tables import GPU_SAMPLES
from sits_observe.errors import CollectorError

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW_NAIVE = NOW.replace(tzinfo=None)
L4 = 'gpu="0",UUID="GPU-l4",modelName="NVIDIA L4",Hostname="node-a"'


def rows(text: str, node: str | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    result = parse_dcgm(text, now=NOW, node=node)
    table = result.tables["gpu_samples"]
    assert table.schema.equals(GPU_SAMPLES.schema, check_metadata=True)
    # What was not stored: bad input (dropped) and families without a column (ignored).
    return table.to_pylist(), dict(result.dropped + result.ignored)


def test_families_without_a_column_are_ignored_not_dropped() -> None:
    """A healthy exporter's extra families are not bad input: no drop rows every scrape."""
    result = parse_dcgm(
        f"DCGM_FI_DEV_ENC_UTIL{{{L4}}} 5\nDCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\n", now=NOW, node=None
    )
    assert dict(result.dropped) == {}
    assert dict(result.ignored) == {UNMAPPED_FAMILY: 1}


def read(shared_data: Path, name: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    return rows((shared_data / "dcgm" / name).read_text(encoding="utf-8"))


# -- the real captures ----------------------------------------------------------------------


@pytest.mark.shared_data
def test_l4_default_counters(shared_data: Path) -> None:
    """Checks ``l4-kops-aws-default-counters.prom`` (1x L4, full default counter set)."""
    (row,), dropped = read(shared_data, "l4-kops-aws-default-counters.prom")
    assert row == {
        "ts": NOW_NAIVE,
        "node": "i-030791dc5a37cd257",
        "gpu_uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        "gpu_index": 0,
        "device": "nvidia0",
        "model_name": "NVIDIA L4",
        "pci_bus_id": "00000000:31:00.0",
        "driver_version": "580.105.08",
        "mig_profile": None,
        "mig_instance_id": None,
        "namespace": None,
        "pod": None,
        "container": None,
        "fb_used_bytes": 0,
        "fb_free_bytes": 22563 * 1048576,
        "fb_reserved_bytes": 470 * 1048576,
        "fb_total_bytes": 23033 * 1048576,
        "gpu_util_ratio": 0.0,
        "mem_copy_util_ratio": 0.0,
        "gr_engine_active_ratio": 0.0,
        "sm_active_ratio": None,
        "tensor_active_ratio": 0.0,
        "dram_active_ratio": 0.0,
        "pcie_tx_bytes_per_s": 112603.0,
        "pcie_rx_bytes_per_s": 17544.0,
        "nvlink_tx_bytes_per_s": None,
        "nvlink_rx_bytes_per_s": None,
        "power_w": 16.365,
        "gpu_temp_c": 31.0,
        "memory_temp_c": 0.0,
        "sm_clock_hz": 210e6,
        "mem_clock_hz": 405e6,
        "energy_j": 4742.776,
        "xid_last": None,
        "source": "dcgm",
    }
    # ENC/DEC util, PCIe replays, 3 remapped-row families, vGPU licence: not stored.
    assert dropped == {UNMAPPED_FAMILY: 7}


@pytest.mark.shared_data
def test_l40s_default_counters(shared_data: Path) -> None:
    """Checks ``l40s-upcloud-default-counters.prom`` (1x L40S, driver 595)."""
    (row,), dropped = read(shared_data, "l40s-upcloud-default-counters.prom")
    assert row["node"] == "gpu1-wl8sg"
    assert row["model_name"] == "NVIDIA L40S"
    assert row["driver_version"] == "595.58.03"
    assert row["fb_free_bytes"] == 45459 * MIB
    assert row["fb_reserved_bytes"] == 608 * MIB
    assert row["fb_total_bytes"] == 46067 * MIB
    assert row["dram_active_ratio"] == pytest.approx(0.000131)
    assert row["energy_j"] == pytest.approx(5_551_899.580)
    assert row["pcie_tx_bytes_per_s"] == 175084.0
    assert row["power_w"] == pytest.approx(35.686)
    assert row["sm_clock_hz"] == 210e6
    assert dropped == {UNMAPPED_FAMILY: 7}


@pytest.mark.shared_data
def test_grid_vgpu(shared_data: Path) -> None:
    """Checks ``grid-a100-10c-vgpu-vks.prom`` (vGPU: no power, no GPU temperature, no PROF)."""
    (row,), dropped = read(shared_data, "grid-a100-10c-vgpu-vks.prom")
    assert row["model_name"] == "GRID A100-10C"
    assert row["node"] == "conformance-test-np1-qcqc8-bpdtl-wv2gs"
    assert (row["fb_free_bytes"], row["fb_used_bytes"], row["fb_reserved_bytes"]) == (
        9323 * MIB,
        0,
        916 * MIB,
    )
    assert row["fb_total_bytes"] == 10239 * MIB
    assert row["sm_clock_hz"] == 1410e6 and row["mem_clock_hz"] == 1215e6
    assert row["power_w"] is None and row["gpu_temp_c"] is None
    assert row["gr_engine_active_ratio"] is None
    assert dropped == {UNMAPPED_FAMILY: 3}  # ENC, DEC, vGPU licence


@pytest.mark.shared_data
def test_h100_pod_attribution(shared_data: Path) -> None:
    """Checks ``h100-k8s-sampled.prom`` (8x H100; GPU 0 carries the vLLM pod's labels)."""
    found, dropped = read(shared_data, "h100-k8s-sampled.prom")
    assert not dropped
    by_index = {r["gpu_index"]: r for r in found}
    assert sorted(by_index) == list(range(8))
    gpu0 = by_index[0]
    assert (gpu0["namespace"], gpu0["pod"], gpu0["container"]) == (
        "dynamo-workload",
        "vllm-agg-0-vllmdecodeworker-s65j5",
        "main",
    )
    assert gpu0["gpu_uuid"] == "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005"
    assert gpu0["model_name"] == "NVIDIA H100 80GB HBM3"
    assert gpu0["power_w"] == pytest.approx(113.611)
    assert gpu0["gpu_temp_c"] == 30.0
    assert all(by_index[i]["pod"] is None and by_index[i]["namespace"] is None for i in range(1, 8))
    assert [by_index[i]["power_w"] for i in range(8)] == pytest.approx(
        [113.611, 68.347, 65.709, 67.316, 68.717, 65.742, 67.328, 66.997]
    )
    assert [by_index[i]["gpu_temp_c"] for i in range(8)] == [30, 29, 26, 29, 28, 26, 28, 26]
    # the capture was truncated to 6 MEM_COPY_UTIL lines: GPUs 6 and 7 have none
    assert [by_index[i]["mem_copy_util_ratio"] for i in (5, 6, 7)] == [0.0, None, None]
    assert {r["node"] for r in found} == {"gpu-node-1"}
    assert all(r["fb_total_bytes"] is None for r in found)  # no FB family in the sample


@pytest.mark.shared_data
def test_a100_mig(shared_data: Path) -> None:
    """Checks ``a100-40gb-mig-1g5gb-nvidia-docs.prom`` (old exporter, MIG 1g.5gb instance 13)."""
    found, dropped = read(shared_data, "a100-40gb-mig-1g5gb-nvidia-docs.prom")
    assert len(found) == 2
    whole = next(r for r in found if r["mig_profile"] is None)
    mig = next(r for r in found if r["mig_profile"] is not None)
    assert whole["mig_instance_id"] is None
    assert whole["node"] == "ub20-a100-k8s"
    # no FB_RESERVED in this old exporter: total = free + used
    assert whole["fb_total_bytes"] == (35690 + 4845) * MIB
    assert whole["fb_reserved_bytes"] is None
    assert whole["energy_j"] == pytest.approx(319_159.391)
    assert whole["pcie_tx_bytes_per_s"] == 33011804.0
    assert whole["pcie_rx_bytes_per_s"] == 97863601.0
    assert whole["power_w"] == pytest.approx(409.692)
    assert whole["gr_engine_active_ratio"] == pytest.approx(0.99563)
    assert (mig["mig_profile"], mig["mig_instance_id"]) == ("1g.5gb", 13)
    assert mig["gpu_uuid"] == whole["gpu_uuid"] == "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
    assert mig["gr_engine_active_ratio"] == pytest.approx(0.995687)
    assert mig["tensor_active_ratio"] == pytest.approx(0.930433)
    assert mig["dram_active_ratio"] == pytest.approx(0.800339)
    assert mig["xid_last"] == 0
    assert mig["fb_used_bytes"] is None and mig["fb_total_bytes"] is None
    assert dropped == {UNMAPPED_FAMILY: 3}  # PCIe replays, NVLink bandwidth, vGPU licence


@pytest.mark.shared_data
def test_every_capture_ingests_without_malformed_lines(shared_data: Path) -> None:
    """Checks every ``../shared/data/dcgm/*.prom``: only unmapped families are dropped."""
    paths = sorted((shared_data / "dcgm").glob("*.prom"))
    assert len(paths) == 5
    for path in paths:
        found, dropped = read(shared_data, path.name)
        assert found, path.name
        assert set(dropped) <= {UNMAPPED_FAMILY}, (path.name, dropped)


# -- labels ---------------------------------------------------------------------------------


def test_hostname_either_case_and_node_override() -> None:
    old, _ = rows('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="old-name"} 40\n')
    new, _ = rows('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",hostname="new-name"} 40\n')
    forced, _ = rows('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",hostname="x"} 40\n', "kube-7")
    assert (old[0]["node"], new[0]["node"], forced[0]["node"]) == ("old-name", "new-name", "kube-7")


def test_empty_pod_labels_are_null() -> None:
    found, _ = rows(
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",pod="",namespace="",container=""} 50\n'
    )
    assert (found[0]["pod"], found[0]["namespace"], found[0]["container"]) == (None, None, None)
    assert found[0]["gpu_util_ratio"] == 0.5


def test_exporter_1x_names_and_labels() -> None:
    """The --use-old-namespace names of dcgm-exporter's 1.x-compatibility-metrics.csv."""
    text = (
        'dcgm_fb_used{gpu="0",uuid="GPU-old",pod_name="p",pod_namespace="ns"} 100\n'
        'dcgm_fb_free{gpu="0",uuid="GPU-old",pod_name="p",pod_namespace="ns"} 300\n'
        'dcgm_gpu_utilization{gpu="0",uuid="GPU-old",pod_name="p",pod_namespace="ns"} 25\n'
        'dcgm_fi_prof_dram_active{gpu="0",uuid="GPU-old",pod_name="p",pod_namespace="ns"} 0.5\n'
    )
    (row,), dropped = rows(text)
    assert not dropped
    assert (row["gpu_uuid"], row["pod"], row["namespace"]) == ("GPU-old", "p", "ns")
    assert row["fb_used_bytes"] == 100 * MIB
    assert row["fb_total_bytes"] == 400 * MIB
    assert row["gpu_util_ratio"] == 0.25
    assert row["dram_active_ratio"] == 0.5


def test_fb_total_exported_wins_and_nvlink_rates() -> None:
    text = (
        f"DCGM_FI_DEV_FB_TOTAL{{{L4}}} 1000\n"
        f"DCGM_FI_DEV_FB_FREE{{{L4}}} 10\n"
        f"DCGM_FI_DEV_FB_USED{{{L4}}} 20\n"
        f"DCGM_FI_PROF_NVLINK_TX_BYTES{{{L4}}} 1.5e9\n"
        f"DCGM_FI_PROF_NVLINK_RX_BYTES{{{L4}}} 2.5e9\n"
        f"DCGM_FI_PROF_SM_ACTIVE{{{L4}}} 0.25\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{L4}}} 79\n"
    )
    (row,), _ = rows(text)
    assert row["fb_total_bytes"] == 1000 * MIB
    assert (row["nvlink_tx_bytes_per_s"], row["nvlink_rx_bytes_per_s"]) == (1.5e9, 2.5e9)
    assert row["sm_active_ratio"] == 0.25
    assert row["xid_last"] == 79


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} NaN", NON_FINITE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} +Inf", NON_FINITE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} -Inf", NON_FINITE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}}", BLANK_VALUE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} ", BLANK_VALUE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 100.5", "out of range: gpu_util_ratio"),
        (f"DCGM_FI_DEV_FB_USED{{{L4}}} -1", "out of range: fb_used_bytes"),
        (f"DCGM_FI_PROF_SM_ACTIVE{{{L4}}} 1.2", "out of range: sm_active_ratio"),
        (f"DCGM_FI_DEV_MEMORY_TEMP{{{L4}}} 2147483632", BLANK_SENTINEL),  # DCGM_INT32_BLANK
        (f"DCGM_FI_PROF_DRAM_ACTIVE{{{L4}}} 140737488355328", BLANK_SENTINEL),  # FP64_BLANK
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} lots", MALFORMED_VALUE),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 5 yesterday", MALFORMED_TIMESTAMP),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 5 99999999999999999", MALFORMED_TIMESTAMP),
        (f"DCGM_FI_DEV_GPU_UTIL{{{L4} 5", MALFORMED_LINE),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0" UUID="x"} 5', MALFORMED_LINE),
        ('DCGM FI DEV{gpu="0"} 5', MALFORMED_LINE),
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="node-a"} 5', NO_GPU_LABELS),
        ("DCGM_FI_DEV_GPU_UTIL 5", NO_GPU_LABELS),
        (f"DCGM_FI_DEV_ENC_UTIL{{{L4}}} 5", UNMAPPED_FAMILY),
        (f"some_other_exporter_metric{{{L4}}} 5", UNMAPPED_FAMILY),
        ("some_other_exporter_metric 5", UNMAPPED_FAMILY),
    ],
)
def test_bad_samples_are_dropped_and_counted(line: str, reason: str) -> None:
    text = f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\n{line}\nDCGM_FI_DEV_POWER_USAGE{{{L4}}} 70\n"
    (row,), dropped = rows(text)
    assert dropped == {reason: 1}
    assert (row["gpu_temp_c"], row["power_w"]) == (40.0, 70.0)
    dropped_columns = ("gpu_util_ratio", "fb_used_bytes", "memory_temp_c", "dram_active_ratio")
    assert all(row[c] is None for c in dropped_columns)


def test_duplicate_series_keep_the_first_value() -> None:
    text = (
        f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 10\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 90\n"
        # the same series with its labels in another order is still the same series
        'DCGM_FI_DEV_GPU_UTIL{Hostname="node-a",modelName="NVIDIA L4",UUID="GPU-l4",gpu="0"} 50\n'
    )
    (row,), dropped = rows(text)
    assert row["gpu_util_ratio"] == 0.1
    assert dropped == {DUPLICATE: 2}


def test_truncated_body_drops_only_the_cut_line() -> None:
    """A body cut mid-value ('16.3' of '16.365') must not store the wrong number."""
    text = f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\nDCGM_FI_DEV_POWER_USAGE{{{L4}}} 16.3"
    (row,), dropped = rows(text)
    assert row["gpu_temp_c"] == 40.0 and row["power_w"] is None
    assert dropped == {UNTERMINATED: 1}
    # a body ending in a comment without a newline loses nothing
    (row,), dropped = rows(f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\n# EOF")
    assert row["gpu_temp_c"] == 40.0 and not dropped


def test_a_row_with_every_sample_dropped_is_not_stored() -> None:
    found, dropped = rows(
        f'DCGM_FI_DEV_GPU_UTIL{{{L4}}} NaN\nDCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-other"}} 5\n'
    )
    assert [r["gpu_uuid"] for r in found] == ["GPU-other"]
    assert dropped == {NON_FINITE: 1}


def test_sample_timestamps_stamp_the_row() -> None:
    stamped = int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp() * 1000)
    text = (
        f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40 {stamped - 1000}\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{L4}}} 70 {stamped}\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-x"} 41\n'
    )
    found, dropped = rows(text)
    assert not dropped
    assert found[0]["ts"] == datetime(2026, 1, 2, 3, 4, 5)
    assert (found[0]["gpu_temp_c"], found[0]["power_w"]) == (40.0, 70.0)
    assert found[1]["ts"] == NOW_NAIVE


def test_empty_and_garbage_bodies() -> None:
    assert rows("") == ([], {})
    found, dropped = rows("\n\n# only comments\n")
    assert found == [] and dropped == {}
    found, dropped = rows("}{\n{}\n\x00\n")
    assert found == [] and dropped == {MALFORMED_LINE: 3}


# -- the parser between scrapes ---------------------------------------------------------------


def test_parser_kept_between_scrapes_gives_the_same_rows_as_a_fresh_one() -> None:
    parser = DcgmParser()
    first = f'DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\nDCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-x"}} 41\n'
    parser.parse(first, now=NOW, node=None)
    # GPU 1 is gone, GPU 0 got a pod, a new GPU 2 appeared
    second = (
        f'DCGM_FI_DEV_GPU_TEMP{{{L4},pod="p"}} 50\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-y"} 52\n'
    )
    later = NOW + timedelta(seconds=15)
    kept = parser.parse(second, now=later, node=None).tables["gpu_samples"].to_pylist()
    fresh = parse_dcgm(second, now=later, node=None).tables["gpu_samples"].to_pylist()
    assert kept == fresh
    assert [(r["gpu_uuid"], r["pod"], r["gpu_temp_c"]) for r in kept] == [
        ("GPU-l4", "p", 50.0),
        ("GPU-y", None, 52.0),
    ]


def test_parser_forgets_when_label_sets_pile_up() -> None:
    parser = DcgmParser(max_label_sets=3)
    for pod in range(10):
        body = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-a",pod="p{pod}"}} {pod}\n'
        (row,) = parser.parse(body, now=NOW, node=None).tables["gpu_samples"].to_pylist()
        assert (row["pod"], row["gpu_temp_c"]) == (f"p{pod}", float(pod))
    assert len(parser._row_of_labels) <= 4


def test_parser_forgets_when_stale_rows_outnumber_live_ones() -> None:
    parser = DcgmParser()
    big = "".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i % 8}",UUID="GPU-{i}"}} 40\n' for i in range(2000))
    assert parser.parse(big, now=NOW, node=None).tables["gpu_samples"].num_rows == 2000
    assert len(parser._gpus) == 2000  # all live: kept
    small = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0"} 41\n'
    (row,) = parser.parse(small, now=NOW, node=None).tables["gpu_samples"].to_pylist()
    assert (row["gpu_uuid"], row["gpu_temp_c"]) == ("GPU-0", 41.0)
    assert len(parser._gpus) == 0  # 1,999 stale rows of 2,000: forgotten
    (row,) = parser.parse(small, now=NOW, node=None).tables["gpu_samples"].to_pylist()
    assert row["gpu_temp_c"] == 41.0


# -- the collector --------------------------------------------------------------------------


def test_collector_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    path.write_text(f"DCGM_FI_DEV_FB_USED{{{L4}}} 2\nDCGM_FI_DEV_FB_FREE{{{L4}}} 3\n")
    with DcgmCollector(str(path), node="kube-1") as collector:
        assert collector.name == "dcgm"
        result = collector.collect(NOW)
        result = collector.collect(NOW)  # twice: the kept parser gives the same answer
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert (row["node"], row["fb_total_bytes"]) == ("kube-1", 5 * MIB)


def test_collector_missing_file_is_a_collector_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match=r"cannot read .*missing\.prom"):
        DcgmCollector(str(tmp_path / "missing.prom")).collect(NOW)


def test_collector_oversized_file_is_a_collector_error(tmp_path: Path) -> None:
    path = tmp_path / "big.prom"
    path.write_text(f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\n" * 100)
    with pytest.raises(CollectorError, match="larger than 1000 bytes"):
        DcgmCollector(str(path), max_bytes=1000).collect(NOW)


# -- properties -----------------------------------------------------------------------------

_FAMILIES = {
    # family: (column, scale, low, high) in the exporter's unit
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_ratio", 0.01, 0, 100),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_ratio", 1.0, 0, 1),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_hz", 1e6, 0, 5000),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3, 0, 1e12),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0, 0, 1e11),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", MIB, 0, 200_000),
}


@st.composite
def _fleet(draw: st.DrawFn) -> dict[tuple[int, str], float]:
    gpus = draw(st.integers(1, 6))
    values: dict[tuple[int, str], float] = {}
    for gpu in range(gpus):
        for family in draw(st.sets(st.sampled_from(sorted(_FAMILIES)), min_size=1)):
            _, _, low, high = _FAMILIES[family]
            if family == "DCGM_FI_DEV_FB_USED":
                value = float(draw(st.integers(low, int(high))))
            else:
                value = draw(st.floats(low, high, allow_nan=False))
            values[(gpu, family)] = value
    return values


@settings(max_examples=150, deadline=None)
@given(_fleet(), st.randoms(use_true_random=False))
def test_generated_bodies_convert_exactly(values: dict[tuple[int, str], float], rnd: Any) -> None:
    lines = [
        f'{family}{{gpu="{gpu}",UUID="GPU-{gpu}",Hostname="h"}} {value!r}'
        for (gpu, family), value in values.items()
    ]
    rnd.shuffle(lines)  # order must not matter
    found, dropped = rows("\n".join(lines) + "\n")
    assert not dropped
    by_gpu = {r["gpu_index"]: r for r in found}
    assert set(by_gpu) == {gpu for gpu, _ in values}
    for (gpu, family), value in values.items():
        column, scale, _, _ = _FAMILIES[family]
        stored = by_gpu[gpu][column]
        if column == "fb_used_bytes":
            assert stored == int(value) * MIB
        else:
            assert math.isclose(stored, value * scale, rel_tol=1e-12, abs_tol=1e-300)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    result = parse_dcgm(text, now=NOW, node=None)
    assert result.tables["gpu_samples"].schema.equals(GPU_SAMPLES.schema)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                f"DCGM_FI_DEV_GPU_UTIL{{{L4}}} 5",
                "DCGM_FI_DEV_FB_USED{",
                "}",
                '"',
                "\\",
                " NaN",
                "\n",
                "# HELP x",
                'gpu="1"',
                "1700000000000",
            ]
        )
    )
)
def test_arbitrary_fragments_never_raise(parts: list[str]) -> None:
    parse_dcgm(" ".join(parts), now=NOW, node=None)
    parse_dcgm("".join(parts), now=NOW, node="n")
