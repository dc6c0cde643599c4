"""The node agent: collect on an interval, ship Arrow batches to the service, spool and
replay when it is down. Runs on every GPU node, so it never imports the store (DuckDB)."""

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
