"""CLI: ``sits-observe fragmentation`` — cluster GPU fragmentation (FGD, USENIX ATC 2023).

Two sources, one report:

- a trace: ``--nodes`` node list and ``--workload`` pod list in the Alibaba
  cluster-trace-gpu-v2023 schema, optionally ``--placements`` (``pod, node[, gpu_index]``)
  for a cluster that is not empty;
- the live cluster: ``--db`` (latest ``nodes`` / ``pods`` inventory snapshots; the workload
  from pods seen within ``--since``).

The measure, its causes and the JSON keys are described in docs/analytics/fragmentation-fgd.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import typer
from pydantic import ValidationError

from sits_observe.analytics.fgd import FragmentationReport, fragmentation
from sits_observe.analytics.fgd_cluster import ClusterState, apply_placements
from sits_observe.analytics.fgd_live import live_cluster
from sits_observe.analytics.fgd_model import CAUSES, PodShape
from sits_observe.analytics.fgd_workload import (
    TargetWorkload,
    TypicalPodSettings,
    typical_pods,
)
from sits_observe.analytics.traces import load_node_list, load_placements, load_pod_list
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.surfaces.cli.common import out, parse_duration_s, run_cli
from sits_observe.surfaces.cli.console import data_table, note


class FragFormat(StrEnum):
    """Output formats of ``fragmentation``."""

    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    """Add the ``fragmentation`` command to ``app``."""

    @app.command("fragmentation")
    def fragmentation_cmd(
        *,
        nodes: Path | None = typer.Option(
            None, "--nodes", help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)"
        ),
        workload: Path | None = typer.Option(
            None,
            "--workload",
            help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...)",
        ),
        placements: Path | None = typer.Option(
            None, "--placements", help="placements CSV (pod, node[, gpu_index]); default: none"
        ),
        db: Path | None = typer.Option(None, "--db", help="DuckDB store: the live cluster"),
        since: str = typer.Option(
            "24h", "--since", help="with --db: workload from pods seen this long before (s/m/h/d)"
        ),
        coverage: float = typer.Option(
            TypicalPodSettings().coverage_ratio,
            "--coverage",
            help=TypicalPodSettings.model_fields["coverage_ratio"].description,
        ),
        top: int = typer.Option(20, "--top", min=0, help="nodes listed, most fragmented first"),
        all_nodes: bool = typer.Option(False, "--all", help="list every node"),
        fmt: FragFormat = typer.Option(FragFormat.table, "--format"),
    ) -> None:
        """GPU capacity lost to fragmentation for the workload (FGD measure, ATC'23)."""

        def go() -> None:
            settings = _settings(coverage)
            if db is not None:
                if nodes or workload or placements:
                    raise ConfigError("give either --db or --nodes/--workload, not both")
                state, wl, source, warnings = _from_db(db, parse_duration_s(since), settings)
            elif nodes is not None and workload is not None:
                state, wl, source = _from_trace(nodes, workload, placements, settings)
                warnings = []
            else:
                raise ConfigError(
                    "give --nodes NODE_CSV and --workload POD_CSV (a trace), or --db DB (live)"
                )
            report = fragmentation(state, wl)
            for line in warnings:
                note(line, label="warning")
            limit = None if all_nodes else top
            doc = report_document(
                report, state, wl, source=source, warnings=warnings, node_limit=limit
            )
            if fmt is FragFormat.json:
                sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            else:
                _print_tables(doc)

        run_cli(go)


def report_document(
    report: FragmentationReport,
    state: ClusterState,
    workload: TargetWorkload,
    *,
    source: dict[str, Any],
    warnings: list[str],
    node_limit: int | None,
) -> dict[str, Any]:
    """The JSON document of one report (keys in docs/analytics/fragmentation-fgd.md)."""
    allocated = report.total_milli - report.idle_milli
    return {
        "source": source,
        "frag_ratio": report.frag_ratio,
        "frag_amount_ratio": report.frag_amount_ratio,
        "frag_milli": report.frag_milli,
        "idle_milli": report.idle_milli,
        "total_milli": report.total_milli,
        "alloc_ratio": allocated / report.total_milli if report.total_milli else 0.0,
        "by_cause": {
            str(c): {"milli": report.by_cause[c], "share": report.cause_share(c)} for c in CAUSES
        },
        "typical_pods": [
            {
                "cpu_milli": p.shape.cpu_milli,
                "num_gpu": p.shape.num_gpu,
                "gpu_milli": p.shape.gpu_milli,
                "gpu_types": list(p.shape.gpu_types),
                "count": p.count,
                "weight": p.weight,
            }
            for p in workload.pods
        ],
        "typical_pods_coverage_ratio": workload.coverage_ratio,
        "workload_pods": workload.total_pods,
        "node_count": len(state),
        "nodes": _node_rows(report, state, node_limit),
        "warnings": warnings,
    }


def _node_rows(
    report: FragmentationReport, state: ClusterState, limit: int | None
) -> list[dict[str, Any]]:
    # Most fragmented first; equal values keep node order (stable sort on -F).
    order = np.argsort(-report.node_frag_milli, kind="stable")
    if limit is not None:
        order = order[:limit]
    rows = []
    for i in order:
        idle = int(report.node_idle_milli[i])
        frag = float(report.node_frag_milli[i])
        model_id = int(state.gpu_model_id[i])
        rows.append(
            {
                "node": state.node_names[i],
                "gpu_model": state.gpu_models[model_id] if model_id >= 0 else None,
                "gpu_count": int(state.gpu_count[i]),
                "cpu_free_milli": int(state.cpu_free_milli[i]),
                "idle_milli": idle,
                "frag_milli": frag,
                "frag_ratio": frag / idle if idle else 0.0,
            }
        )
    return rows


def _settings(coverage: float) -> TypicalPodSettings:
    try:
        return TypicalPodSettings(coverage_ratio=coverage)
    except ValidationError as exc:
        raise ConfigError(f"--coverage {coverage}: must be > 0 and <= 1") from exc


def _from_trace(
    nodes: Path, workload: Path, placements: Path | None, settings: TypicalPodSettings
) -> tuple[ClusterState, TargetWorkload, dict[str, Any]]:
    node_list = load_node_list(nodes)
    pod_list = load_pod_list(workload)
    state = ClusterState.from_node_list(node_list)
    placed = 0
    if placements is not None:
        placed = apply_placements(state, pod_list, load_placements(placements))
    wl = _typical(pod_list.shapes(), settings)
    source = {
        "nodes": str(nodes),
        "workload": str(workload),
        "placements": str(placements) if placements else None,
        "placed_pods": placed,
    }
    return state, wl, source


def _from_db(
    db: Path, since_s: float, settings: TypicalPodSettings
) -> tuple[ClusterState, TargetWorkload, dict[str, Any], list[str]]:
    with Store.open(db, read_only=True) as store:
        live = live_cluster(store, since_s=since_s)
    source = {
        "db": str(db),
        "nodes_at": live.nodes_at.isoformat(),
        "pods_at": live.pods_at.isoformat() if live.pods_at else None,
        "since_s": since_s,
        "placed_pods": live.pods_placed,
    }
    return live.state, _typical(live.shapes, settings), source, list(live.warnings)


def _typical(shapes: Iterable[PodShape], settings: TypicalPodSettings) -> TargetWorkload:
    try:
        return typical_pods(shapes, settings)
    except ValueError as exc:
        raise ConfigError(f"cannot build the typical-pod set: {exc}") from exc


def _print_tables(doc: dict[str, Any]) -> None:
    summary = data_table(title="Cluster GPU fragmentation (FGD, ATC'23)", show_header=False)
    summary.add_column("measure")
    summary.add_column("value", justify="right")
    summary.add_row("fragmentation ratio (F / idle GPU)", f"{doc['frag_ratio']:.2%}")
    summary.add_row("fragmentation amount (F / total GPU)", f"{doc['frag_amount_ratio']:.2%}")
    summary.add_row("fragmented GPU milli (F)", f"{doc['frag_milli']:,.0f}")
    summary.add_row("idle GPU milli", f"{doc['idle_milli']:,}")
    summary.add_row("total GPU milli", f"{doc['total_milli']:,}")
    summary.add_row("GPU allocation", f"{doc['alloc_ratio']:.2%}")
    summary.add_row("nodes", str(doc["node_count"]))
    summary.add_row("pods placed", str(doc["source"]["placed_pods"]))
    out.print(summary)

    causes = data_table(title="By cause")
    for column in ("cause", "milli", "share"):
        causes.add_column(column, justify="left" if column == "cause" else "right")
    for cause, value in doc["by_cause"].items():
        causes.add_row(cause, f"{value['milli']:,.0f}", f"{value['share']:.2%}")
    out.print(causes)

    shapes = data_table(
        title=f"Typical pods: {len(doc['typical_pods'])} shapes cover "
        f"{doc['typical_pods_coverage_ratio']:.2%} of {doc['workload_pods']} pods"
    )
    for column in ("cpu_milli", "num_gpu", "gpu_milli", "gpu_types", "count", "weight"):
        shapes.add_column(column, justify="right")
    for p in doc["typical_pods"]:
        shapes.add_row(
            str(p["cpu_milli"]),
            str(p["num_gpu"]),
            str(p["gpu_milli"]),
            "|".join(p["gpu_types"]) or "any",
            str(p["count"]),
            f"{p['weight']:.4f}",
        )
    out.print(shapes)

    nodes = data_table(title="Most fragmented nodes (milli)")
    nodes.add_column("node", no_wrap=True)
    for column in ("model", "gpus", "cpu free", "idle", "frag", "frag ratio"):
        nodes.add_column(column, justify="right")
    for n in doc["nodes"]:
        nodes.add_row(
            n["node"],
            n["gpu_model"] or "-",
            str(n["gpu_count"]),
            f"{n['cpu_free_milli']:,}",
            f"{n['idle_milli']:,}",
            f"{n['frag_milli']:,.0f}",
            f"{n['frag_ratio']:.2%}",
        )
    out.print(nodes)
