"""The central service (FastAPI): ingest from node agents, reads for tools, health, metrics."""

from sits_observe.surfaces.service.app import create_app
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.surfaces.service.settings import ServiceSettings

__all__ = ["ServiceMetrics", "ServiceSettings", "create_app"]
