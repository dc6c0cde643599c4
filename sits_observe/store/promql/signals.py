"""The controller's long-window reads from a PromQL store, aggregated by the store.

The controller's PromQL signal source
(:mod:`sits_observe.control.signals.promql`) reads most of its inputs as raw samples
(:mod:`.promql_source`, :mod:`.promql_kube`); two of them span hours to weeks, where raw
samples would be millions of points a pass, so the store reduces them:

- **GPU memory peak per pod** (:meth:`PromQLSignalReads.pod_memory_peaks`): ``max by
  (namespace, pod) (max_over_time(DCGM_FI_DEV_FB_USED[window]))`` at ``until``: the largest
  raw sample in ``(until - window, until]`` of every GPU series labelled with the pod
  (dcgm-exporter's pod attribution; 1.x's ``pod_namespace`` / ``pod_name`` too), in bytes.
  The collector drops DCGM's blank sentinels; here a peak above the family's range is
  dropped whole (dcgm-exporter and the agent do not export blanks).
- **Daily request peaks per namespace** (:meth:`PromQLSignalReads.namespace_daily_peaks`):
  per UTC day, the largest sum of the namespace's container requests over the scrapes of that
  day, as the DuckDB source sums one inventory snapshot. One subquery per day,
  ``max_over_time(S[day:step])``, with ``S`` the sum over the pods whose phase is not
  Succeeded / Failed of kube-state-metrics' ``kube_pod_container_resource_requests``
  (``cpu`` in cores, ``memory`` in bytes, ``nvidia_com_gpu`` in devices), each series at its
  newest sample within one ``step`` (``last_over_time``: a deleted pod stops counting at once,
  not after the look-back), duplicates of a container (two KSM replicas, the ``node`` label
  that changes at binding) taken once. The subquery's grid is aligned on multiples of
  ``step`` (Prometheus and VictoriaMetrics); with ``step`` the KSM scrape interval each grid
  point holds one scrape, which is the DuckDB snapshot. Init containers and sidecars are not
  counted (app containers only): equal to the inventory's effective request whenever no
  init container asks for more than the app containers and no sidecar asks for anything.
  A day that ended more than :data:`SETTLE` before ``until`` is read once and kept (its peak
  no longer changes), so a controller pass over 14 days asks one subquery, not 15. With it,
  the first grid point each namespace requested anything
  (:meth:`PromQLSignalReads.namespace_first_seen`): the start of the history behind the
  peaks, VPA's confidence in the quota rule.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl

from sits_observe.domain.schema.dcgm_fields import FIELDS
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import POD_PHASE, REQUESTS

_MS = timedelta(milliseconds=1)
_DAY = timedelta(days=1)
#: How long after a day's end its scrapes may still arrive (remote write, a slow KSM
#: target): a day is kept only once this has passed.
SETTLE = timedelta(minutes=10)
_FB_USED = next(f for f in FIELDS if f.column == "fb_used_bytes")
#: KSM resource label -> the quota's unit scale (cores -> milli-CPU; bytes; devices).
_RESOURCES = {"cpu": 1000.0, "memory": 1.0, "nvidia_com_gpu": 1.0}
_NOT_DONE = "Pending|Running|Unknown"
#: dcgm-exporter 2.x / 1.x names of a GPU's pod (first present wins, as promql_source).
_POD_LABELS = (("namespace", "pod_namespace"), ("pod", "pod_name"))

PEAKS_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "peak_bytes": pl.Int64(),
}
FIRST_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "first_at": pl.Datetime("us"),
}
DAILY_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "resource": pl.String(),
    "day": pl.Datetime("us"),
    "peak": pl.Float64(),
}


def _ms(span: timedelta) -> str:
    return f"{max(1, round(span / _MS))}ms"


class PromQLSignalReads:
    """The two aggregated reads (module docstring); ``gpu_matchers`` / ``ksm_matchers`` are
    added to the dcgm-exporter / kube-state-metrics selectors."""

    def __init__(
        self, client: PromQLClient, *, gpu_matchers: str = "", ksm_matchers: str = ""
    ) -> None:
        self._client = client
        self._gpu = gpu_matchers
        self._ksm = ksm_matchers
        #: Finished whole days' rows by ``(day, step_s)`` (module docstring).
        self._finished: dict[tuple[datetime, float], list[tuple[str, str, datetime, float]]] = {}
        #: Finished whole days' first grid point per namespace, by ``(day, step_s)``.
        self._first_finished: dict[tuple[datetime, float], dict[str, datetime]] = {}

    def pod_memory_peaks(self, until: datetime, window_s: float) -> pl.DataFrame:
        """The largest ``fb_used_bytes`` per pod in ``(until - window_s, until]`` (naive UTC),
        :data:`PEAKS_SCHEMA`."""
        names = "|".join(_FB_USED.families)
        extra = f",{self._gpu}" if self._gpu else ""
        labels = ", ".join(name for pair in _POD_LABELS for name in pair)
        span = _ms(timedelta(seconds=window_s))
        expr = f'max by ({labels}) (max_over_time({{__name__=~"{names}"{extra}}}[{span}]))'
        rows = []
        for s in self._client.query(expr, until):
            value = float(s.values[-1]) if s.values.size else math.nan
            namespace, pod = (next((s.labels[n] for n in pair if s.labels.get(n)), None)
                              for pair in _POD_LABELS)  # fmt: skip
            if namespace is None or pod is None or not _FB_USED.low <= value <= _FB_USED.high:
                continue
            rows.append((namespace, pod, round(value * _FB_USED.scale)))
        frame = pl.DataFrame(rows, schema=PEAKS_SCHEMA, orient="row")
        return frame.group_by("namespace", "pod").agg(pl.col("peak_bytes").max())

    def namespace_daily_peaks(
        self, start: datetime, until: datetime, step_s: float
    ) -> pl.DataFrame:
        """Per namespace, resource (``gpu``, ``cpu`` in milli-CPU, ``memory`` in bytes: the
        KSM names ``nvidia_com_gpu`` / ``cpu`` / ``memory``) and UTC day of ``(start,
        until]``, the largest summed request (:data:`DAILY_SCHEMA`)."""
        rows = []
        first = day = datetime(start.year, start.month, start.day)
        while day <= until:
            # Grid points in [day, day + 1 d) and (start, until]: evaluated at ``end`` the
            # subquery covers (end - span, end].
            end = min(day + _DAY - _MS, until)
            low = max(day - _MS, start)
            whole = low == day - _MS and day + _DAY + SETTLE <= until
            key = (day, step_s)
            if whole and key in self._finished:
                rows += self._finished[key]
            elif end > low:
                found = self._day_peaks(day, low, end, step_s)
                if whole:
                    self._finished[key] = found
                rows += found
            day += _DAY
        for old in [k for k in self._finished if k[0] < first]:
            del self._finished[old]  # before the window: not asked for again
        return pl.DataFrame(rows, schema=DAILY_SCHEMA, orient="row")

    def _day_peaks(
        self, day: datetime, low: datetime, end: datetime, step_s: float
    ) -> list[tuple[str, str, datetime, float]]:
        """The rows of ``day`` over the grid points in ``(low, end]``: one subquery."""
        step = _ms(timedelta(seconds=step_s))
        expr = f"max_over_time(({self._summed_requests(step)})[{_ms(end - low)}:{step}])"
        rows = []
        for s in self._client.query(expr, end):
            value = float(s.values[-1]) if s.values.size else math.nan
            namespace, resource = s.labels.get("namespace"), s.labels.get("resource")
            if namespace and resource in _RESOURCES and math.isfinite(value):
                rows.append((namespace, resource, day, value * _RESOURCES[resource]))
        return rows

    def namespace_first_seen(self, start: datetime, until: datetime, step_s: float) -> pl.DataFrame:
        """Per namespace, the first grid point of ``(start, until]`` at which its live pods
        request anything (:data:`FIRST_SCHEMA`): the start of the history behind its peaks,
        as the DuckDB source takes its first inventory snapshot. One subquery a day,
        ``min_over_time(timestamp(S)[day:step])`` (a store caps the points of one subquery:
        VictoriaMetrics at 30,000, under 14 days at 30 s), whole days kept as the peaks are."""
        step = _ms(timedelta(seconds=step_s))
        first: dict[str, datetime] = {}
        day = datetime(start.year, start.month, start.day)
        while day <= until:
            end = min(day + _DAY - _MS, until)
            low = max(day - _MS, start)
            whole = low == day - _MS and day + _DAY + SETTLE <= until
            key = (day, step_s)
            if whole and key in self._first_finished:
                found = self._first_finished[key]
            else:
                found = self._day_first(low, end, step) if end > low else {}
                if whole:
                    self._first_finished[key] = found
            for namespace, at in found.items():
                first.setdefault(namespace, at)  # days in order: the earliest is kept
            day += _DAY
        for old in [
            k for k in self._first_finished if k[0] < datetime(start.year, start.month, start.day)
        ]:
            del self._first_finished[old]
        return pl.DataFrame(list(first.items()), schema=FIRST_SCHEMA, orient="row")

    def _day_first(self, low: datetime, end: datetime, step: str) -> dict[str, datetime]:
        summed = f"sum by (namespace) ({self._summed_requests(step)})"
        expr = f"min_over_time(timestamp({summed})[{_ms(end - low)}:{step}])"
        found = {}
        for s in self._client.query(expr, end):
            value = float(s.values[-1]) if s.values.size else math.nan
            namespace = s.labels.get("namespace")
            if namespace and math.isfinite(value):
                found[namespace] = datetime(1970, 1, 1) + timedelta(seconds=value)
        return found

    def _summed_requests(self, step: str) -> str:
        extra = f",{self._ksm}" if self._ksm else ""
        resources = "|".join(_RESOURCES)
        requests = (
            "max by (namespace, pod, uid, container, resource) (last_over_time("
            f'{REQUESTS}{{resource=~"{resources}"{extra}}}[{step}]))'
        )
        live = (
            f"max by (uid) (last_over_time({POD_PHASE}"
            f'{{phase=~"{_NOT_DONE}"{extra}}}[{step}])) == 1'
        )
        return f"sum by (namespace, resource) ({requests} and on (uid) ({live}))"
