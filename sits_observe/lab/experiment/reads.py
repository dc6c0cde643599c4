"""What an experiment run's production path stored, read back from the run's DuckDB file.

A run (:mod:`sits_observe.lab.experiment.run`) drives the real agents, service and
inventory over a simulated cluster; at its end these reads turn the stored rows into the
arrays a :class:`~sits_observe.lab.experiment.measures.RunTimeline` holds (NaN for a
NULL value), so the measures are computed from what a real deployment would have stored:

- request latencies: ``latency_s`` of every successful request, by completion time;
- pod start: creation to ``Initialized`` of every pod the inventory saw (earliest snapshot
  values per pod UID), by pod UID;
- GPU utilisation: the mean ``gpu_util_ratio`` over the whole GPUs (no MIG instance) at each
  stored sample time, in seconds since the run's epoch.

The run's database holds that run alone, so every read covers the whole store.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sits_observe.store import Store

FloatArray = npt.NDArray[np.float64]

_LATENCIES = "SELECT latency_s FROM requests WHERE ok ORDER BY ts, latency_s"
_TTFTS = "SELECT ttft_s FROM requests WHERE ok AND ttft_s IS NOT NULL ORDER BY ts, ttft_s"
_POD_START = """
SELECT epoch(initialized_at) - epoch(created_at) AS start_s
FROM (SELECT pod_uid, min(created_at) AS created_at, min(initialized_at) AS initialized_at
      FROM pods GROUP BY pod_uid)
WHERE created_at IS NOT NULL AND initialized_at IS NOT NULL ORDER BY pod_uid
"""
_UTILISATION = """
SELECT epoch(ts) AS t, avg(gpu_util_ratio) AS u FROM gpu_samples
WHERE mig_profile IS NULL GROUP BY ts ORDER BY ts
"""


def _floats(column: pa.ChunkedArray) -> FloatArray:
    """``column`` as float64, NULL as NaN."""
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def request_latencies_s(store: Store) -> FloatArray:
    """Latency of every successful request, s, ordered by completion time."""
    return _floats(store.query(_LATENCIES).column(0))


def request_ttfts_s(store: Store) -> FloatArray:
    """Time to first token of every successful request that has one, s, by completion
    time."""
    return _floats(store.query(_TTFTS).column(0))


def pod_start_s(store: Store) -> FloatArray:
    """Creation to ``Initialized`` of every pod with both times, s, ordered by pod UID."""
    return _floats(store.query(_POD_START).column(0))


def gpu_utilisation(store: Store, epoch_s: float) -> tuple[FloatArray, FloatArray]:
    """Sample times (s since the run's epoch, ``epoch_s`` in Unix seconds) and the mean
    utilisation of the whole GPUs at each (0-1, NaN when no GPU had a value)."""
    table = store.query(_UTILISATION)
    return _floats(table.column("t")) - epoch_s, _floats(table.column("u"))
