"""Upper bounds of Prometheus histogram buckets, read from their ``le`` label.

Both readers of latency histograms parse ``le`` the same way: the collectors from a scrape's
exposition text, the PromQL source from a query's series. The label is a Go float
(``0.005``, ``1e+01``, ``+Inf``; the exposition format spec, "Histograms and summaries"); an
absent, unreadable or NaN bound is ``None``, which the caller drops with its bucket.
"""

from __future__ import annotations

import math


def parse_le(text: str | None) -> float | None:
    """The ``le`` label value ``text`` as a float (``+Inf`` included), else None."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value
