"""``sits-observe experiment`` end to end: a tiny experiment (2 nodes x 4 GPUs, a few simulated
minutes, both arms) through the CLI, the emulator, the service's ingest and extender handler,
the agents and the controller; JSON twice (identical), PNG, and the flag errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from sits_observe.lab.experiment.png import COLOURS, MARGIN_PX, PANEL_PX
from sits_observe.surfaces.cli.main import app
from tests.unit.analytics.test_heatmap_png import decode

pytestmark = [pytest.mark.slow, pytest.mark.k8s]

TINY = ("--seeds", "1", "--hours", "0.05", "--nodes", "2", "--gpus-per-node", "4")


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["experiment", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.fixture(scope="module")
def documents() -> tuple[str, str]:
    """The JSON of the same tiny experiment, run twice."""
    texts = []
    for _ in range(2):
        code, stdout, stderr = invoke("--arms", "kube-default,kube-sits", *TINY, "--format", "json")
        assert code == 0, stdout + stderr
        assert "kube-sits seed 0:" in stderr and "wall time" in stderr
        texts.append(stdout)
    return texts[0], texts[1]


def test_the_same_seed_gives_identical_json(documents: tuple[str, str]) -> None:
    assert documents[0] == documents[1]


def test_both_arms_ran_the_same_workload_through_the_production_path(
    documents: tuple[str, str],
) -> None:
    doc: Any = json.loads(documents[0])
    assert doc["settings"]["seeds"] == [0] and doc["same_workload"] is True
    default, sits = (doc["arms"][a]["runs"][0] for a in ("kube-default", "kube-sits"))
    for run in (default, sits):
        assert run["gpu_pods"] > 0 and run["gpu_pods"] == default["gpu_pods"]
        assert 0 < run["gpu_allocation_ratio"] <= 1
        # Utilisation and latency come back from the store: dcgm-exporter text, the agents'
        # batches over HTTP, the request logs.
        assert 0 < run["gpu_utilisation_ratio"] <= 1
        assert run["requests"] > 0 and run["latency_p95_s"] >= run["latency_p50_s"] > 0
        assert run["frag_ratio"] is not None and 0 <= run["frag_ratio"] <= 1
    # kube-default: no extender, no controller.
    assert set(default["scheduled_by_path"]) == {"default"}
    assert default["extender_calls"] == {} and default["controller_applied"] == 0
    # kube-sits: GPU pods bound by the extender's bind verb after its filter and prioritize
    # scored them, and the controller's decisions applied in the emulator.
    assert sits["scheduled_by_path"]["extender_bind"] > 0
    assert sits["extender_calls"]["filter_scored"] > 0
    assert sits["extender_calls"]["prioritize_scored"] > 0
    assert sits["extender_calls"]["bind_bound"] == sits["scheduled_by_path"]["extender_bind"]
    assert sits["controller_applied"] > 0
    assert sum(sits["controller_applied_by_action"].values()) == sits["controller_applied"]
    means = doc["arms"]["kube-sits"]["mean"]
    assert means["frag_ratio"] == sits["frag_ratio"]  # one seed: the mean is the run
    (target,) = doc["targets"]
    assert (target["arm"], target["against"], target["seed"]) == ("kube-sits", "kube-default", 0)
    assert target["met"] == (
        target["frag_lower"] and target["waiting_lower"] and target["p95_no_worse"]
    )


def test_an_ablation_arm_says_what_its_module_is_worth() -> None:
    """kube-sits against kube-sits without its controller, on the same workload: the
    controller's worth in decisions applied is every decision kube-sits applied."""
    arms = "kube-sits,kube-sits-no-controller"
    code, stdout, stderr = invoke(
        "--arms", arms, *TINY[:2], "--hours", "0.03", *TINY[4:], "--format", "json"
    )
    assert code == 0, stdout + stderr
    doc: Any = json.loads(stdout)
    (entry,) = doc["ablation"]
    assert (entry["arm"], entry["against"]) == ("kube-sits-no-controller", "kube-sits")
    assert entry["module"] == "the controller (the extender alone)"
    sits, alone = (doc["arms"][a]["runs"][0] for a in arms.split(","))
    assert alone["controller_applied"] == 0 and alone["extender_calls"]["prioritize_scored"] > 0
    assert entry["worth"]["controller_applied"]["mean"] == sits["controller_applied"] > 0
    assert entry["worth"]["frag_ratio"]["mean"] == pytest.approx(
        sits["frag_ratio"] - alone["frag_ratio"]
    )
    code, stdout, _ = invoke("--arms", arms, *TINY[:2], "--hours", "0.03", *TINY[4:])
    assert code == 0 and "what each module is worth" in stdout


def test_png_draws_both_arms_in_both_panels(tmp_path: Path) -> None:
    path = tmp_path / "experiment.png"
    args = ("--arms", "kube-default,kube-sits", *TINY, "--format", "png", "--out", str(path))
    code, stdout, stderr = invoke(*args)
    assert code == 0, stdout + stderr
    image, text = decode(path.read_bytes())
    assert text["Legend"].startswith("kube-default: #") and ", kube-sits: #" in text["Legend"]
    for top in (MARGIN_PX, 2 * MARGIN_PX + PANEL_PX):
        panel = image[top : top + PANEL_PX]
        for colour in COLOURS[:2]:
            assert np.all(panel == np.array(colour, dtype=np.uint8), axis=2).any()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--arms", "kube-default,fifo"), "unknown arm 'fifo'"),
        (("--format", "png"), "--format png needs --out FILE.png"),
        (("--step-s", "4", "--inventory-every-s", "10"), "not a multiple of step_s 4"),
        (("--scheduler-config", "/nonexistent.yaml"), "/nonexistent.yaml not found"),
        (("--hours", "0"), "--hours"),
    ],
)
def test_bad_flags_get_one_line_errors(args: tuple[str, ...], message: str) -> None:
    code, stdout, stderr = invoke(*args)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert stdout == ""
