"""The collector plug-in contract.

A collector is anything with a ``name`` and a ``collect(now)`` method returning a
:class:`CollectResult`: Arrow tables keyed by table name (see :mod:`.tables`) plus the samples
it dropped, by reason. Collectors never raise for bad input: they drop, count and carry on.
A source that cannot be reached at all raises :class:`sits_observe.errors.CollectorError`,
which the agent loop counts and isolates.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import pyarrow as pa

#: reason -> number of samples dropped for that reason
DropCounter = Counter[str]


@dataclass(frozen=True)
class CollectResult:
    """What one ``collect`` call produced.

    ``dropped`` counts bad input (malformed, non-finite, out of range, vanished): it is stored
    in ``collector_drops``. ``ignored`` counts well-formed samples the product deliberately
    does not keep (an exporter family with no column): reported, never stored as drops, so a
    healthy node does not write a drop row every second.
    """

    tables: dict[str, pa.Table] = field(default_factory=dict)
    dropped: DropCounter = field(default_factory=Counter)
    ignored: DropCounter = field(default_factory=Counter)

    @property
    def rows(self) -> int:
        """Rows over every table."""
        return sum(t.num_rows for t in self.tables.values())

    @property
    def dropped_total(self) -> int:
        """Samples dropped over every reason."""
        return sum(self.dropped.values())

    def merged(self, other: CollectResult) -> CollectResult:
        """This result and ``other`` as one (tables of the same name concatenated)."""
        tables = dict(self.tables)
        for name, table in other.tables.items():
            tables[name] = pa.concat_tables([tables[name], table]) if name in tables else table
        return CollectResult(tables, self.dropped + other.dropped, self.ignored + other.ignored)


class Collector(Protocol):
    """A source of samples: a name and one method."""

    name: str

    def collect(self, now: datetime) -> CollectResult:
        """Read the source once; ``now`` (UTC) stamps samples that carry no time."""
        ...


def drops_table(
    dropped: Counter[str], *, at: datetime, node: str | None, collector: str
) -> pa.Table:
    """One ``collector_drops`` row per reason with a positive count (reasons sorted), stamped
    ``at`` (naive UTC). This is how every ingest path stores what a collector dropped."""
    from sits_observe.domain.tables import COLLECTOR_DROPS

    reasons = sorted(r for r in dropped if dropped[r] > 0)
    n = len(reasons)
    return pa.Table.from_pydict(
        {
            "ts": [at] * n,
            "node": [node] * n,
            "collector": [collector] * n,
            "reason": reasons,
            "count": [dropped[r] for r in reasons],
        },
        schema=COLLECTOR_DROPS.schema,
    )
