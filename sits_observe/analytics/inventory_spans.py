"""The inventory rows the live analyses read, as spans the exporter can fingerprint.

``pods`` and ``nodes`` are views (:mod:`sits_observe.store.inventory`): each snapshot time in
``inventory_snapshots`` joined to the versions of its epoch valid at it. So the view's rows at
the snapshots of ``[since, until)`` are a function of two spans of stored rows:

- the ``inventory_snapshots`` rows of ``[since, until)`` (of both kinds: a span has no kind
  filter, so a change of the other kind only costs a rebuild);
- the versions whose ``epoch_at`` is at or after ``E``, the earliest epoch of those
  snapshots: the view joins a snapshot only to versions of its own epoch.

Both are wider than the rows read only where the clock cannot move a row into the read (the
other kind, later epochs); the bounds that follow the clock (``until``, pod start's creation
window) are the reads' own, as :mod:`sits_observe.surfaces.service.exporter_reads` requires.

``E`` is read from the snapshots of the first span, so when that span's fingerprint is equal
the second span is the same span, and equal fingerprints of both mean the same view rows
(:mod:`sits_observe.analytics.row_changes`). An analysis that also asks whether a view is
empty at all (``has_inventory``) reads the whole snapshot table: a snapshot time is only
stored with its rows (store/inventory.py), so its rows are not empty exactly when it is there.

:func:`live_cluster_spans` and :func:`pod_start_spans` list exactly what
:func:`~sits_observe.analytics.fgd_live.live_cluster` (the exporter's call: no window) and
:func:`~sits_observe.analytics.timeline.load_pods` read; a pass from scratch and an
incremental one give the same text in ``tests/unit/surfaces/test_exporter_inventory.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sits_observe.analytics.row_changes import RowSpan
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store
from sits_observe.store.inventory import VERSIONS

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


def live_cluster_spans(store: Store, *, since_s: float | None) -> tuple[RowSpan, ...] | None:
    """What ``live_cluster(store, since_s=since_s)`` reads: the latest node snapshot, the
    latest pod snapshot and the pods ``since_s`` before it. None when a pod of the latest
    snapshot names assigned GPUs (``gpu_uuids``): then the GPU samples of the
    :data:`~sits_observe.analytics.fgd_live.DEVICES_SINCE_S` before the node snapshot are read
    too, and in a fleet they change between any two passes (and an hour of them costs more to
    fingerprint than the signal)."""
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
