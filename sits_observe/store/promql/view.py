"""The small PromQL reads the extender's view needs besides the KSM inventory and GPU samples.

The extender rebuilds its view every few seconds, and re-reads the inventory
(:class:`sits_observe.store.promql.kube.PromQLKubeSource`, every pod's series) only when a
new kube-state-metrics scrape has landed. Whether one has is one cheap query per side:
``max(timestamp(kube_node_status_allocatable{...}))`` and ``max(timestamp(kube_pod_info))``,
the time of the newest raw sample (``timestamp()`` of a selector gives the sample's own
time in Prometheus and VictoriaMetrics), which is the ``nodes_at`` / ``pods_at`` the
inventory read reports for the same scrapes. The selector sees the store's look-back
(Prometheus' ``--query.lookback-delta``, 5 min by default); a time older than ``lookback_s``
counts as none.

Node labels: ``kube_node_labels`` carries the labels KSM was told to export
(``--metric-labels-allowlist=nodes=[...]``) as ``label_<sanitised name>``; the view reads
its topology overrides from them (``sits.io/gpu-interconnect`` is
``label_sits_io_gpu_interconnect``).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import ALLOCATABLE, NODE_LABELS, POD_INFO

_MS = timedelta(milliseconds=1)


def ksm_label(name: str) -> str:
    """KSM's series label of a Kubernetes label: ``label_`` + ``SanitizeLabelName``."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


class PromQLViewReads:
    """Snapshot times and node labels from kube-state-metrics series (module docstring);
    ``matchers`` are added to every selector (e.g. ``job="kube-state-metrics"``)."""

    def __init__(self, client: PromQLClient, *, matchers: str = "") -> None:
        self._client = client
        self._matchers = matchers

    def snapshot_times(
        self, until: datetime, *, lookback_s: float
    ) -> tuple[datetime | None, datetime | None]:
        """``(nodes_at, pods_at)``: the newest node / pod series sample before ``until``
        (naive UTC) and within ``lookback_s``; ``nodes_at`` None = no inventory."""
        nodes_at = self._newest(self._selector(ALLOCATABLE), until, lookback_s)
        if nodes_at is None:
            return None, None
        return nodes_at, self._newest(self._selector(POD_INFO), until, lookback_s)

    def node_labels(self, until: datetime, *, lookback_s: float) -> dict[str, dict[str, str]]:
        """Per node, the newest ``kube_node_labels`` series' labels within ``lookback_s``
        before ``until`` (KSM's names: ``label_*``)."""
        span_ms = max(1, round(lookback_s * 1000))
        expr = f"last_over_time({self._selector(NODE_LABELS)}[{span_ms}ms])"
        out: dict[str, dict[str, str]] = {}
        for series in self._client.query(expr, until - _MS):
            node = series.labels.get("node")
            if node:
                out[node] = dict(series.labels)
        return out

    def _selector(self, family: str) -> str:
        return f"{family}{{{self._matchers}}}"

    def _newest(self, selector: str, until: datetime, lookback_s: float) -> datetime | None:
        series = self._client.query(f"max(timestamp({selector}))", until - _MS)
        values = [float(s.values[-1]) for s in series if s.values.size]
        if not values or not math.isfinite(values[0]):
            return None
        at = datetime.fromtimestamp(round(values[0] * 1000) / 1000, UTC).replace(tzinfo=None)
        return at if at >= until - timedelta(seconds=lookback_s) else None
