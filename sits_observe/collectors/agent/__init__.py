"""The node agent: collect on an interval, ship Arrow batches to the service, spool and
replay when it is down. Runs on every GPU node, so it never imports the store (DuckDB).

The re-exports load on first use (:mod:`sits_observe.domain.lazy_exports`): the service
reads only :mod:`.wire` (the batch format), and the loop and shipper (httpx) are not imported
before its port is up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sits_observe.domain.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sits_observe.collectors.agent.loop import AgentLoop, BatchShipper, TickReport
    from sits_observe.collectors.agent.metrics import AgentMetrics
    from sits_observe.collectors.agent.settings import AgentSettings
    from sits_observe.collectors.agent.shipper import ShipOutcome, Shipper, ShipResult
    from sits_observe.collectors.agent.spool import Spool, SpooledBatch
    from sits_observe.collectors.agent.wire import decode_batch, encode_batch

__all__ = [
    "AgentLoop",
    "AgentMetrics",
    "AgentSettings",
    "BatchShipper",
    "ShipOutcome",
    "ShipResult",
    "Shipper",
    "Spool",
    "SpooledBatch",
    "TickReport",
    "decode_batch",
    "encode_batch",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "AgentLoop": "loop",
        "BatchShipper": "loop",
        "TickReport": "loop",
        "AgentMetrics": "metrics",
        "AgentSettings": "settings",
        "ShipOutcome": "shipper",
        "ShipResult": "shipper",
        "Shipper": "shipper",
        "Spool": "spool",
        "SpooledBatch": "spool",
        "decode_batch": "wire",
        "encode_batch": "wire",
    },
)
