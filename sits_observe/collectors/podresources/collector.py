"""A GPU collector whose samples are joined to the pods the kubelet says hold each GPU.

:class:`PodAttributed` wraps the agent's GPU collector (dcgm-exporter or NVML): each tick it
calls the wrapped collector, then the kubelet's pod-resources ``List``
(:class:`~.client.PodResourcesClient`), and hands both to :func:`~.attribution.attribute`,
which fills the samples' pods and adds the ``gpu_attribution`` table. It keeps the wrapped
collector's name, so its metrics and drops read as before.

A kubelet that cannot be asked (no socket, a refused or failed call) never costs the GPU
samples: they are shipped as read, and the failure is counted as ``podresources_unavailable``
and logged once per change of state.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol

from sits_observe.collectors.podresources.attribution import attribute
from sits_observe.collectors.podresources.client import Holder
from sits_observe.domain.collect import Collector, CollectResult
from sits_observe.domain.tables import GPU_SAMPLES
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError

log = logging.getLogger(__name__)


class HolderSource(Protocol):
    """Where the holders come from (:class:`~.client.PodResourcesClient` is the real one)."""

    def list(self) -> list[Holder]:
        """Every GPU device held by a container, now; raises ``CollectorError``."""
        ...


class PodAttributed:
    """``inner``'s results with their GPU samples attributed to pods (module docstring)."""

    def __init__(self, inner: Collector, source: HolderSource, *, node: str | None) -> None:
        self.inner = inner
        self.name = inner.name
        self.source = source
        self.node = node
        self._failing: str | None = None

    def collect(self, now: datetime) -> CollectResult:
        """The wrapped collector's result, joined to the kubelet's holders."""
        result = self.inner.collect(now)
        try:
            holders = self.source.list()
        except CollectorError as exc:
            if str(exc) != self._failing:
                log.warning("GPU samples not attributed to pods: %s", exc)
            self._failing = str(exc)
            dropped = result.dropped.copy()
            dropped["podresources_unavailable"] += 1
            return CollectResult(result.tables, dropped, result.ignored)
        if self._failing is not None:
            log.info("kubelet pod-resources readable again")
            self._failing = None
        samples = result.tables.get("gpu_samples", GPU_SAMPLES.schema.empty_table())
        joined = attribute(samples, holders, now=utc_naive(now), node=self.node)
        tables = {**result.tables, "gpu_attribution": joined.attribution}
        if "gpu_samples" in result.tables:
            tables["gpu_samples"] = joined.gpu_samples
        return CollectResult(tables, result.dropped, result.ignored)

    def close(self) -> None:
        """Close the wrapped collector and the source when they can be closed."""
        for part in (self.inner, self.source):
            close = getattr(part, "close", None)
            if callable(close):
                close()
