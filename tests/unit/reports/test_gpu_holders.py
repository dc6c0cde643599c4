"""GPU attribution's newest-row read equals the read that numbers every sample of the window.

``gpu_instances`` takes each instance's newest time first and orders only the rows at that
time; the reference below is the query it replaced (every sample numbered by ``ts DESC, pod IS
NULL, namespace, pod``). Both run on the same DuckDB file: random MIG and whole GPUs, NULL
UUIDs, time-slicing ties (several pods at one time), unattributed rows, rows without a
framebuffer value and rows outside the window. The node, index and model it gives are the
GPU's latest identity (each the newest known in the window, computed here in Python), not
whatever the attributed row happened to carry.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.domain.tables import conform
from sits_observe.reports.inventory.gpu_holders import gpu_instances
from sits_observe.reports.window import Window
from sits_observe.store import Store

T0 = datetime(2026, 11, 30, 12, 0, 0)

REFERENCE = """
SELECT node, gpu_uuid, gpu_index, model_name, mig_profile, namespace, pod, fb_used_bytes
FROM gpu_samples
WHERE ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?) AND fb_used_bytes IS NOT NULL
QUALIFY row_number() OVER (
    PARTITION BY gpu_uuid, mig_instance_id
    ORDER BY ts DESC, pod IS NULL, namespace, pod
) = 1
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "holders.duckdb") as s:
        yield s


def _rows(seed: int) -> list[dict[str, Any]]:
    """Samples every 10 s for 5 minutes; at each time an instance has a random set of
    distinct pods (time-slicing), sometimes an unattributed row, sometimes no value."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    instances: list[tuple[str | None, int | None]] = [(f"GPU-{g}", None) for g in range(6)]
    instances += [("GPU-mig", i) for i in (1, 2, 3)]
    instances.append((None, None))  # a sample without a UUID: its own group, as before
    # Where each GPU is at each tick (the same for all its MIG instances); an index that a
    # collector could not read is missing now and then.
    place = {
        (uuid, k): (
            f"node-{int(rng.integers(0, 2))}",
            None if rng.random() < 0.2 else int(rng.integers(0, 8)),
        )
        for uuid in {u for u, _ in instances}
        for k in range(30)
    }
    for uuid, mig in instances:
        for k in range(30):
            ts = T0 + timedelta(seconds=10 * k + int(rng.integers(0, 3)))
            node, index = place[uuid, k]
            pods = rng.choice(8, size=int(rng.integers(0, 4)), replace=False)
            holders: list[tuple[str | None, str | None]] = [
                (f"ns-{p % 2}", f"pod-{p}") for p in pods
            ]
            if not holders or rng.random() < 0.3:
                holders.append((None, None))
            for namespace, pod in holders:
                rows.append(
                    {
                        "ts": ts,
                        "node": node,
                        "gpu_uuid": uuid,
                        "gpu_index": index,
                        "model_name": "NVIDIA A100" if mig is None else "NVIDIA H100",
                        "mig_instance_id": mig,
                        "mig_profile": None if mig is None else "1g.10gb",
                        "namespace": namespace,
                        "pod": pod,
                        "fb_used_bytes": None
                        if rng.random() < 0.1
                        else int(rng.integers(1, 10**9)),
                        "source": "dcgm",
                    }
                )
    return rows


def _identities(rows: list[dict[str, Any]], window: Window) -> dict[str, dict[str, Any]]:
    """Per UUID in ``window``: the newest known node, index and model."""
    inside = [
        r
        for r in rows
        if r["gpu_uuid"] is not None
        and r["ts"] < window.until
        and (window.since is None or r["ts"] >= window.since)
    ]
    known: dict[str, dict[str, Any]] = {}
    for r in sorted(inside, key=lambda r: r["ts"]):
        mine = known.setdefault(r["gpu_uuid"], {})
        for column in ("node", "gpu_index", "model_name"):
            if r[column] is not None:
                mine[column] = r[column]
    return known


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    ("since_s", "until_s"), [(None, 400.0), (60.0, 200.0), (120.0, 121.0), (0.0, 295.0)]
)
def test_newest_instance_rows_equal_the_numbered_read(
    store: Store, seed: int, since_s: float | None, until_s: float
) -> None:
    rows = _rows(seed)
    store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(rows)))
    since = None if since_s is None else T0 + timedelta(seconds=since_s)
    window = Window(since, T0 + timedelta(seconds=until_s), "test")
    got = gpu_instances(store, window)
    newest = store.query(REFERENCE, [window.until, window.since, window.since]).to_pylist()
    identity = _identities(rows, window)
    expected = pa.Table.from_pylist(
        [{**r, **identity.get(r["gpu_uuid"] or "", {})} for r in newest], got.schema
    )
    assert got.schema.names == expected.schema.names
    assert _sorted(got) == _sorted(expected)
    assert got.num_rows > 0 or since_s == 120.0  # the windows hold rows (one may not)
