"""Typed settings of the workload analytics: the spec's thresholds, with bounds and units.

Every default of the spec's models (interference, baselines, classes, tenants, timeline,
prices) is a number from ``SPEC.md`` (section named in the field's comment) or from a vendor
datasheet (cited). The CLI builds these models from its flags, the controller from its
configuration; analytics functions receive them as arguments and never read a global.

The settings of the heatmap, SMF alignment, trend clustering and idle-GPU analyses
(:class:`HeatmapSettings`, :class:`SmfSettings`, :class:`TrendSettings`,
:class:`IdleSettings`) live here too, not in their analyses' modules (which import them from
here): ``serve`` builds its exporter's flags from them before its port is up, and importing
those analyses would delay the scheduler extender's first answer (docs/extender.md, cold
start).

Units: ``_bytes`` (GiB = 2^30 bytes where the spec says GiB), ``_bytes_per_s`` (GB/s = 10^9
bytes/s, as link and bandwidth figures are quoted decimally), ``_s``, ``_ms``, ``_rps``
(requests/s), ``_per_h``, ``_ratio`` (0-1), ``_tokens``, ``_usd_per_hour``.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sits_observe.errors import ConfigError

GIB = 1024**3
GB_PER_S = 1_000_000_000


class LinkCapacity(BaseModel):
    """Link capacities of one GPU product, matched by a regular expression on its name."""

    model_config = ConfigDict(frozen=True)

    pattern: str = Field(
        ..., min_length=1, description="case-insensitive regex matched against the GPU name"
    )
    nvlink_bytes_per_s: float = Field(
        ..., ge=0, description="NVLink bandwidth, both directions summed, bytes/s (0 = none)"
    )
    pcie_bytes_per_s: float = Field(
        ..., gt=0, description="PCIe x16 bandwidth, both directions summed, bytes/s"
    )

    def matches(self, gpu_name: str) -> bool:
        """Whether ``gpu_name`` (e.g. ``NVIDIA H100 80GB HBM3``) is this product."""
        return re.search(self.pattern, gpu_name, flags=re.IGNORECASE) is not None


# Bidirectional figures from NVIDIA's datasheets: H100 SXM and H200 NVLink 4 = 900 GB/s,
# H100 PCIe / NVL bridge = 600 GB/s, A100 NVLink 3 (SXM4, and PCIe with bridge) = 600 GB/s,
# V100 SXM2 NVLink 2 = 300 GB/s, B200 NVLink 5 = 1.8 TB/s, A40 bridge = 112.5 GB/s; L4, L40,
# L40S, A10 and T4 have no NVLink. PCIe x16 as the datasheets quote it (both directions):
# Gen3 32 GB/s, Gen4 64 GB/s, Gen5 128 GB/s. First match wins, so the more specific names
# (H100 PCIe, L40S) come before the shorter ones (H100, L4).
DEFAULT_LINKS: tuple[LinkCapacity, ...] = (
    LinkCapacity(pattern=r"H100.*(PCIe|NVL)", nvlink_bytes_per_s=600e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"H100|H200|GH200", nvlink_bytes_per_s=900e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"B200|GB200", nvlink_bytes_per_s=1800e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"A100", nvlink_bytes_per_s=600e9, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"V100", nvlink_bytes_per_s=300e9, pcie_bytes_per_s=32e9),
    LinkCapacity(pattern=r"A40\b", nvlink_bytes_per_s=112.5e9, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"L40S|L40\b|\bL4\b|A10G?\b", nvlink_bytes_per_s=0, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"\bT4\b", nvlink_bytes_per_s=0, pcie_bytes_per_s=32e9),
)


def find_link_capacity(
    links: tuple[LinkCapacity, ...], gpu_name: str | None
) -> LinkCapacity | None:
    """The first entry of ``links`` whose pattern matches ``gpu_name`` (None when none does)."""
    if not gpu_name:
        return None
    return next((link for link in links if link.matches(gpu_name)), None)


class NvlinkScope(StrEnum):
    """When NVLink traffic counts as conflict (see ``nvlink_conflict_scope``)."""

    gpu = "gpu"
    node = "node"


class InterferenceSettings(BaseModel):
    """Interference score and TopologyManager rule (SPEC "Topology and interference")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: score = 0.4 x GPU-bandwidth utilisation + 0.35 x NVLink conflict + 0.25 x NUMA miss.
    bandwidth_weight: float = Field(0.4, ge=0, le=1, description="weight of GPU bandwidth use")
    nvlink_weight: float = Field(0.35, ge=0, le=1, description="weight of NVLink conflict")
    numa_weight: float = Field(0.25, ge=0, le=1, description="weight of the NUMA miss ratio")
    # SPEC: "Above 0.65 -> recommend TopologyManager single-numa-node" (strictly above).
    threshold_ratio: float = Field(
        0.65, ge=0, le=1, description="score (0-1) above which single-numa-node is recommended"
    )
    # SPEC: "three consecutive sync delays above 80 ms -> fall back to best-effort".
    sync_delay_threshold_s: float = Field(
        0.080, gt=0, le=60, description="sync delay (seconds) above which a delay counts as bad"
    )
    sync_delay_consecutive: int = Field(
        3, ge=1, le=1000, description="consecutive bad sync delays that force best-effort"
    )
    nvlink_conflict_scope: NvlinkScope = Field(
        NvlinkScope.gpu,
        description="when NVLink traffic counts as conflict: 'gpu' = the GPU serves 2+ pods at "
        "that sample; 'node' = 2+ pods on the node move NVLink traffic at that sample",
    )
    links: tuple[LinkCapacity, ...] = Field(
        DEFAULT_LINKS, description="NVLink / PCIe capacity per GPU product (bytes/s)"
    )

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> InterferenceSettings:
        total = self.bandwidth_weight + self.nvlink_weight + self.numa_weight
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"interference weights must sum to 1 (a 0-1 score), got {total:g}")
        return self


class BaselineSettings(BaseModel):
    """Noise isolation for baselines (SPEC "Baselines and noise")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "a 60 s sliding window; a sample further than 2.5 sigma from the window mean is
    # excluded from baselines (and counted)".
    sliding_window_s: float = Field(
        60.0, gt=0, le=86400, description="sliding window a sample is judged against, seconds"
    )
    sigma_k: float = Field(
        2.5, gt=0, le=100, description="samples further than k standard deviations are noise"
    )
    min_window_samples: int = Field(
        5,
        ge=2,
        le=100_000,
        description="fewest earlier samples in the window needed to judge a sample; with fewer "
        "it is kept and counted as unchecked",
    )
    ddof: Literal[0, 1] = Field(
        1, description="delta degrees of freedom of the window standard deviation (1 = sample)"
    )
    sigma_floor: float = Field(
        0.0,
        ge=0,
        description="smallest window standard deviation used, in the metric's unit (0 = the "
        "spec's literal rule: on a flat window any change is noise)",
    )


class TierQuota(BaseModel):
    """The two quotas of one QoS tier."""

    model_config = ConfigDict(frozen=True)

    memory_bytes: int = Field(..., gt=0, description="GPU memory quota, bytes")
    bandwidth_bytes_per_s: float = Field(..., gt=0, description="bandwidth quota, bytes/s")


class PriorityClass(BaseModel):
    """One Kubernetes PriorityClass the spec names."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(..., min_length=1, description="PriorityClass name")
    value: int = Field(..., description="PriorityClass value (higher schedules first)")


class ClassSettings(BaseModel):
    """Workload classes, QoS tiers, time slices and priorities (SPEC "Workload classes")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "Memory sensitivity: L1 < 2 GiB, L2 2-8 GiB, L3 > 8 GiB". Exactly 2 GiB and
    # exactly 8 GiB are L2.
    l1_below_bytes: int = Field(2 * GIB, gt=0, description="peak GPU memory below this is L1")
    l3_above_bytes: int = Field(8 * GIB, gt=0, description="peak GPU memory above this is L3")
    # SPEC: "Gold 8 GiB and 32 GB/s, Silver 4 GiB and 16 GB/s, Bronze 2 GiB and 8 GB/s".
    tiers: dict[str, TierQuota] = Field(
        default_factory=lambda: {
            "gold": TierQuota(memory_bytes=8 * GIB, bandwidth_bytes_per_s=32 * GB_PER_S),
            "silver": TierQuota(memory_bytes=4 * GIB, bandwidth_bytes_per_s=16 * GB_PER_S),
            "bronze": TierQuota(memory_bytes=2 * GIB, bandwidth_bytes_per_s=8 * GB_PER_S),
        },
        description="QoS tier -> memory quota (bytes) and bandwidth quota (bytes/s)",
    )
    # SPEC elastic rule: "GPU utilisation > 90% and link saturation > 75%: memory quota
    # max(quota x 0.8, minimum), bandwidth quota min(quota x 1.2, hardware maximum)";
    # "Inputs are a 5 s sliding window".
    elastic_util_above_ratio: float = Field(
        0.90, ge=0, le=1, description="GPU utilisation (0-1) above which the elastic rule fires"
    )
    elastic_link_above_ratio: float = Field(
        0.75, ge=0, le=1, description="link saturation (0-1) above which the elastic rule fires"
    )
    elastic_memory_factor: float = Field(
        0.8, gt=0, le=1, description="memory quota multiplier when the elastic rule fires"
    )
    elastic_bandwidth_factor: float = Field(
        1.2, ge=1, le=10, description="bandwidth quota multiplier when the elastic rule fires"
    )
    elastic_window_s: float = Field(
        5.0, gt=0, le=3600, description="sliding window of the elastic rule's inputs, seconds"
    )
    # SPEC: "GPU time-slice quota: p95 > 10 ms -> 25 ms slice; sequence length > 4096 ->
    # 10 ms; else 15 ms".
    slice_p95_above_s: float = Field(
        0.010, gt=0, description="request P95 latency (s) above which the long slice is given"
    )
    slice_long_s: float = Field(0.025, gt=0, description="long time slice, seconds")
    slice_sequence_above_tokens: int = Field(
        4096, gt=0, description="sequence length (tokens) above which the short slice is given"
    )
    slice_short_s: float = Field(0.010, gt=0, description="short time slice, seconds")
    slice_default_s: float = Field(0.015, gt=0, description="default time slice, seconds")
    # SPEC: "Burstable = shared (60% memory)".
    burstable_memory_share_ratio: float = Field(
        0.6, gt=0, le=1, description="share of GPU memory a Burstable pod may use (0-1)"
    )
    # SPEC: "ultra-low-latency 1,000,000, throughput-guaranteed 500,000, best-effort 1,000".
    priority_classes: tuple[PriorityClass, ...] = Field(
        (
            PriorityClass(name="ultra-low-latency", value=1_000_000),
            PriorityClass(name="throughput-guaranteed", value=500_000),
            PriorityClass(name="best-effort", value=1_000),
        ),
        description="priority classes, any order (sorted by value when used)",
    )
    # SPEC: "SLA-violation rate > 5% -> lower priority; fragmentation > 70% -> allow
    # preemption of lower priority".
    sla_violation_above_ratio: float = Field(
        0.05, ge=0, le=1, description="SLA-violation rate (0-1) above which priority is lowered"
    )
    preemption_fragmentation_above_ratio: float = Field(
        0.70, ge=0, le=1, description="fragmentation (0-1) above which preemption is allowed"
    )
    # SPEC: "Namespace SLA example: finance 15 ms P99, medical 120 ms, government 300 ms".
    namespace_sla_p99_s: dict[str, float] = Field(
        default_factory=lambda: {"finance": 0.015, "medical": 0.120, "government": 0.300},
        description="namespace -> P99 latency SLA, seconds",
    )

    @model_validator(mode="after")
    def _check(self) -> ClassSettings:
        if self.l1_below_bytes > self.l3_above_bytes:
            raise ValueError(
                f"l1_below_bytes ({self.l1_below_bytes}) must not exceed "
                f"l3_above_bytes ({self.l3_above_bytes})"
            )
        if not self.tiers:
            raise ValueError("at least one QoS tier is needed")
        if not self.priority_classes:
            raise ValueError("at least one priority class is needed")
        if any(v <= 0 for v in self.namespace_sla_p99_s.values()):
            raise ValueError("every namespace SLA must be a positive number of seconds")
        return self


class TenantSettings(BaseModel):
    """Tenant isolation (SPEC "Namespace SLA example"): detecting one tenant's load pushing
    another out of its P99 SLA. The SLAs themselves are ``ClassSettings.namespace_sla_p99_s``.

    Each tenant with an SLA gets its exact P99 per ``bin_s`` bin (bins with fewer than
    ``min_requests_per_bin`` requests have no P99); each other tenant on the same nodes its
    load per bin. A pair is a finding when the load splits the bins into high and low halves
    of its range with at least ``min_bins_per_side`` each, the load and the P99 correlate at
    ``min_correlation`` or more, and the P99 is above the SLA in at least
    ``min_breach_ratio`` of the high-load bins (and more often than in the low-load ones).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bin_s: float = Field(
        60.0, ge=1, le=86_400, description="time bin of the per-tenant P99 and load, seconds"
    )
    # A P99 of fewer than 100 values is the largest or second-largest of them; 20 keeps a
    # bin's figure from being one request.
    min_requests_per_bin: int = Field(
        20, ge=1, le=1_000_000, description="requests a bin needs for its P99 to count"
    )
    load: Literal["gpu_util", "requests", "pods"] = Field(
        "gpu_util",
        description="the other tenant's load: gpu_util (sum of its GPUs' mean utilisation "
        "on the tenant's nodes, in busy GPUs), requests (its requests/s there) or pods (its "
        "pods there)",
    )
    min_bins_per_side: int = Field(
        3, ge=1, le=100_000, description="bins both the high-load and the low-load side need"
    )
    min_correlation: float = Field(
        0.5, ge=-1, le=1, description="Pearson correlation of load and P99 a finding needs"
    )
    min_breach_ratio: float = Field(
        0.5,
        gt=0,
        le=1,
        description="share (0-1) of the high-load bins whose P99 must be above the SLA",
    )


class TimelineSettings(BaseModel):
    """Pod start timeline references (SPEC "Pod start jitter")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "p95 start 2,140 ms ... before, 480 ms ... after fixes".
    reference_before_p95_s: float = Field(
        2.140, gt=0, description="the documents' P95 pod start before their fixes, seconds"
    )
    reference_after_p95_s: float = Field(
        0.480, gt=0, description="the documents' P95 pod start after their fixes, seconds"
    )


class NodePoolPrice(BaseModel):
    """The hourly price of one node of a pool, and which nodes belong to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pool: str = Field(..., min_length=1, description="node pool name")
    price_usd_per_hour: float = Field(..., gt=0, description="price of one node, USD per hour")
    gpu_product: str | None = Field(
        None, description="nvidia.com/gpu.product of the pool's nodes (exact, case-insensitive)"
    )
    node_labels: dict[str, str] = Field(
        default_factory=dict, description="node labels every node of the pool carries"
    )

    def matches(self, gpu_product: str | None, labels: dict[str, str]) -> bool:
        """Whether a node with this product and these labels belongs to the pool."""
        if self.gpu_product is not None and (
            gpu_product is None or gpu_product.lower() != self.gpu_product.lower()
        ):
            return False
        return all(labels.get(k) == v for k, v in self.node_labels.items())


class PriceTable(BaseModel):
    """Node pools and their prices (SPEC "Cost"). A node belongs to the first pool it matches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pools: tuple[NodePoolPrice, ...] = Field(..., min_length=1, description="priced node pools")

    @model_validator(mode="after")
    def _unique_and_selective(self) -> PriceTable:
        names = [p.pool for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(dupes)}")
        return self

    def pool_of(self, gpu_product: str | None, labels: dict[str, str]) -> str | None:
        """The first pool a node matches (None when it matches none)."""
        return next((p.pool for p in self.pools if p.matches(gpu_product, labels)), None)

    def price_of(self, pool: str) -> float:
        """The hourly price of ``pool``; raises ``KeyError`` listing the pools on a miss."""
        for p in self.pools:
            if p.pool == pool:
                return p.price_usd_per_hour
        raise KeyError(f"unknown pool {pool!r}; pools: {', '.join(p.pool for p in self.pools)}")


def load_price_table(path: Path) -> PriceTable:
    """Read a price table from YAML or JSON: ``{"pools": [{"pool", "price_usd_per_hour",
    "gpu_product"?, "node_labels"?}, ...]}``; raises :class:`ConfigError` on a bad file."""
    import yaml  # here: ``serve`` imports these settings before its port is up (cold start)

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read price table {path}: {exc}") from exc
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"price table {path} is not valid JSON/YAML: {exc}") from exc
    try:
        return PriceTable.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"price table {path} is invalid: {exc.errors(include_url=False)}; expected "
            '{"pools": [{"pool": NAME, "price_usd_per_hour": USD, "gpu_product": PRODUCT, '
            '"node_labels": {KEY: VALUE}}]}'
        ) from exc


# :mod:`sits_observe.analytics.heatmap.grid`: its bins are whole microseconds, decided exactly.
US_PER_S = 1_000_000
US_PER_MS = 1_000
#: Most decimal places a heatmap throughput bin width may have.
MAX_RPS_DECIMALS = 9


def exact(value: float) -> Fraction:
    """The decimal a float was written as (``0.01`` -> 1/100): its shortest repr, exactly."""
    return Fraction(repr(float(value)))


class HeatmapSettings(BaseModel):
    """Window length, bin widths, SLO and the evidence threshold of one heatmap."""

    model_config = ConfigDict(frozen=True)

    window_s: float = Field(
        1.0, gt=0, le=86_400, description="window length, s (whole microseconds)"
    )
    latency_bin_ms: float = Field(
        100.0, gt=0, le=3_600_000, description="latency bin width, ms (whole microseconds)"
    )
    throughput_bin_rps: float = Field(
        10.0, gt=0, le=1e9, description="throughput bin width, requests/s (<= 9 decimals)"
    )
    slo_ms: float | None = Field(
        None, gt=0, le=3_600_000, description="P95 latency SLO, ms, for the safe maximum"
    )
    min_bin_requests: int = Field(
        20,
        ge=1,
        le=1_000_000,
        description="requests a throughput bin needs before its P95 counts for knee / safe max",
    )

    @model_validator(mode="after")
    def _whole_units(self) -> HeatmapSettings:
        if (exact(self.window_s) * US_PER_S).denominator != 1:
            raise ValueError(f"window_s {self.window_s!r} s is not a whole number of microseconds")
        if (exact(self.latency_bin_ms) * US_PER_MS).denominator != 1:
            raise ValueError(
                f"latency_bin_ms {self.latency_bin_ms!r} ms is not a whole number of microseconds"
            )
        if exact(self.throughput_bin_rps).denominator > 10**MAX_RPS_DECIMALS:
            raise ValueError(
                f"throughput_bin_rps {self.throughput_bin_rps!r} has more than "
                f"{MAX_RPS_DECIMALS} decimals"
            )
        return self

    @property
    def window_us(self) -> int:
        """Window length in microseconds."""
        return int(exact(self.window_s) * US_PER_S)

    @property
    def latency_bin_us(self) -> int:
        """Latency bin width in microseconds."""
        return int(exact(self.latency_bin_ms) * US_PER_MS)


# :mod:`sits_observe.analytics.fragmentation.smf`.
class SmfSettings(BaseModel):
    """How cgroup and GPU samples are aligned for the SMF fragmentation rate."""

    model_config = ConfigDict(frozen=True)

    max_skew_s: float = Field(
        2.0,
        gt=0,
        le=3600,
        description="largest age, in seconds, of the GPU sample matched to a cgroup sample "
        "(the GPU sample is taken at or before the cgroup sample)",
    )


# :mod:`sits_observe.analytics.trends.clusters`.
class TrendSettings(BaseModel):
    """Knobs of trend clustering; units in every name."""

    model_config = ConfigDict(frozen=True)

    eps: float | None = Field(
        None, gt=0, description="DBSCAN radius in standard-scaled feature units; none = knee"
    )
    min_samples: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="DBSCAN min_samples (series in a core neighbourhood, itself included); "
        "none = n_series // 10 clamped to 3..10",
    )
    min_knee_strength: float = Field(
        0.5,
        ge=0,
        le=1,
        description="weakest knee (0 = straight k-distance curve, 1 = an L) taken as one; "
        "below it eps is the largest k-distance",
    )
    min_points: int = Field(
        3, ge=3, le=100_000, description="fewest finite points a series needs for features"
    )
    drop_ratio: float = Field(
        0.05, gt=0, le=1, description="a sharp drop: occupancy falls by this share at once"
    )
    idle_level_ratio: float = Field(
        0.02, ge=0, le=1, description="'idle/empty': mean occupancy below this ratio"
    )
    full_level_ratio: float = Field(
        0.9, ge=0, le=1, description="'full': mean occupancy at or above this ratio"
    )
    leak_slope_per_h: float = Field(
        0.002,
        gt=0,
        description="'leaking': occupancy rises at least this ratio per hour (0.002 = about "
        "5 pp a day, a third of the framebuffer in a week)",
    )
    sawtooth_drops_per_h: float = Field(
        0.25, gt=0, description="'saw-tooth': at least this many sharp drops per hour"
    )
    daily_amplitude_ratio: float = Field(
        0.05, gt=0, le=1, description="'daily cycle': 24 h harmonic amplitude at least this"
    )
    steady_std_ratio: float = Field(
        0.02, gt=0, le=1, description="'steady': residual standard deviation below this"
    )


# :mod:`sits_observe.analytics.fragmentation.idle_gpus`.
class IdleSettings(BaseModel):
    """Floors and shares of the idle and oversized rules (ratios 0-1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    util_floor_ratio: float = Field(
        0.05, ge=0, le=1, description="GPU utilisation (0-1) under which a sample is idle"
    )
    activity_floor_ratio: float = Field(
        0.05, ge=0, le=1, description="memory-copy / DRAM activity (0-1) under which it is idle"
    )
    idle_share_ratio: float = Field(
        0.9, gt=0, le=1, description="share of a holding's samples that must be idle (0-1)"
    )
    oversized_below_ratio: float = Field(
        0.5, gt=0, le=1, description="used share of the allocation under which it is oversized"
    )
    used_percentile_ratio: float = Field(
        0.95, gt=0, le=1, description="percentile of the used share the oversized rule reads"
    )
    max_gap_s: float = Field(
        300.0, gt=0, le=86_400, description="longest time one sample stands for, seconds"
    )
