"""Occupancy series read from a real DuckDB store: buckets, MIG, nodes, rollups."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.trends.clusters import cluster_trends
from sits_observe.analytics.trends.series import (
    TrendLevel,
    auto_bucket_s,
    read_newest_occupancy,
    read_occupancy_series,
    series_from_arrow,
    series_from_batches,
)
from sits_observe.domain.tables import conform
from sits_observe.errors import ConfigError
from sits_observe.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)
GIB = 1024**3


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def epoch(ts: datetime) -> float:
    return (ts - datetime(1970, 1, 1)).total_seconds()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "trends.duckdb") as s:
        yield s


def add_gpu(store: Store, rows: list[dict[str, Any]]) -> None:
    base = {"node": "n1", "gpu_uuid": "GPU-a", "fb_total_bytes": 80 * GIB, "source": "dcgm"}
    store.append(
        "gpu_samples", conform("gpu_samples", pa.Table.from_pylist([base | r for r in rows]))
    )


def test_bucket_means_per_gpu(store: Store) -> None:
    add_gpu(
        store,
        [
            {"ts": at(0), "fb_used_bytes": 8 * GIB},
            {"ts": at(20), "fb_used_bytes": 16 * GIB},
            {"ts": at(61), "fb_used_bytes": 40 * GIB},
            {"ts": at(62), "fb_used_bytes": None},  # not measured: ignored
            {"ts": at(5), "gpu_uuid": "GPU-b", "fb_used_bytes": 0},
        ],
    )
    series = read_occupancy_series(store, bucket_s=60)
    assert series.keys == ("GPU-a", "GPU-b")
    assert series.nodes == ("n1", "n1")
    assert series.codes.tolist() == [0, 0, 1]
    assert series.values.tolist() == [0.15, 0.5, 0.0]
    assert series.t_s.tolist() == [epoch(at(0)), epoch(at(60)), epoch(at(0))]


def test_mig_instances_add_up_and_nodes_weight_by_capacity(store: Store) -> None:
    def row(used_gib: int, total_gib: int, **kw: Any) -> dict[str, Any]:
        return {
            "ts": at(0),
            "fb_used_bytes": used_gib * GIB,
            "fb_total_bytes": total_gib * GIB,
        } | kw

    add_gpu(
        store,
        [
            row(5, 10, mig_instance_id=1),
            row(1, 30, mig_instance_id=2),
            row(14, 40, gpu_uuid="GPU-b"),
            row(0, 80, node="n2", gpu_uuid="GPU-c"),
        ],
    )
    gpus = read_occupancy_series(store, bucket_s=60)
    assert dict(zip(gpus.keys, gpus.values.tolist(), strict=True)) == {
        "GPU-a": 6 / 40,
        "GPU-b": 14 / 40,
        "GPU-c": 0.0,
    }
    nodes = read_occupancy_series(store, level=TrendLevel.node, bucket_s=60)
    assert nodes.keys == ("n1", "n2")
    assert nodes.values.tolist() == [20 / 80, 0.0]


def test_rollup_minutes_fill_in_where_raw_samples_are_gone(store: Store) -> None:
    add_gpu(store, [{"ts": at(120), "fb_used_bytes": 40 * GIB}])
    with store.transaction() as con:
        con.execute(
            "INSERT INTO gpu_samples_1m (minute, node, gpu_uuid, mig_instance_id, samples, "
            "fb_used_bytes_sum, fb_total_bytes_max) VALUES "
            "(?, 'n1', 'GPU-a', -1, 4, ?, ?), (?, 'n1', 'GPU-a', -1, 2, ?, ?)",
            [at(0), 4 * 8 * GIB, 80 * GIB, at(120), 2 * 70 * GIB, 80 * GIB],
        )
    minute = read_occupancy_series(store, bucket_s=60)
    # minute 0 from the rollup; minute 2 from its raw sample (the rollup row is not added).
    assert minute.values.tolist() == [0.1, 0.5]
    assert minute.t_s.tolist() == [epoch(at(0)), epoch(at(120))]
    assert read_occupancy_series(store, bucket_s=30).values.tolist() == [0.5]  # raw only
    assert read_occupancy_series(store, since=at(60), bucket_s=60).values.tolist() == [0.5]


def test_auto_bucket(store: Store) -> None:
    assert [auto_bucket_s(s) for s in (0, 20, 600, 3600, 4 * 3600, 7 * 86400)] == [
        1, 1, 2, 15, 60, 60,
    ]  # fmt: skip
    add_gpu(store, [{"ts": at(s), "fb_used_bytes": GIB} for s in range(0, 3600, 10)])
    assert read_occupancy_series(store).bucket_s == 10
    with pytest.raises(ConfigError, match="out of range"):
        read_occupancy_series(store, bucket_s=0)


def test_empty_store_gives_no_series_and_clustering_says_so(store: Store) -> None:
    series = read_occupancy_series(store)
    assert series.points == 0 and series.keys == ()
    result = cluster_trends(series)
    assert result.n_series == 0 and result.clusters == () and result.notes


def test_series_from_arrow_sorts_and_accepts_timestamps() -> None:
    table = pa.table(
        {
            "key": ["b", "a", None, "a"],
            "node": ["n2", "n1", "n1", "n1"],
            "t_s": pa.array([at(0), at(60), at(0), at(0)], pa.timestamp("us")),
            "value": [0.2, None, 0.9, 0.1],
        }
    )
    series = series_from_arrow(table)
    assert series.keys == ("a", "b") and series.nodes == ("n1", "n2")
    assert series.codes.tolist() == [0, 0, 1]
    assert series.t_s.tolist() == [epoch(at(0)), epoch(at(60)), epoch(at(0))]
    assert np.isnan(series.values[1]) and series.values[[0, 2]].tolist() == [0.1, 0.2]


def test_batches_split_anywhere_give_the_same_series() -> None:
    rng = np.random.default_rng(0)
    keys = np.repeat(["a", "b", "c", "d"], [5, 1, 7, 3])
    table = pa.table(
        {
            "key": keys,
            "node": np.repeat(["n1", "n1", "n2", "n3"], [5, 1, 7, 3]),
            "t_s": np.concatenate([np.arange(k) * 60.0 for k in (5, 1, 7, 3)]),
            "value": rng.uniform(0, 1, keys.size),
        }
    )
    whole = series_from_arrow(table)
    for size in (1, 2, 3, 5, 16):
        split = series_from_batches(table.to_batches(max_chunksize=size))
        assert split.keys == whole.keys == ("a", "b", "c", "d")
        assert split.nodes == whole.nodes == ("n1", "n1", "n2", "n3")
        assert split.codes.tolist() == whole.codes.tolist()
        assert split.values.tolist() == whole.values.tolist()
        assert split.t_s.tolist() == whole.t_s.tolist()
    empty = series_from_batches([])
    assert empty.keys == () and empty.points == 0


def _random_fleet(store: Store, seed: int) -> None:
    """Raw samples of whole and MIG GPUs on three nodes at random times over 10 minutes (some
    without a value), and roll-up minutes, some overlapping raw minutes of the same instance."""
    rng = np.random.default_rng(seed)
    gpus = [("n1", "GPU-a"), ("n1", "GPU-b"), ("n2", "GPU-c"), ("n3", "GPU-m")]
    rows: list[dict[str, Any]] = []
    for node, uuid in gpus:
        migs = [1, 2] if uuid == "GPU-m" else [None]
        for mig in migs:
            for t in np.sort(rng.uniform(0, 600, int(rng.integers(1, 25)))):
                rows.append(
                    {
                        "ts": at(float(t)),
                        "node": node,
                        "gpu_uuid": uuid,
                        "mig_instance_id": mig,
                        "fb_used_bytes": None
                        if rng.random() < 0.1
                        else int(rng.uniform(0, 40) * GIB),
                        "fb_total_bytes": 40 * GIB if mig else 80 * GIB,
                    }
                )
    add_gpu(store, rows)
    with store.transaction() as con:
        for node, uuid in gpus:
            for minute in rng.choice(14, size=4, replace=False):
                mig = 1 if uuid == "GPU-m" else -1
                samples = int(rng.integers(1, 60))
                con.execute(
                    "INSERT INTO gpu_samples_1m (minute, node, gpu_uuid, mig_instance_id, "
                    "samples, fb_used_bytes_sum, fb_total_bytes_max) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [at(60 * int(minute)), node, uuid, mig, samples,
                     samples * int(rng.uniform(0, 40) * GIB), 80 * GIB],
                )  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("level", list(TrendLevel))
@pytest.mark.parametrize("bucket_s", [60, 120, 30, 7])
@pytest.mark.parametrize(("since_s", "until_s"), [(None, None), (200, None), (100, 500)])
def test_the_newest_read_is_the_last_point_of_each_series(
    store: Store,
    seed: int,
    level: TrendLevel,
    bucket_s: int,
    since_s: float | None,
    until_s: float | None,
) -> None:
    _random_fleet(store, seed)
    window: dict[str, Any] = {
        "since": None if since_s is None else at(since_s),
        "until": None if until_s is None else at(until_s),
        "level": level,
        "bucket_s": bucket_s,
    }
    full = read_occupancy_series(store, **window)
    newest = read_newest_occupancy(store, **window)
    last = np.flatnonzero(np.append(full.codes[1:] != full.codes[:-1], True))
    assert newest.points == len(full.keys) == last.size > 0
    assert newest.keys == full.keys and newest.nodes == full.nodes
    assert newest.codes.tolist() == list(range(last.size))
    assert newest.t_s.tolist() == full.t_s[last].tolist()
    np.testing.assert_allclose(newest.values, full.values[last], rtol=1e-12)


def test_the_newest_read_of_an_empty_store_and_a_bad_bucket(store: Store) -> None:
    assert read_newest_occupancy(store, bucket_s=60).points == 0
    with pytest.raises(ConfigError, match="out of range"):
        read_newest_occupancy(store, bucket_s=0)
