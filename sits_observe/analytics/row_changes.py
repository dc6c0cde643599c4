"""Whether the rows an analysis reads changed: a content fingerprint of a span of a table.

The exporter rebuilds a derived signal only when the rows behind it changed
(docs/metrics.md, "Incremental passes"). The fingerprint of a :class:`RowSpan` (the rows of
``table`` with ``since <= column < until``, None = open) is its row count and the exact sum
(a 128-bit integer, as text) of DuckDB's 64-bit ``hash`` of each whole row. So an insert, a
delete, and an update of any column change it (container attribution fills the names of
cgroup samples in place; retention's minute roll-ups are upserts), and so does a row entering
or leaving the span as the clock moves it. Two different row sets share a fingerprint only
when their hash sums collide.

A fingerprint costs one scan of the span: the time column to find the rows, then every
column of those rows to hash them. That is a small part of what the analyses over the same
rows cost, and it never reads outside the span. :func:`fingerprints` gives several spans of
one table from one scan (of the smallest span holding them all), each row hashed once: the
same fingerprints as :func:`fingerprint` of each.

Some reads depend on fewer rows than any span that holds them: the rows of the latest
inventory snapshot, whatever its time, are the same after a new snapshot that changed nothing,
though every span of the snapshot times changed. Such a read is declared as
:class:`ByContent`: spans that hold every input (equal fingerprints, the same rows read), and
a query fingerprinting the rows read themselves (:func:`query_fingerprint`), run only when a
span changed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

#: Table and column names are code's, never a user's; they are checked before they are put
#: in the SQL text (values go in as parameters).
_NAME = re.compile(r"[a-z_][a-z0-9_]*")

#: ``(row count, sum of the row hashes as text)``; the sum is None for an empty span.
Fingerprint = tuple[int, str | None]


@dataclass(frozen=True)
class RowSpan:
    """The rows of ``table`` with ``since <= column < until`` (naive UTC; None = open)."""

    table: str
    since: datetime | None = None
    until: datetime | None = None
    column: str = "ts"

    def __post_init__(self) -> None:
        for name in (self.table, self.column):
            if not _NAME.fullmatch(name):
                raise ValueError(f"not a table or column name: {name!r}")


@dataclass(frozen=True, eq=False)
class ByContent:
    """A read declared twice: ``spans`` hold every row it reads (equal fingerprints mean
    the same rows), and ``rows`` fingerprints the rows it reads themselves (queries), asked
    only when a span changed: a signal whose spans changed but whose rows did not keeps its
    build."""

    spans: tuple[RowSpan, ...]
    rows: Callable[[], tuple[Fingerprint, ...]]


#: What a reader declares: a span of a table, or a read declared by content too.
Read = RowSpan | ByContent


def query_fingerprint(
    store: Store, sql: str, params: Sequence[object] | None = None
) -> Fingerprint:
    """The fingerprint of the rows ``sql`` returns (count and sum of whole-row hashes, as for
    a span): equal for the same multiset of rows, whatever their order."""
    row = store.query(
        f"SELECT count(*) AS n, CAST(sum(hash(r)) AS VARCHAR) AS h FROM ({sql}) AS r",
        params or [],
    ).to_pylist()[0]
    return (int(row["n"]), row["h"])


def fingerprint(store: Store, span: RowSpan) -> Fingerprint:
    """The fingerprint of the rows of ``span`` (see the module docstring)."""
    since = None if span.since is None else utc_naive(span.since)
    until = None if span.until is None else utc_naive(span.until)
    row = store.query(
        f"SELECT count(*) AS n, CAST(sum(hash(r)) AS VARCHAR) AS h FROM {span.table} AS r "
        f"WHERE (?::TIMESTAMP IS NULL OR {span.column} >= ?) "
        f"AND (?::TIMESTAMP IS NULL OR {span.column} < ?)",
        [since, since, until, until],
    ).to_pylist()[0]
    return (int(row["n"]), row["h"])


def fingerprints(store: Store, spans: Iterable[RowSpan]) -> dict[RowSpan, Fingerprint]:
    """:func:`fingerprint` of every span, one scan per (table, column) whatever the number
    of its spans. Raises what the store raises (a missing table): nothing is returned then."""
    groups: dict[tuple[str, str], list[RowSpan]] = defaultdict(list)
    for span in dict.fromkeys(spans):
        groups[(span.table, span.column)].append(span)
    out: dict[RowSpan, Fingerprint] = {}
    for (table, column), members in groups.items():
        out.update(zip(members, _scan(store, table, column, members), strict=True))
    return out


def _scan(store: Store, table: str, column: str, spans: list[RowSpan]) -> list[Fingerprint]:
    bounds = [
        (
            None if x.since is None else utc_naive(x.since),
            None if x.until is None else utc_naive(x.until),
        )
        for x in spans
    ]
    starts, ends = [b[0] for b in bounds], [b[1] for b in bounds]
    lo = None if None in starts else min(s for s in starts if s is not None)
    hi = None if None in ends else max(e for e in ends if e is not None)
    inside = "(?::TIMESTAMP IS NULL OR t >= ?) AND (?::TIMESTAMP IS NULL OR t < ?)"
    aggregates = ", ".join(
        f"count(*) FILTER (WHERE {inside}) AS n{i}, "
        f"CAST(sum(h) FILTER (WHERE {inside}) AS VARCHAR) AS h{i}"
        for i in range(len(spans))
    )
    params: list[object] = []
    for since, until in bounds:
        params += [since, since, until, until] * 2
    params += [lo, lo, hi, hi]
    row = store.query(
        f"SELECT {aggregates} FROM (SELECT {column} AS t, hash(r) AS h FROM {table} AS r "
        f"WHERE (?::TIMESTAMP IS NULL OR {column} >= ?) "
        f"AND (?::TIMESTAMP IS NULL OR {column} < ?))",
        params,
    ).to_pylist()[0]
    return [(int(row[f"n{i}"]), row[f"h{i}"]) for i in range(len(spans))]
