"""What the collectors have delivered: dropped samples, the newest row per node, the inventory.

These are the reads behind the exporter's collector families, which no report answers as a
table of its own (the ``fleet`` report shows drops and freshness inside a window):

- :func:`drop_totals`: samples dropped since the store began (every ``collector_drops`` row,
  whatever its time), as a Prometheus counter needs: it only grows;
- :func:`newest_by_node`: the newest stored row of each node in each sample table, whatever
  its time (a last-seen gauge names when a node last delivered, not whether it fell in a
  window);
- :func:`has_inventory`: whether the inventory stored a node and a pod snapshot yet ("no
  inventory yet" is the normal state of a fresh service, not a fault).
"""

from __future__ import annotations

import pyarrow as pa

from sits_observe.store import Store, freshness, reads


def drop_totals(store: Store) -> pa.Table:
    """Samples the collectors dropped since the store began: columns ``collector``,
    ``reason``, ``n``, by collector and reason."""
    return reads.collector_drop_totals(store)


def newest_by_node(store: Store) -> pa.Table:
    """Columns ``source`` (sample table), ``node`` (NULL for rows without one) and
    ``newest_at`` (naive UTC): the newest row of each node in each sample table, by node and
    source."""
    return freshness.newest_by_node(store)


def has_inventory(store: Store) -> bool:
    """True once the inventory stored a node and a pod snapshot."""
    return reads.has_inventory(store)
