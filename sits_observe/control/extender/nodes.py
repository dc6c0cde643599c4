"""Facts of the inventory the extender needs to place a pod and to name its GPU.

Read with each new inventory snapshot
(:func:`sits_observe.control.extender.clusterview.view.build_view`):

- **GPU UUIDs by index**: the bind verb names the GPU it chose in HAMi's hint annotation
  ``nvidia.com/use-gpuuuid``, by UUID; the view scores by index. Each GPU's latest identity
  from whole-GPU samples within ``gpu_sample_window_s`` of the snapshot
  (:mod:`sits_observe.store.gpu_identity`, the read ``analytics.fgd_live`` and every report
  use) gives the UUID at each (node, index), the most recently sampled one where two claim it;
- **bound pods**: the ``(namespace, pod)`` the snapshot shows on a node, so an assumed pod
  (:mod:`sits_observe.control.extender.overlay`) is dropped once the snapshot accounts for it;
- **tie order**: a fixed pseudo-random order of the nodes (CRC-32 of the name) that breaks
  equal ranked scores. The ATC'23 authors' scheduler breaks ties by node name after renaming
  the nodes in a seeded random order, so equal placements keep filling the same nodes; a
  uniformly random choice instead spreads them (docs/analytics/simulator.md: FGD 95.4 % vs
  90.2 % of GPUs allocated). A hash keeps the order fixed across rebuilds and processes
  without any state.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from sits_observe.store import Store
from sits_observe.store.gpu_identity import identity_sql

IntArray = npt.NDArray[np.int64]


def gpu_uuids_by_index(
    store: Store,
    names: Sequence[str],
    gpu_count: IntArray,
    *,
    nodes_at: datetime,
    window_s: float,
) -> tuple[tuple[str, ...], ...]:
    """Per node (in ``names`` order), the UUID of GPU index 0, 1, ... ("" where unknown)."""
    rows = store.query(
        "SELECT node, gpu_index AS idx, gpu_uuid AS uuid "
        f"FROM ({identity_sql('ts >= ?', whole_gpu=True)}) "
        "WHERE node IS NOT NULL AND gpu_index IS NOT NULL ORDER BY seen_at, uuid",
        [nodes_at - timedelta(seconds=window_s)],
    ).to_pylist()
    return uuids_by_index(names, gpu_count, rows)


def uuids_by_index(
    names: Sequence[str], gpu_count: IntArray, rows: Iterable[Mapping[str, object]]
) -> tuple[tuple[str, ...], ...]:
    """Per node (in ``names`` order), the UUID of each index from ``rows`` (``node``,
    ``idx``, ``uuid``, oldest first: a later row's UUID takes the index); "" where no row
    names one."""
    position = {name: i for i, name in enumerate(names)}
    table = [[""] * int(c) for c in gpu_count.tolist()]
    for r in rows:
        i = position.get(str(r["node"]))
        index = int(str(r["idx"]))
        if i is not None and 0 <= index < len(table[i]):
            table[i][index] = str(r["uuid"])
    return tuple(tuple(u) for u in table)


def bound_pods(store: Store, pods_at: datetime | None) -> frozenset[tuple[str, str]]:
    """``(namespace, pod)`` of every pod the ``pods`` snapshot at ``pods_at`` shows bound."""
    if pods_at is None:
        return frozenset()
    rows = store.query(
        "SELECT namespace, pod FROM pods WHERE ts = ? AND node IS NOT NULL", [pods_at]
    ).to_pylist()
    return frozenset((str(r["namespace"]), str(r["pod"])) for r in rows)


def tie_rank(names: Sequence[str]) -> IntArray:
    """Rank of each node in the fixed tie order (0 first): by CRC-32 of the name, then name."""
    keys = sorted(range(len(names)), key=lambda i: (zlib.crc32(names[i].encode()), names[i]))
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.asarray(keys, dtype=np.int64)] = np.arange(len(names), dtype=np.int64)
    return rank
