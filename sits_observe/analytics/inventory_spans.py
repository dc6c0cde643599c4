"""The inventory rows the live analyses read, as the exporter declares them.

``pods`` and ``nodes`` are views (:mod:`sits_observe.store.inventory`): each snapshot time in
``inventory_snapshots`` joined to the versions of its epoch valid at it. So the view's rows at
the snapshots of ``[since, until)`` are a function of two spans of stored rows
(:func:`view_spans`):

- the ``inventory_snapshots`` rows of ``[since, until)`` (of both kinds: a span has no kind
  filter, so a change of the other kind only costs a look at the rows);
- the versions whose ``epoch_at`` is at or after ``E``, the earliest epoch of those
  snapshots: the view joins a snapshot only to versions of its own epoch.

Both are wider than the rows read only where the clock cannot move a row into the read (the
other kind, later epochs); the bounds that follow the clock (``until``, pod start's creation
window) are the reads' own, as :mod:`sits_observe.surfaces.service.exporter.reads` requires.
``E`` is read from the snapshots of the first span, so when that span's fingerprint is equal
the second span is the same span, and equal fingerprints of both mean the same view rows
(:mod:`sits_observe.analytics.row_changes`). An analysis that also asks whether a view is
empty at all (``has_inventory``) reads the whole snapshot table: a snapshot time is only
stored with its rows (store/inventory.py), so its rows are not empty exactly when it is there.

The kube collector stores a snapshot every 30 s, mostly repeating the last one: every
version continues and only a snapshot time is added, which changes those spans. The
exporter's inventory signals (FGD, pod start) depend on the rows they read, not on the times
of the snapshots those rows came from, so they declare their reads twice
(:class:`~sits_observe.analytics.row_changes.ByContent`): the spans, and the fingerprints of
the rows read without their snapshot times, compared only when a span changed:

- :func:`live_cluster_reads`: what
  :func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster` reads (the exporter's call: no
  window): :func:`live_cluster_spans`, and the rows of the latest node and pod snapshots and of the
  workload M (:func:`live_cluster_rows`; M's from the versions, :func:`workload_fingerprint`);
- :func:`pod_start_reads`: what :func:`~sits_observe.analytics.timeline.load_pods` reads:
  :func:`pod_start_spans`, and its rows without ``ts``.

A pass from scratch and an incremental one give the same text in
``tests/unit/surfaces/test_exporter_inventory.py``; the workload's fingerprint is checked
against the view's rows in ``tests/unit/analytics/test_timeline_versions.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sits_observe.analytics.row_changes import (
    ByContent,
    Fingerprint,
    Read,
    RowSpan,
    query_fingerprint,
)
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store
from sits_observe.store.inventory import VERSIONS
from sits_observe.store.reads import has_inventory

#: Every snapshot of either kind: the latest snapshot times, and whether there is any.
SNAPSHOTS = RowSpan("inventory_snapshots")
#: ``ts`` in ``[since, until)``, None = open: four parameters (since, since, until, until).
_IN_RANGE = "(?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)"


def view_spans(
    store: Store, kind: str, since: datetime | None = None, until: datetime | None = None
) -> tuple[RowSpan, ...]:
    """The spans holding the rows of view ``kind`` (``pods`` / ``nodes``) at the snapshots of
    ``since <= ts < until`` (naive UTC, None = open); see the module docstring."""
    lo = None if since is None else utc_naive(since)
    hi = None if until is None else utc_naive(until)
    epoch = store.scalar(
        f"SELECT min(epoch_at) FROM inventory_snapshots WHERE kind = ? AND {_IN_RANGE}",
        [kind, lo, lo, hi, hi],
    )
    snapshots = RowSpan("inventory_snapshots", lo, hi)
    if epoch is None:  # no snapshot in the range: no row, whatever the versions hold
        return (snapshots,)
    return (snapshots, RowSpan(VERSIONS[kind], epoch, column="epoch_at"))


#: The workload M's rows (each pod's latest row in the snapshots of ``[since, at]``) read from
#: the versions: each version at the latest snapshot of its epoch that covers it in the
#: window (an as-of join, as :func:`~sits_observe.analytics.timeline.load_pods` does), then
#: each pod's latest, keyed as ``fgd_live`` keys the view's rows. Parameters: ``at`` + 1 us,
#: ``since`` twice, ``since`` twice.
_WORKLOAD = """
SELECT {cols} FROM (
    SELECT s.ts, v.*
    FROM (
        SELECT *, least(coalesce(valid_to, 'infinity'::TIMESTAMP), ?::TIMESTAMP) AS read_until
        FROM pod_versions
        WHERE ?::TIMESTAMP IS NULL OR coalesce(valid_to, 'infinity'::TIMESTAMP) > ?
    ) AS v
    ASOF JOIN pod_snapshots AS s ON s.epoch_at = v.epoch_at AND v.read_until > s.ts
    WHERE s.ts >= v.valid_from AND (?::TIMESTAMP IS NULL OR s.ts >= ?)
)
QUALIFY row_number() OVER (
    PARTITION BY coalesce(pod_uid, namespace || '/' || pod) ORDER BY ts DESC) = 1
"""


def workload_fingerprint(
    store: Store, at: datetime, since: datetime | None, columns: Sequence[str]
) -> Fingerprint:
    """The fingerprint of ``columns`` of each pod's latest ``pods`` row in the snapshots of
    ``since <= ts <= at`` (the workload M of the pod snapshot at ``at``), from the versions:
    the rows of the view's ``row_number() OVER (PARTITION BY coalesce(pod_uid, namespace ||
    '/' || pod) ORDER BY ts DESC) = 1`` in that window."""
    until = utc_naive(at) + timedelta(microseconds=1)
    start = None if since is None else utc_naive(since)
    sql = _WORKLOAD.format(cols=", ".join(columns))
    return query_fingerprint(store, sql, [until, start, start, start, start])


def live_cluster_spans(store: Store, *, since_s: float | None) -> tuple[RowSpan, ...] | None:
    """What ``live_cluster(store, since_s=since_s)`` reads: the latest node snapshot, the
    latest pod snapshot and the pods ``since_s`` before it. None when a pod of the latest
    snapshot names assigned GPUs (``gpu_uuids``): then the GPU samples of the
    :data:`~sits_observe.analytics.fragmentation.fgd_live.DEVICES_SINCE_S` before the node snapshot
    are read too, and in a fleet they change between any two passes (and an hour of them costs more
    to fingerprint than the signal)."""
    nodes_at = store.scalar("SELECT max(ts) FROM inventory_snapshots WHERE kind = 'nodes'")
    pods_at = store.scalar("SELECT max(ts) FROM inventory_snapshots WHERE kind = 'pods'")
    spans = [SNAPSHOTS]
    if nodes_at is not None:
        spans += view_spans(store, "nodes", nodes_at)
    if pods_at is not None:
        start = None if since_s is None else pods_at - timedelta(seconds=since_s)
        spans += view_spans(store, "pods", start)
        assigned = store.scalar(
            "SELECT EXISTS (SELECT 1 FROM pods WHERE ts = ? AND coalesce(gpu_uuids, '') <> '')",
            [pods_at],
        )
        if assigned:
            return None
    return tuple(spans)


def live_cluster_rows(store: Store, *, since_s: float | None) -> tuple[Fingerprint, ...]:
    """The fingerprints of the rows ``live_cluster(store, since_s=since_s)`` reads, without
    their snapshot times: whether there is an inventory, the columns the live cluster reads
    of the latest node snapshot, of the latest pod snapshot and of the workload M (each
    pod's latest row within ``since_s`` before the latest pod snapshot,
    :func:`workload_fingerprint`). FGD's answer is a function of those rows alone (node and
    pod order is its own: sorted by name)."""
    # fgd_live (numpy, the FGD model) is imported by the first pass, not at service start.
    from sits_observe.analytics.fragmentation.fgd_live import NODE_COLUMNS, POD_COLUMNS

    nodes_at = store.scalar("SELECT max(ts) FROM node_snapshots")
    pods_at = store.scalar("SELECT max(ts) FROM pod_snapshots")
    empty: Fingerprint = (0, None)
    nodes = pods = workload = empty
    if nodes_at is not None:
        sql = f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes WHERE ts = ?"
        nodes = query_fingerprint(store, sql, [nodes_at])
    if pods_at is not None:
        cols = ", ".join(POD_COLUMNS)
        pods = query_fingerprint(store, f"SELECT {cols} FROM pods WHERE ts = ?", [pods_at])
        start = None if since_s is None else pods_at - timedelta(seconds=since_s)
        workload = workload_fingerprint(store, pods_at, start, POD_COLUMNS)
    return ((int(has_inventory(store)), None), nodes, pods, workload)


def live_cluster_reads(store: Store, *, since_s: float | None) -> tuple[Read, ...] | None:
    """What ``live_cluster(store, since_s=since_s)`` reads, twice
    (:class:`~sits_observe.analytics.row_changes.ByContent`): its spans
    (:func:`live_cluster_spans`, cheap to compare, but a new snapshot changes them) and the
    rows themselves (:func:`live_cluster_rows`), compared only when a span changed. So a new
    snapshot that repeats every row FGD reads keeps its text, and any changed, added or
    removed row, or a pod leaving M's window, rebuilds it. None while a pod of the latest
    snapshot names assigned GPUs (see :func:`live_cluster_spans`)."""
    spans = live_cluster_spans(store, since_s=since_s)
    if spans is None:
        return None
    return (ByContent(spans, lambda: live_cluster_rows(store, since_s=since_s)),)


def pod_start_spans(store: Store, since: datetime, until: datetime) -> tuple[RowSpan, ...]:
    """What ``load_pods(store, since=since, until=until)`` reads (each pod's latest row
    before ``until``, kept when it was created in ``[since, until)``), and whether any view
    is empty: every snapshot, the views' rows before ``until``, and the pod versions created
    in ``[since, until)`` (as the clock moves, a pod leaves the window though no row changed;
    these are exactly the versions the creation filter keeps)."""
    lo, hi = utc_naive(since), utc_naive(until)
    return (
        SNAPSHOTS,
        *view_spans(store, "pods", None, hi),
        RowSpan("pod_versions", lo, hi, column="created_at"),
    )


def pod_start_reads(store: Store, since: datetime, until: datetime) -> tuple[Read, ...]:
    """What the exporter's pod start reads, twice
    (:class:`~sits_observe.analytics.row_changes.ByContent`): its spans
    (:func:`pod_start_spans`) and, compared only when a span changed, the rows themselves:
    whether there is an inventory and the rows ``load_pods(store, since=since, until=until)``
    returns without their ``ts``
    (:func:`~sits_observe.analytics.timeline.pods_fingerprint`). The start of every pod is a
    function of those rows alone, so a new snapshot that repeats every row keeps the signal,
    and a changed or new pod, or one leaving the creation window as the clock moves,
    rebuilds it."""
    # timeline (polars) is imported by the first pass, not at service start.
    from sits_observe.analytics.timeline import pods_fingerprint

    def rows() -> tuple[Fingerprint, ...]:
        return ((int(has_inventory(store)), None), pods_fingerprint(store, since, until))

    return (ByContent(pod_start_spans(store, since, until), rows),)
