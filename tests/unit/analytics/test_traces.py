"""Alibaba trace CSVs (cluster-trace-gpu-v2023 schema) into typed arrays, with clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.traces.cluster_trace import (
    load_node_list,
    load_placements,
    load_pod_list,
)
from sits_observe.errors import ParseError

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"


def write(tmp_path: Path, text: str, name: str = "f.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_node_list(tmp_path: Path) -> None:
    nodes = load_node_list(
        write(
            tmp_path,
            NODES + "n0,64000,262144,2,P100\n n1 , 96000 ,393216,8, V100M32\ncpu,8000,1024,0,\n",
        )
    )
    assert nodes.names == ("n0", "n1", "cpu")
    assert nodes.cpu_milli.tolist() == [64000, 96000, 8000]
    assert nodes.memory_mib.dtype == np.int64
    assert nodes.gpu_count.tolist() == [2, 8, 0]
    assert nodes.gpu_model == ("P100", "V100M32", "")
    assert len(nodes) == 3


def test_pod_list(tmp_path: Path) -> None:
    pods = load_pod_list(
        write(
            tmp_path,
            PODS + "p0,12000,16384,1,460,,LS\np1,4000,0,0,0,,BE\np2,8000,0,2,1000,V100M32|A10,LS\n",
        )
    )
    assert pods.names == ("p0", "p1", "p2")
    assert pods.shape(0) == PodShape(12000, 1, 460)
    assert pods.shape(1).cpu_only
    assert pods.shape(2) == PodShape(8000, 2, 1000, ("A10", "V100M32"))
    assert len(pods.shapes()) == 3


def test_gpu_spec_column_is_optional(tmp_path: Path) -> None:
    pods = load_pod_list(
        write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,5\n")
    )
    assert pods.gpu_types == ((),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sn,cpu_milli,gpu\nn,1,1\n", "missing column(s) memory_mib, model"),
        (NODES + "n,abc,1,1,A\n", "line 2: cpu_milli 'abc': expected an integer >= 0"),
        (NODES + "n,1,1,1,A\nm,1,1,-2,A\n", "line 3: gpu '-2': expected an integer >= 0"),
        (NODES + "n,1,1,1,A\nn,1,1,1,A\n", "line 3: duplicate sn 'n' (first on line 2)"),
        (NODES + "n,1,1,2,\n", "line 2: node 'n' has 2 GPUs but no model"),
        (NODES + ",1,1,0,\n", "line 2: blank sn"),
    ],
)
def test_node_list_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_node_list(write(tmp_path, text))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,1,1,0,500,,LS", "gpu_milli 500 with num_gpu 0"),
        ("p,1,1,2,500,,LS", "num_gpu 2 with a partial share 500"),
        ("p,1,1,1,0,,LS", "gpu_milli 0 outside 1-1000"),
        ("p,1,1,1,1500,,LS", "gpu_milli 1500 outside 1-1000"),
        ("p,1.5,1,1,100,,LS", "cpu_milli '1.5': expected an integer"),
        ("p,1,1,,100,,LS", "num_gpu is blank: expected an integer"),
    ],
)
def test_pod_list_errors(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(ParseError, match=f"line 2: .*{message}"):
        load_pod_list(write(tmp_path, PODS + row + "\n"))


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="no such file"):
        load_node_list(tmp_path / "absent.csv")
    with pytest.raises(ParseError, match="not a readable CSV file"):
        load_pod_list(write(tmp_path, ""))


def test_placements(tmp_path: Path) -> None:
    placements = load_placements(write(tmp_path, "pod,node,gpu_index\na,n0,3\nb,n1,0|1\nc,n2,\n"))
    assert placements.pods == ("a", "b", "c")
    assert placements.nodes == ("n0", "n1", "n2")
    assert placements.gpu_indices == ((3,), (0, 1), None)
    assert placements.lines == (2, 3, 4)
    no_index = load_placements(write(tmp_path, "pod,node\na,n0\n", "b.csv"))
    assert no_index.gpu_indices == (None,)
    for text, message in (
        ("pod,node,gpu_index\na,n0,x\n", "gpu_index 'x' is not an integer"),
        ("pod,node,gpu_index\na,n0,1|1\n", "must be distinct"),
        ("pod,node,gpu_index\na,n0,-1\n", "must be distinct and >= 0"),
        ("pod,node\na,\n", "line 2: pod and node must not be blank"),
        ("pod,gpu_index\na,1\n", "missing column"),
    ):
        with pytest.raises(ParseError, match=message):
            load_placements(write(tmp_path, text, "bad.csv"))


@pytest.mark.shared_data
def test_real_alibaba_files(shared_data: Path) -> None:
    """SOURCES.md: 1,213 nodes with 6,212 GPUs; 8,152 pods, none with a GPU-model constraint in
    the default workload; 1,088 CPU-only, 6,989 one-GPU, 16 two-, 15 four-, 44 eight-GPU pods."""
    base = shared_data / "traces" / "alibaba-gpu-v2023"
    nodes = load_node_list(base / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and int(nodes.gpu_count.sum()) == 6212
    assert set(nodes.gpu_model) == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}
    pods = load_pod_list(base / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    counts = dict(zip(*np.unique(pods.num_gpu, return_counts=True), strict=True))
    assert counts == {0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44}
    assert all(types == () for types in pods.gpu_types)
