"""Alibaba GPU cluster trace (cluster-trace-gpu-v2023) files as typed numpy-backed tables.

Schemas (alibaba/clusterdata ``cluster-trace-gpu-v2023/csv``; the ATC'23 FGD artifact reads
the same files):

- node list (``openb_node_list_*.csv``): ``sn, cpu_milli, memory_mib, gpu, model`` — one row
  per node: its CPU in milli-cores, memory in MiB, GPU count and GPU model (blank = none).
- pod list (``openb_pod_list_*.csv``): ``name, cpu_milli, memory_mib, num_gpu, gpu_milli,
  gpu_spec, ...`` — one row per task: ``gpu_milli`` is the share of *each* GPU (0-1000, partial
  only when ``num_gpu`` is 1), ``gpu_spec`` the ``|``-separated allowed GPU models (blank =
  any). Other columns (qos, phase, times) are ignored here.
- placements (ours, for ``sits-observe fragmentation --placements``): ``pod, node[,
  gpu_index]`` — pod name from the pod list, node ``sn`` from the node list, and the GPU
  index(es) on that node: required for a partial-GPU pod (one index), optional for whole-GPU
  pods (``|``-separated, as many as ``num_gpu``; blank = the lowest-indexed free GPUs), blank
  for CPU-only pods.

Every problem raises :class:`ParseError` naming the file, the line (1 = header) and the bad
value. Extra columns are allowed; missing required columns are listed.

polars is imported by the functions that read a file, not at the top: the typed lists are
part of the FGD cluster state (:mod:`.fgd.cluster`), which ``serve`` imports before its port
is up, and polars (about 0.15 s) would delay the scheduler extender's first answer
(docs/extender.md, cold start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.model import (
    PodShape,
    normalise_gpu_types,
    shape_problem,
)
from sits_observe.errors import ParseError

if TYPE_CHECKING:
    import polars as pl

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
PLACEMENT_COLUMNS = ("pod", "node")

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class NodeList:
    """Nodes of a trace, one entry per node in file order."""

    names: tuple[str, ...]
    cpu_milli: Int64Array
    memory_mib: Int64Array
    gpu_count: Int64Array
    gpu_model: tuple[str, ...]
    source: str = ""

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class PodList:
    """Pods (tasks) of a trace, one entry per pod in file order."""

    names: tuple[str, ...]
    cpu_milli: Int64Array
    memory_mib: Int64Array
    num_gpu: Int64Array
    gpu_milli: Int64Array
    gpu_types: tuple[tuple[str, ...], ...]
    source: str = ""

    def __len__(self) -> int:
        return len(self.names)

    def shape(self, i: int) -> PodShape:
        """The request of pod ``i``."""
        return PodShape(
            int(self.cpu_milli[i]), int(self.num_gpu[i]), int(self.gpu_milli[i]), self.gpu_types[i]
        )

    def shapes(self) -> list[PodShape]:
        """Every pod's request, in file order."""
        return [self.shape(i) for i in range(len(self))]


@dataclass(frozen=True)
class Placements:
    """Rows of a placements file: pod ``pods[i]`` runs on ``nodes[i]``."""

    pods: tuple[str, ...]
    nodes: tuple[str, ...]
    gpu_indices: tuple[tuple[int, ...] | None, ...]
    lines: tuple[int, ...]
    source: str = ""

    def __len__(self) -> int:
        return len(self.pods)


def load_node_list(path: str | Path) -> NodeList:
    """Read a node list CSV (``sn, cpu_milli, memory_mib, gpu, model``)."""
    frame = _read(path, NODE_COLUMNS)
    names = _names(frame, "sn", path)
    cpu = _ints(frame, "cpu_milli", path, minimum=0)
    memory = _ints(frame, "memory_mib", path, minimum=0)
    gpus = _ints(frame, "gpu", path, minimum=0)
    models = tuple(m.strip() for m in frame["model"].fill_null("").to_list())
    for i, (count, model) in enumerate(zip(gpus, models, strict=True)):
        if count > 0 and not model:
            raise ParseError(
                f"{path}: line {i + 2}: node {names[i]!r} has {count} GPUs but no model"
            )
    return NodeList(names, cpu, memory, gpus, models, str(path))


def load_pod_list(path: str | Path) -> PodList:
    """Read a pod list CSV (``name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]``)."""
    frame = _read(path, POD_COLUMNS)
    names = _names(frame, "name", path)
    cpu = _ints(frame, "cpu_milli", path, minimum=0)
    memory = _ints(frame, "memory_mib", path, minimum=0)
    num_gpu = _ints(frame, "num_gpu", path, minimum=0)
    gpu_milli = _ints(frame, "gpu_milli", path, minimum=0)
    for i in np.flatnonzero(
        ((num_gpu == 0) & (gpu_milli != 0))
        | ((num_gpu > 0) & ((gpu_milli < 1) | (gpu_milli > 1000)))
        | ((num_gpu > 1) & (gpu_milli != 1000))
    )[:1]:
        problem = shape_problem(int(cpu[i]), int(num_gpu[i]), int(gpu_milli[i]))
        raise ParseError(f"{path}: line {i + 2}: pod {names[i]!r}: {problem}")
    specs = frame["gpu_spec"].to_list() if "gpu_spec" in frame.columns else [None] * len(names)
    types = tuple(normalise_gpu_types(spec) for spec in specs)
    return PodList(names, cpu, memory, num_gpu, gpu_milli, types, str(path))


def load_placements(path: str | Path) -> Placements:
    """Read a placements CSV (``pod, node[, gpu_index]``); see the module docstring."""
    frame = _read(path, PLACEMENT_COLUMNS)
    pods = tuple(str(v or "").strip() for v in frame["pod"].to_list())
    nodes = tuple(str(v or "").strip() for v in frame["node"].to_list())
    raw = frame["gpu_index"].to_list() if "gpu_index" in frame.columns else [None] * len(pods)
    indices: list[tuple[int, ...] | None] = []
    for i, (pod, node, text) in enumerate(zip(pods, nodes, raw, strict=True)):
        line = i + 2
        if not pod or not node:
            raise ParseError(f"{path}: line {line}: pod and node must not be blank")
        indices.append(_gpu_indices(text, path, line))
    return Placements(pods, nodes, tuple(indices), tuple(range(2, len(pods) + 2)), source=str(path))


# -- helpers ---------------------------------------------------------------------------------


def _read(path: str | Path, required: Sequence[str]) -> pl.DataFrame:
    import polars as pl  # on first use: the module docstring

    try:
        frame = pl.read_csv(path, infer_schema=False)
    except FileNotFoundError as exc:
        raise ParseError(f"{path}: no such file") from exc
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ParseError(f"{path}: not a readable CSV file: {exc}") from exc
    frame = frame.rename({c: c.strip() for c in frame.columns})
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ParseError(
            f"{path}: missing column(s) {', '.join(missing)}; found: {', '.join(frame.columns)}; "
            f"required: {', '.join(required)}"
        )
    return frame


def _names(frame: pl.DataFrame, column: str, path: str | Path) -> tuple[str, ...]:
    names = tuple(str(v or "").strip() for v in frame[column].to_list())
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name:
            raise ParseError(f"{path}: line {i + 2}: blank {column}")
        if name in seen:
            raise ParseError(
                f"{path}: line {i + 2}: duplicate {column} {name!r} (first on line {seen[name]})"
            )
        seen[name] = i + 2
    return names


def _ints(frame: pl.DataFrame, column: str, path: str | Path, *, minimum: int) -> Int64Array:
    import polars as pl  # on first use: the module docstring

    text = frame[column].str.strip_chars()
    values = text.cast(pl.Int64, strict=False)
    bad = values.is_null() | (values < minimum)
    if bad.any():
        i = int(bad.arg_max() or 0)
        shown = "is blank" if text[i] is None else f"{text[i]!r}"
        raise ParseError(
            f"{path}: line {i + 2}: {column} {shown}: expected an integer >= {minimum}"
        )
    return values.to_numpy().astype(np.int64)


def _gpu_indices(text: str | None, path: str | Path, line: int) -> tuple[int, ...] | None:
    if text is None or not text.strip():
        return None
    parts = text.strip().split("|")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ParseError(
            f"{path}: line {line}: gpu_index {text!r} is not an integer or '|'-separated integers"
        ) from None
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise ParseError(f"{path}: line {line}: gpu_index {text!r} must be distinct and >= 0")
    return values
