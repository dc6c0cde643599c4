"""Report ``affinity`` and the ``fragmentation`` report's precision split, on a DuckDB file:
the extender's hand-computed cluster (:mod:`tests.unit.control.extender_support`) plus an
A100 node ``gpu-e`` (GPU product only in its GPU samples) holding one more replica of
serve/llm (2 GPUs, bf16, llama-70b-instruct) and a quantised pod (half a GPU, int4).

By hand: serve/llm then runs on gpu-b (H100, Hopper) and gpu-e (A100, Ampere): the one workload
across generations. Per precision class (newest snapshot): bf16 1 pod, 2,000 milli on gpu-e;
int4 1 pod, 500 milli on gpu-e (so gpu-e is shared by two classes); undeclared the six other
GPU pods, 3 x 2,000 + 1,000 + 2 x 4,000 = 15,000 milli on gpu-b, gpu-c, gpu-d, none shared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.errors import NoDataError
from sits_observe.reports import affinity, fragmentation
from sits_observe.reports.registry import find_report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import Window, WindowRequest
from sits_observe.store import Store
from tests.unit.control.extender_support import NOW, nodes_table, write_cluster

A100 = "NVIDIA A100-SXM4-80GB"
AT = NOW - timedelta(seconds=10)
WINDOW = Window(None, NOW, "given")


def _stack(model: str, precision: str, gpus: int) -> str:
    return json.dumps(
        {
            "metadata": {"annotations": {"sits.io/model": model, "sits.io/precision": precision}},
            "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
        }
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("affinity") / "affinity.duckdb"
    with Store.open(path) as s:
        write_cluster(s)
        s.append("nodes", nodes_table(AT, {"gpu-e": (8, None, 80, 64_000)}))
        s.append(
            "gpu_samples",
            pa.table(
                {
                    "ts": pa.array([AT + timedelta(seconds=5)], pa.timestamp("us")),
                    "node": ["gpu-e"],
                    "gpu_uuid": ["GPU-gpu-e-0"],
                    "gpu_index": [0],
                    "model_name": [A100],
                }
            ),
        )
        s.append(
            "pods",
            pa.table(
                {
                    "ts": pa.array([AT, AT], pa.timestamp("us")),
                    "pod_uid": ["uid-llm-e", "uid-quant-0"],
                    "namespace": ["serve", "serve"],
                    "pod": ["llm-5d8f7c9b4-e1e1e", "quant-0"],
                    "node": ["gpu-e", "gpu-e"],
                    "phase": ["Running", "Running"],
                    "workload": ["llm", "quant"],
                    "gpu_request": pa.array([2, 1], pa.int32()),
                    "gpu_milli": pa.array([1000, 500], pa.int32()),
                    "cpu_request_milli": [4000, 1000],
                    "gpu_stack_json": [
                        _stack("llama-70b-instruct", "BF16", 2),
                        _stack("bert-base-quant-v2", "int4", 1),
                    ],
                }
            ),
        )
        yield s


RULES_YAML = (
    "rules:\n"
    "  - model_pattern: 'llama-70b.*'\n    generations: [hopper]\n"
    "  - model_pattern: 'bert-base-quant.*'\n    gpu_products: 'L4|T4'\n"
    "    precisions: [int8, int4]\n"
)


def test_workload_across_generations(store: Store) -> None:
    report = affinity.build(store, WINDOW, affinity.AffinityQuery())
    assert report.main.records() == [
        {
            "namespace": "serve",
            "workload": "llm",
            "pods": 4,
            "gpus": 8,
            "nodes": 2,
            "generations": "ampere | hopper",
            "products": f"{A100} | NVIDIA H100 80GB HBM3",
            "mixed_generations": True,
        }
    ]
    assert report.facts["mixed_generation_workloads"] == 1
    assert report.facts["gpu_pods"] == 8
    assert report.facts["violations"] is None
    assert report.table("violations").records() == []
    by_generation = {r["generation"]: r for r in report.table("generations").records()}
    assert {g: (r["pods"], r["gpus"], r["workloads"]) for g, r in by_generation.items()} == {
        "ada": (1, 1, 1),  # embed on gpu-c
        "ampere": (2, 3, 2),  # llm and quant on gpu-e
        "hopper": (5, 14, 3),  # llm x3, big-0, big-1
    }


def test_rule_violations(store: Store, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_YAML, encoding="utf-8")
    report = affinity.build(store, WINDOW, affinity.AffinityQuery(rules=rules))
    rows = report.table("violations").records()
    assert [(r["pod"], r["node"], r["generation"], r["precision"]) for r in rows] == [
        ("llm-5d8f7c9b4-e1e1e", "gpu-e", "ampere", "bf16"),
        ("quant-0", "gpu-e", "ampere", "int4"),
    ]
    assert rows[0]["rule"] == "llama-70b.* -> generations hopper"
    assert report.facts["violations"] == 2


def test_registered_and_needs_pods(tmp_path: Path) -> None:
    assert find_report("affinity") is affinity.SPEC
    with Store.open(tmp_path / "empty.duckdb") as empty, pytest.raises(NoDataError, match="pods"):
        affinity.build(empty, WINDOW, affinity.AffinityQuery())


def test_fragmentation_split_by_precision(store: Store) -> None:
    """F(M_p) by hand (FGD: a pod's unusable idle GPUs on each node, weighted over M_p).

    - bf16 (one 2-GPU pod): fits on every GPU node with 2 whole GPUs free; the only partial
      GPU is gpu-e's half-used one: 500 milli;
    - int4 (one 500-milli share): every GPU with >= 500 free can take it: 0;
    - undeclared (2-GPU x3, 4-GPU x2, 1-GPU x1: weights 1/2, 1/3, 1/6): a 4-GPU pod fits
      neither gpu-b (2 free) nor gpu-c (3 free): 2,000/3 + 3,000/3; gpu-e's half GPU is
      unusable to all of them: + 500.
    """
    report = fragmentation.build(store, WINDOW, fragmentation.FragmentationQuery())
    rows = {r["precision"]: r for r in report.table("precision").records()}
    assert set(rows) == {"bf16", "int4", "undeclared"}
    assert rows["bf16"]["frag_milli"] == pytest.approx(500)
    assert rows["int4"]["frag_milli"] == pytest.approx(0)
    assert rows["undeclared"]["frag_milli"] == pytest.approx(2000 / 3 + 1000 + 500)
    held = {p: (r["pods"], r["held_milli"], r["nodes"], r["shared_nodes"]) for p, r in rows.items()}
    assert held == {
        "bf16": (1, 2000, 1, 1),
        "int4": (1, 500, 1, 1),
        "undeclared": (6, 15000, 3, 0),
    }


def test_fragmentation_unchanged_without_declared_precision(tmp_path: Path) -> None:
    with Store.open(tmp_path / "plain.duckdb") as plain:
        write_cluster(plain)
        report = fragmentation.build(plain, WINDOW, fragmentation.FragmentationQuery())
    assert report.table_names() == ["cluster", "causes", "typical_pods", "nodes"]


def test_until_newest_reaches_the_gpu_samples_that_name_a_product(store: Store) -> None:
    """gpu-e's product is only in a GPU sample 5 s after the inventory: ``--until newest``
    must cover it (the report reads gpu_samples), else gpu-e would have no generation."""
    spec = find_report("affinity")
    report = run_report(spec, store, WindowRequest(None, "newest"), affinity.AffinityQuery())
    assert report.main.records()[0]["generations"] == "ampere | hopper"
