"""Timestamps in the one form every table holds: zone-less UTC.

DuckDB ``TIMESTAMP`` columns carry no zone, so every ``ts`` is stored as naive UTC. Clocks
and parsed RFC 3339 times arrive zoned; :func:`utc_naive` is the single conversion, used by
the collectors when they stamp rows and by the store, analytics and control when they bind a
time to SQL. A naive input is taken to be UTC already (never local time), so converting
twice is harmless.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc_naive(ts: datetime) -> datetime:
    """``ts`` as a zone-less UTC datetime, the form every ``TIMESTAMP`` column holds."""
    if ts.tzinfo is None:
        return ts
    return ts.astimezone(UTC).replace(tzinfo=None)
