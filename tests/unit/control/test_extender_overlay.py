"""Assumed pods (control.extender_overlay, extender_cache): a placement the service makes is in
the view at once, survives rebuilds, and is dropped when a snapshot shows the pod bound.

Cluster: tests.unit.control.extender_support (gpu-a: 8 free H100, 64 CPU; gpu-c: 3 of 4
L40S free)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.control.extender.clusterview.cache import ViewCache
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.overlay import AssumedPods, Placement, with_placements
from sits_observe.store import Store
from tests.unit.control.extender_support import NOW, naive, pods_table, write_cluster

TWO_GPUS = Placement("serve", "new-0", "gpu-a", PodShape(4000, 2, 1000), (0, 1), "uid-new-0")


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "overlay.duckdb")
    write_cluster(s)
    return s


def _cache(store: Store, clock: Clock, ttl_s: float = 600.0) -> ViewCache:
    def build(previous: ClusterView | None) -> ClusterView:
        return build_view(store, NOW, ViewSettings(), previous)

    return ViewCache(
        build,
        refresh_interval_s=1e9,
        monotonic=clock,
        assumed=AssumedPods(ttl_s=ttl_s, monotonic=clock),
    )


def _free(view: ClusterView, node: str) -> tuple[int, int]:
    row = view.index[node]
    return int(view.gpu_free[row]), int(view.state.cpu_free_milli[row])


def test_an_assumed_pod_is_in_a_new_view_and_the_old_view_is_untouched(store: Store) -> None:
    cache = _cache(store, Clock())
    before = cache.refresh()
    assert before is not None and _free(before, "gpu-a") == (8, 64_000)
    frag_before = before.fgd.frag_milli if before.fgd else None
    cache.assume(TWO_GPUS)
    after = cache.get()
    assert after is not None and after is not before
    assert _free(after, "gpu-a") == (6, 60_000)
    assert _free(before, "gpu-a") == (8, 64_000)  # copy-on-write: a call in flight is safe
    assert before.fgd is not None and before.fgd.frag_milli == frag_before
    # The same pod reported again (the pod watch after the bind verb) changes nothing.
    cache.assume(TWO_GPUS)
    again = cache.get()
    assert again is not None and _free(again, "gpu-a") == (6, 60_000)


def test_assumed_pods_survive_rebuilds_until_a_snapshot_shows_them(store: Store) -> None:
    cache = _cache(store, Clock())
    cache.refresh()
    cache.assume(TWO_GPUS)
    rebuilt = cache.refresh()  # same snapshots: the base inventory is reused, the pod re-applied
    assert rebuilt is not None and _free(rebuilt, "gpu-a") == (6, 60_000)
    assert len(cache.assumed) == 1
    # The next inventory snapshot has the pod bound: it is counted once, by the snapshot.
    later = NOW - timedelta(seconds=2)
    bound = pa.table(
        {
            "ts": pa.array([naive(later)], pa.timestamp("us")),
            "pod_uid": ["uid-new-0"],
            "namespace": ["serve"],
            "pod": ["new-0"],
            "node": ["gpu-a"],
            "phase": ["Running"],
            "gpu_request": pa.array([2], pa.int32()),
            "cpu_request_milli": [4000],
        }
    )
    store.append("pods", pa.concat_tables([pods_table(later), bound], promote_options="default"))
    fresh = cache.refresh()
    assert fresh is not None and _free(fresh, "gpu-a") == (6, 60_000)
    assert len(cache.assumed) == 0


def test_an_assumed_pod_expires_without_a_snapshot(store: Store) -> None:
    clock = Clock()
    cache = _cache(store, clock, ttl_s=60.0)
    cache.refresh()
    cache.assume(TWO_GPUS)
    clock.now_s = 61.0
    view = cache.refresh()
    assert view is not None and _free(view, "gpu-a") == (8, 64_000)
    assert len(cache.assumed) == 0


def test_a_placement_that_no_longer_fits_is_skipped_and_counted(store: Store) -> None:
    base = build_view(store, NOW, ViewSettings())
    too_big = Placement("serve", "x", "gpu-c", PodShape(0, 4, 1000), (0, 1, 2, 3))
    unknown = Placement("serve", "y", "gone-node", PodShape(0, 1, 1000), (0,))
    view, skipped = with_placements(base, [too_big, unknown, TWO_GPUS])
    assert skipped == [too_big, unknown]
    assert _free(view, "gpu-c") == _free(base, "gpu-c")
    assert _free(view, "gpu-a") == (6, 60_000)
    assumed = AssumedPods(ttl_s=60.0)
    assumed.add(too_big)
    assumed.count_skipped(skipped)
    assert (assumed.skipped, len(assumed)) == (2, 0)
