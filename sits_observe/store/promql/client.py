"""A small client of the Prometheus HTTP query API (Prometheus, VictoriaMetrics, Thanos, Mimir).

Only the three read endpoints every Prometheus-compatible store serves are used
(https://prometheus.io/docs/prometheus/latest/querying/api/):

- ``GET /api/v1/query_range`` (``query``, ``start``, ``end``, ``step``): a matrix, one value per
  series per ``step`` on the grid ``start + k * step``; each value is the newest raw sample at or
  before the grid point within the store's look-back (5 min in Prometheus, about ``step`` in
  VictoriaMetrics).
- ``GET /api/v1/query`` (``query``, ``time``): with a range selector ``m[d]`` the answer is a
  matrix of the RAW samples in ``(time - d, time]`` with their own timestamps; that is how
  :mod:`.promql_source` reads exact samples.
- ``GET /api/v1/series`` (``match[]``, ``start``, ``end``): the label sets that exist.

Times on the wire are float Unix seconds; values are strings (``"NaN"``, ``"+Inf"`` included)
and are returned as floats. Every transport failure, non-2xx answer or ``status: error`` body is
raised as :class:`~sits_observe.errors.StoreError` naming the URL, the query and what the store
said. Nothing here knows a metric name: callers build the PromQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import httpx
import numpy as np
import numpy.typing as npt

from sits_observe.errors import StoreError

#: Seconds one request may take unless the caller says otherwise.
DEFAULT_TIMEOUT_S = 30.0


class _Series(TypedDict, total=False):
    """One series of a ``matrix`` / ``vector`` answer, as JSON."""

    metric: dict[str, str]
    values: list[list[Any]]
    value: list[Any]


@dataclass(frozen=True)
class PromSeries:
    """One series: its labels (``__name__`` included) and its points in time order.

    ``t_s`` are Unix seconds (float, millisecond resolution on the wire); ``values`` floats.
    """

    labels: Mapping[str, str]
    t_s: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]

    @property
    def name(self) -> str:
        """The metric name (``""`` when the expression dropped it)."""
        return self.labels.get("__name__", "")


def unix_s(at: datetime) -> float:
    """``at`` as Unix seconds; a naive datetime is taken as UTC (the store's convention)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


def _wire_time(seconds: float) -> str:
    # Millisecond precision: Prometheus stores milliseconds; more digits only invite rounding.
    return f"{seconds:.3f}"


class PromQLClient:
    """Reads series from one Prometheus-compatible query endpoint, e.g.
    ``http://vmselect:8481/select/0/prometheus`` or ``http://prometheus:9090``.

    ``client`` is injectable (tests pass one with a mock transport); the default one is
    closed by :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise StoreError(f"PromQL URL {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self._own = client is None
        self._client = client or httpx.Client(timeout=timeout_s, headers=dict(headers or {}))

    def close(self) -> None:
        """Release the HTTP connections (only when this object created the client)."""
        if self._own:
            self._client.close()

    @property
    def closed(self) -> bool:
        return self._client.is_closed

    def __enter__(self) -> PromQLClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoints --------------------------------------------------------------------------

    def query_range(
        self, expr: str, start: datetime, end: datetime, step_s: float
    ) -> list[PromSeries]:
        """``expr`` evaluated every ``step_s`` seconds from ``start`` to ``end`` (inclusive)."""
        if step_s <= 0:
            raise StoreError(f"PromQL step {step_s} s must be positive")
        params = {
            "query": expr,
            "start": _wire_time(unix_s(start)),
            "end": _wire_time(unix_s(end)),
            "step": f"{step_s:g}s",
        }
        return _matrix(self._get("/api/v1/query_range", params, expr), expr)

    def query(self, expr: str, at: datetime) -> list[PromSeries]:
        """``expr`` evaluated at ``at``: a vector (one point per series) or, for a range
        selector, the raw samples of each series."""
        data = self._get("/api/v1/query", {"query": expr, "time": _wire_time(unix_s(at))}, expr)
        kind = data.get("resultType")
        if kind == "matrix":
            return _matrix(data, expr)
        if kind == "vector":
            out = []
            for item in data.get("result", []):
                point = item.get("value") or [float("nan"), "NaN"]
                out.append(
                    PromSeries(
                        dict(item.get("metric", {})),
                        np.array([float(point[0])]),
                        np.array([float(point[1])]),
                    )
                )
            return out
        if kind == "scalar":
            point = data.get("result") or [float("nan"), "NaN"]
            return [PromSeries({}, np.array([float(point[0])]), np.array([float(point[1])]))]
        raise StoreError(f"PromQL {expr!r}: unexpected result type {kind!r} from {self.base_url}")

    def series(
        self, matchers: Sequence[str], start: datetime, end: datetime
    ) -> list[dict[str, str]]:
        """Label sets of the series matching any of ``matchers`` in ``[start, end]``."""
        params: list[tuple[str, str]] = [("match[]", m) for m in matchers]
        params += [("start", _wire_time(unix_s(start))), ("end", _wire_time(unix_s(end)))]
        data = self._get("/api/v1/series", params, " or ".join(matchers))
        if not isinstance(data, list):
            raise StoreError(f"/api/v1/series on {self.base_url} did not answer a list")
        return [dict(labels) for labels in data]

    # -- plumbing ---------------------------------------------------------------------------

    def _get(self, path: str, params: Any, expr: str) -> Any:
        url = self.base_url + path
        try:
            response = self._client.get(url, params=params)
        except httpx.HTTPError as exc:
            raise StoreError(f"PromQL store {url} unreachable for {expr!r}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 300 or not isinstance(body, dict):
            said = body.get("error") if isinstance(body, dict) else response.text[:300]
            raise StoreError(
                f"PromQL store {url} answered HTTP {response.status_code} for {expr!r}: {said}"
            )
        if body.get("status") != "success":
            raise StoreError(
                f"PromQL store {url} refused {expr!r}: {body.get('errorType')}: {body.get('error')}"
            )
        return body.get("data")


def _matrix(data: Any, expr: str) -> list[PromSeries]:
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise StoreError(f"PromQL {expr!r}: expected a matrix, got {kind!r}")
    out = []
    item: _Series
    for item in data.get("result", []):
        points = item.get("values", [])
        t_s = np.fromiter((float(p[0]) for p in points), np.float64, len(points))
        values = np.fromiter((float(p[1]) for p in points), np.float64, len(points))
        out.append(PromSeries(dict(item.get("metric", {})), t_s, values))
    return out
