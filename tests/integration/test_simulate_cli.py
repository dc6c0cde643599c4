"""``sits-observe simulate``: JSON shape, one policy or all, the table, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sits_observe.surfaces.cli.main import app

POLICIES = [
    "random",
    "dotprod",
    "clustering",
    "packing",
    "bestfit",
    "fgd",
    "sits",
    "kube-default",
    "kube-sits",
    "kube-sits-gpuhint",
    "kube-sits-nobind",
]


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["simulate", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    """Four nodes (12 GPUs) and 14 pods requesting 9.4 GPUs, so 130% needs inflating."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n0,32000,131072,4,A\nn1,32000,131072,4,A\nn2,16000,65536,2,B\nn3,16000,65536,2,B\n"
    )
    pods = tmp_path / "pods.csv"
    rows = [
        "p00,4000,8192,1,500,", "p01,4000,8192,1,500,", "p02,2000,4096,1,300,",
        "p03,2000,4096,1,300,", "p04,8000,16384,1,1000,", "p05,8000,16384,1,1000,",
        "p06,6000,8192,0,0,", "p07,16000,32768,2,1000,", "p08,4000,8192,1,700,",
        "p09,4000,8192,1,700,", "p10,2000,4096,1,400,", "p11,8000,16384,1,1000,",
        "p12,3000,4096,0,0,", "p13,4000,8192,1,1000,",
    ]  # fmt: skip
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "\n".join(rows))
    return nodes, pods


def run_json(trace: tuple[Path, Path], *args: str) -> Any:
    nodes, pods = trace
    code, stdout, stderr = invoke(
        "--nodes", str(nodes), "--pods", str(pods), "--format", "json", "--workers", "1", *args
    )
    assert code == 0, stdout + stderr
    return json.loads(stdout)


def test_one_policy_json_shape(trace: tuple[Path, Path]) -> None:
    doc = run_json(trace, "--policy", "fgd", "--seeds", "3", "--seed-base", "5")
    assert doc["policy"] == "fgd"
    assert doc["seeds"] == [5, 6, 7]
    assert doc["load_ratio"] == 1.3 and doc["total_gpus"] == 12
    curve = doc["curve"]
    assert [p["arrived"] for p in curve] == pytest.approx([i / 100 for i in range(131)])
    for point in curve:
        for name in ("alloc_ratio", "frag_ratio", "frag_amount_ratio"):
            assert point[f"{name}_min"] <= point[name] + 1e-12 <= point[f"{name}_max"] + 2e-12
            assert point[f"{name}_min"] >= 0 and point[f"{name}_max"] <= 1
        assert point["alloc_ratio_max"] <= point["arrived"] + 1e-12
    allocs = [p["alloc_ratio"] for p in curve]
    assert allocs == sorted(allocs) and allocs[-1] > 0.5
    unallocated = doc["unallocated_gpus"]
    assert unallocated["min"] <= unallocated["mean"] <= unallocated["max"]
    assert unallocated["mean"] == pytest.approx(12 * (1 - doc["alloc_ratio"]["mean"]))
    failure = doc["first_failure_arrived"]
    assert failure is not None and 0 < failure["min"] <= failure["mean"] <= failure["max"] <= 1.3
    assert doc["seeds_with_failure"] == 3


def test_all_policies_give_a_list_in_order(trace: tuple[Path, Path]) -> None:
    docs = run_json(trace, "--policy", "all", "--seeds", "2", "--load", "1.1")
    assert [d["policy"] for d in docs] == POLICIES
    for doc in docs:
        assert len(doc["curve"]) == 111 and doc["seeds"] == [0, 1]
    # Every policy sees the same arrivals: identical curves at 10% arrived for every policy
    # that has not failed a pod by then.
    early = [
        d["curve"][10]["alloc_ratio"]
        for d in docs
        if d["first_failure_arrived"] is None or d["first_failure_arrived"]["min"] > 0.1
    ]
    assert len(early) >= 6 and len(set(early)) == 1


def test_table_and_processes(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    code, stdout, stderr = invoke(
        "--nodes", str(nodes), "--pods", str(pods), "--seeds", "2", "--workers", "2"
    )
    assert code == 0, stdout + stderr
    for name in POLICIES:  # the summary's policy column is never cut
        assert re.search(rf"^\s*{name}\s", stdout, re.MULTILINE), name
    assert "GPU allocation by arrived load" in stdout
    assert "unalloc" in stdout and "130%" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--policy", "tetris"), "choose one of random"),
        (("--load", "0"), "--load"),
        (("--tie-break", "coin"), "--tie-break"),
        (("--workload", "gpuhalf"), "unknown workload variant 'gpuhalf'"),
        (("--policy", "kube-sits", "--scheduler-config", "/nonexistent.yaml"), "cannot read"),
    ],
)
def test_bad_flags_exit_2(trace: tuple[Path, Path], args: tuple[str, ...], message: str) -> None:
    nodes, pods = trace
    code, _, stderr = invoke("--nodes", str(nodes), "--pods", str(pods), *args)
    assert code == 2
    assert message in " ".join(stderr.split())


def test_bad_files_exit_2(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, _ = trace
    code, _, stderr = invoke("--nodes", str(nodes), "--pods", str(tmp_path / "none.csv"))
    assert code == 2 and "no such file" in " ".join(stderr.split())
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,0,0,0\n")
    code, _, stderr = invoke("--nodes", str(nodes), "--pods", str(cpu_only))
    assert code == 2 and "requesting 0 milli-GPU" in " ".join(stderr.split())


def test_kube_sits_replays_a_variant_through_the_extender(trace: tuple[Path, Path]) -> None:
    """The shipped configuration on a generated variant; the same seed gives the same replay."""
    args = ("--policy", "kube-sits", "--workload", "gpushare100", "--seeds", "2")
    doc = run_json(trace, *args)
    assert (doc["policy"], doc["workload"], doc["seeds"]) == ("kube-sits", "gpushare100", [0, 1])
    assert doc["alloc_ratio"]["mean"] > 0.5
    again = run_json(trace, *args)
    assert again | {"pods_per_s": 0} == doc | {"pods_per_s": 0}  # speed is not deterministic


def test_a_scheduler_config_without_extenders_is_refused(
    trace: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes, pods = trace
    bare = tmp_path / "bare.yaml"
    bare.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    )
    code, _, stderr = invoke(
        "--nodes", str(nodes), "--pods", str(pods), "--policy", "kube-sits-gpuhint",
        "--scheduler-config", str(bare),
    )  # fmt: skip
    assert code == 2 and "has no extender" in " ".join(stderr.split())
