"""What ``sits-observe demo`` simulates and where it writes: its settings alone, so the CLI
builds the demo's flags from them without importing the simulation."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

#: The scheduler configuration the repository ships (beside the package in a checkout).
SCHEDULER_CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "scheduler-config.yaml"


class DemoSettings(BaseModel):
    """What ``sits-observe demo`` simulates and where it writes."""

    duration_s: float | None = Field(
        None,
        gt=0,
        description="seconds to run; none = until Ctrl-C",
        json_schema_extra={"flag": "--duration"},
    )
    nodes: int = Field(2, ge=1, le=64, description="simulated GPU nodes")
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per simulated node")
    seed: int = Field(7, ge=0, description="seed of the simulation (same seed, same cluster)")
    db_path: Path = Field(
        Path("demo-data/sits.duckdb"),
        description="DuckDB file to fill",
        json_schema_extra={"flag": "--db"},
    )
    workdir: Path = Field(
        Path("demo-data"), description="folder for the simulated nodes' files and agent spools"
    )
    interval_s: float = Field(1.0, ge=0.1, le=60, description="agent collection interval, s")
    inventory_interval_s: float = Field(
        5.0, ge=0.5, le=600, description="seconds between Kubernetes inventory snapshots"
    )
    controller_interval_s: float = Field(
        10.0, ge=1, le=3600, description="seconds between controller passes"
    )
    scheduler_config: Path = Field(
        SCHEDULER_CONFIG,
        description="KubeSchedulerConfiguration whose extenders the demo's scheduler calls "
        "(their urlPrefix is moved to the demo service)",
    )
    server_start_timeout_s: float = Field(
        60.0,
        gt=0,
        le=600,
        description="seconds to wait for the inference pods to be scheduled and running "
        "before the agents start",
    )
    ui_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="serve the Streamlit app on this loopback port, reading through the "
        "service (none = no app)",
    )
    keep_db: bool = Field(
        False,
        description="append to the database an earlier run left instead of replacing it "
        "(the simulated node files are always replaced)",
    )
