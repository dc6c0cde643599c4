"""The central service (FastAPI): ingest from node agents, reads for tools, health, metrics.

The re-exports load on first use (:mod:`sits_observe.domain.lazy_exports`): ``serve`` imports
this package's settings modules for its flags, and importing the app with them would load
every report before its port is up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sits_observe.domain.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sits_observe.surfaces.service.app import create_app
    from sits_observe.surfaces.service.metrics import ServiceMetrics
    from sits_observe.surfaces.service.settings import ServiceSettings

__all__ = ["ServiceMetrics", "ServiceSettings", "create_app"]

__getattr__ = lazy_exports(
    __name__, {"create_app": "app", "ServiceMetrics": "metrics", "ServiceSettings": "settings"}
)
