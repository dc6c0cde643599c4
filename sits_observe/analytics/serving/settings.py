"""Settings of tenant isolation and capacity: the tenants' SLAs, node-pool prices (a price
table file) and what capacity planning targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sits_observe.errors import ConfigError


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
