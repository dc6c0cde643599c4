"""The ``sits`` extender policy's settings: its weights, modes and constants, with their bounds
and units (:mod:`.scoring` scores with them; ``serve`` builds them from its flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sits_observe.analytics.placement.device_plugin import DEFAULT_SPLIT_COUNT, GpuPolicy
from sits_observe.analytics.topology.affinity import AffinityRules, load_affinity_rules

#: MaxExtenderPriority of k8s.io/kube-scheduler/extender/v1.
MAX_SCORE = 10


class ScoringSettings(BaseModel):
    """Weights and constants of the ``sits`` extender policy (SPEC "Topology and interference")."""

    model_config = ConfigDict(frozen=True)

    fragmentation_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="weight of the FGD fragmentation-descent term (0-1; ranked mode: 0 leaves the "
        "term out)",
    )
    memory_fit_weight: float = Field(
        0.3,
        ge=0,
        le=1,
        description="weight of the free-memory / topology term (0-1; ranked mode: 0 leaves the "
        "term out)",
    )
    interference_weight: float = Field(
        0.2,
        ge=0,
        le=1,
        description="weight of the low-interference term (0-1; ranked mode: 0 leaves the term out)",
    )
    headroom_cap_ratio: float = Field(
        2.0, ge=1, le=100, description="free memory / need ratio above which fit stops growing"
    )
    preferred_gpu_pattern: str = Field(
        "H100", min_length=1, description="regex of GPU products boosted for high-priority pods"
    )
    preferred_boost_ratio: float = Field(
        1.3, ge=1, le=10, description="SPEC: x1.3 for H100 and high priority"
    )
    # SPEC priority classes: ultra-low-latency 1,000,000, throughput-guaranteed 500,000,
    # best-effort 1,000; both guaranteed classes count as high priority.
    high_priority_min: int = Field(
        500_000, description="pod spec.priority at or above which a pod is high priority"
    )
    nvlink_distance: float = Field(0.1, ge=0, le=10, description="SPEC topology distance: NVLink")
    pcie_switch_distance: float = Field(
        0.4, ge=0, le=10, description="SPEC topology distance: same PCIe switch"
    )
    cross_numa_distance: float = Field(
        1.0, ge=0, le=10, description="SPEC topology distance: across NUMA nodes"
    )
    measured_need_margin_ratio: float = Field(
        0.1, ge=0, le=10, description="safety margin added to a measured memory need (0.1 = +10%)"
    )
    unknown_nodes: Literal["pass", "fail"] = Field(
        "pass", description="filter answer for a node missing from the inventory snapshot"
    )
    unknown_node_score: int = Field(
        0, ge=0, le=MAX_SCORE, description="prioritize score (0-10) of a node the view lacks"
    )
    filter_free_gpus: bool = Field(
        True, description="filter out nodes with fewer unallocated GPUs than requested"
    )
    filter_gpu_memory: bool = Field(
        True, description="filter out nodes with too few GPUs whose free memory meets the need"
    )
    score_mode: Literal["ranked", "absolute"] = Field(
        "ranked",
        description="ranked: the candidates in the sits order get 10, 9, ... (1 at least); "
        "absolute: round(10 x the weighted blend), the same for a node whatever the others",
    )
    interference_penalty_points: int = Field(
        10,
        ge=0,
        le=100,
        description="ranked mode: FGD score points (0-100) lost by a node with interference 1",
    )
    fit_levels: int = Field(
        20,
        ge=1,
        le=1000,
        description="ranked mode: steps the 0-1 memory-fit term is rounded to before it "
        "breaks equal FGD points",
    )
    keep_idle_nodes: bool = Field(
        True,
        description="ranked mode: among otherwise equal nodes prefer ones with a GPU in use",
    )
    cpu_on_busy_nodes: bool = Field(
        True,
        description="ranked mode: among otherwise equal nodes a CPU-only pod gets the one with "
        "the least idle GPU (its CPU then strands the fewest GPUs)",
    )
    tightest_share: bool = Field(
        True,
        description="the bind verb's GPU for a share is the tightest of FGD's best (either "
        "mode); ranked mode: among otherwise equal nodes, the node where it is tightest",
    )
    cpu_for_idle_gpus: bool = Field(
        True,
        description="ranked mode: among otherwise equal nodes a GPU pod gets the one left with "
        "the least usable idle GPU that its free CPU cannot feed (at the pod's CPU per GPU)",
    )
    small_nodes_first: bool = Field(
        False,
        description="ranked mode: among otherwise equal nodes prefer ones with fewer GPUs "
        "(off: measured to cost points on CPU-heavy workloads, docs/extender.md)",
    )
    device_plugin_policy: GpuPolicy = Field(
        "spread",
        description="the HAMi GPU policy the node's device plugin runs (its default: spread); "
        "a share is scored for the GPU it will pick unless the bind verb names the GPU",
    )
    device_split_count: int = Field(
        DEFAULT_SPLIT_COUNT,
        ge=1,
        le=1000,
        description="HAMi deviceSplitCount: pods that may share one GPU",
    )

    affinity_file: Path | None = Field(
        None,
        description="YAML file of device affinity rules (model pattern -> GPU products or "
        "generations and precisions; docs/extender.md 'Device affinity') the filter enforces; "
        "'example': the example rules the package ships; none: off",
    )
    affinity: AffinityRules | None = Field(
        None, description="the device affinity rules (read from affinity_file when given)"
    )

    @model_validator(mode="before")
    @classmethod
    def _read_affinity(cls, data: Any) -> Any:
        # The rules are read once, when the settings are built (the composition root), so the
        # filter never opens a file; a missing or bad file is a ConfigError naming it.
        if isinstance(data, dict) and data.get("affinity_file") and data.get("affinity") is None:
            return {**data, "affinity": load_affinity_rules(data["affinity_file"])}
        return data

    @model_validator(mode="after")
    def _some_weight(self) -> ScoringSettings:
        if self.fragmentation_weight + self.memory_fit_weight + self.interference_weight <= 0:
            raise ValueError("at least one of the three score weights must be above 0")
        return self
