"""Each pod's request histograms over one window, read from vLLM series in a PromQL store.

The ``classes`` report needs, per serving pod, how many requests finished in the window and
how their end-to-end latency, prompt length and output length were distributed. The request
log (``requests`` in DuckDB) holds each request; a PromQL store holds vLLM's cumulative
histograms (vllm/v1/metrics/loggers.py): ``vllm:e2e_request_latency_seconds`` (seconds),
``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens`` (tokens), each a
``_bucket`` series per upper bound ``le``, labelled ``model_name`` and ``engine``, and with
the pod by the scrape's relabelling (``namespace`` / ``pod``, or ``kubernetes_namespace`` /
``kubernetes_pod_name``, as :data:`~sits_observe.store.promql.source.SERVER_LABELS`).

A bucket's requests in the window ``[since, until)`` are the increase of its counter from the
newest sample before ``since`` (within ``prime_s``; none: the series starts in the window and
counts from 0, a server that started in it) to the newest sample before ``until``: the
requests that finished between those two scrapes, so each edge of the window is as sharp as
the scrape interval. Three instant queries a family, whatever the window's length
(``last_over_time`` at each edge, ``resets`` between them), so the store does the work, not
the transfer. A counter that reset in between (a restarted server) takes the store's
``increase()`` over the window instead, flagged ``estimated``: VictoriaMetrics computes it
from the sample before the window, exactly; Prometheus extrapolates it to the window's edges.

Series of one pod and bound (engines, models, the two label spellings) are summed after each
series' increase is taken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

import polars as pl

from sits_observe.domain.histogram_bounds import parse_le
from sits_observe.store.promql.client import PromQLClient, PromSeries
from sits_observe.store.promql.source import SERVER_LABELS, VLLM_E2E

_MS = timedelta(milliseconds=1)

#: vLLM histogram family -> the ``requests`` column it describes.
FAMILIES: dict[str, str] = {
    VLLM_E2E: "latency_s",
    "vllm:request_prompt_tokens": "prompt_tokens",
    "vllm:request_generation_tokens": "output_tokens",
}

#: Columns of :meth:`PromQLRequestHistograms.window_buckets`: ``requests`` is cumulative
#: (the requests whose value is at most ``le``; ``le`` = inf for all of them).
BUCKETS_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "quantity": pl.String(),
    "le": pl.Float64(),
    "requests": pl.Float64(),
    "estimated": pl.Boolean(),
}

_Key = frozenset[tuple[str, str]]


def _ms(span: timedelta) -> str:
    return f"{max(1, round(span / _MS))}ms"


def _by_series(series: list[PromSeries]) -> dict[_Key, float]:
    """Each series' newest finite value, keyed by its labels without the metric name (which
    rollup functions drop)."""
    out: dict[_Key, float] = {}
    for s in series:
        if s.values.size and math.isfinite(float(s.values[-1])):
            out[frozenset((k, v) for k, v in s.labels.items() if k != "__name__")] = float(
                s.values[-1]
            )
    return out


def _label(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


class PromQLRequestHistograms:
    """The window's per-pod bucket counts (module docstring); ``matchers`` are added to
    every selector (e.g. ``job="vllm"``)."""

    name = "promql"

    def __init__(self, client: PromQLClient, *, matchers: str = "") -> None:
        self._client = client
        self._matchers = matchers

    def window_buckets(
        self, since: datetime, until: datetime, *, prime_s: float = 300.0
    ) -> pl.DataFrame:
        """Per pod, family (``quantity``: the ``requests`` column) and bound, the requests
        that finished in ``[since, until)`` (naive UTC), :data:`BUCKETS_SCHEMA`."""
        rows: list[tuple[str, str, str, float, float, bool]] = []
        for family, quantity in FAMILIES.items():
            for (namespace, pod, le), (count, estimated) in self._family(
                family, since, until, prime_s
            ).items():
                rows.append((namespace, pod, quantity, le, count, estimated))
        return pl.DataFrame(rows, schema=BUCKETS_SCHEMA, orient="row")

    def _family(
        self, family: str, since: datetime, until: datetime, prime_s: float
    ) -> dict[tuple[str, str, float], tuple[float, bool]]:
        extra = f",{self._matchers}" if self._matchers else ""
        selector = f'{{__name__="{family}_bucket"{extra}}}'
        span, prime = until - since, timedelta(seconds=prime_s)
        end = _by_series(
            self._client.query(f"last_over_time({selector}[{_ms(span)}])", until - _MS)
        )
        if not end:
            return {}
        base = _by_series(
            self._client.query(f"last_over_time({selector}[{_ms(prime)}])", since - _MS)
        )
        resets = _by_series(
            self._client.query(f"resets({selector}[{_ms(span + prime)}])", until - _MS)
        )
        reset = {k for k, v in resets.items() if v > 0} | {
            k for k, v in end.items() if v < base.get(k, 0.0)
        }
        increase = (
            _by_series(self._client.query(f"increase({selector}[{_ms(span)}])", until - _MS))
            if reset & end.keys()
            else {}
        )
        out: dict[tuple[str, str, float], tuple[float, bool]] = {}
        for key, value in end.items():
            labels = dict(key)
            namespace = _label(labels, SERVER_LABELS["namespace"])
            pod = _label(labels, SERVER_LABELS["pod"])
            le = parse_le(labels.get("le"))
            if namespace is None or pod is None or le is None:
                continue
            estimated = key in reset
            count = increase.get(key, 0.0) if estimated else value - base.get(key, 0.0)
            total, flagged = out.get((namespace, pod, le), (0.0, False))
            out[(namespace, pod, le)] = (total + count, flagged or estimated)
        return out
