"""The latest SMF of each GPU and container equals the summaries' ``latest_smf``.

``latest_smf`` aligns only the samples that can be latest; here it is checked against
``summarize_smf(align_smf(...))`` over the same rows of fleets shaped like the agent's
(GPU samples every few seconds with jitter, cgroup samples after them, some beyond the
skew), with the awkward cases mixed in: NVML rows beside DCGM ones and NVML-only GPUs, MIG
instances, a container on two GPUs, cgroup samples the inventory has not attributed yet, a
restarted container (a new id under the same names), GPU samples that stop early.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.smf import (
    LINKS_SQL,
    SmfGrouping,
    SmfInputs,
    SmfSettings,
    align_smf,
    read_smf_inputs,
)
from sits_observe.analytics.fragmentation.smf_latest import (
    _LINKS_ON_VIEW,
    CONTAINER_LATEST_SCHEMA,
    GPU_LATEST_SCHEMA,
    latest_smf,
    read_latest_smf,
)
from sits_observe.analytics.fragmentation.smf_summary import summarize_smf
from sits_observe.domain.tables import TABLES, conform
from sits_observe.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)
GIB = 1024**3


def fleet(seed: int, nodes: int = 6, ticks: int = 30) -> SmfInputs:
    """A random fleet of ``nodes`` x 4 GPUs over ``ticks`` samples (see the module doc)."""
    rng = np.random.default_rng(seed)
    gpus: list[dict[str, Any]] = []
    cgroups: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    for n in range(nodes):
        node = f"node-{n}"
        for g in range(4):
            uuid = f"GPU-{n}-{g}"
            kind = rng.choice(["dcgm", "dcgm+nvml", "nvml", "mig", "idle", "two-gpu"])
            pod = f"pod-{n}-{g}"
            names = {"namespace": f"ns-{(n + g) % 3}", "pod": pod, "container": "main"}
            stop = ticks if rng.random() < 0.8 else int(rng.integers(1, ticks))
            restart = int(rng.integers(1, ticks)) if rng.random() < 0.3 else None
            instances = [0, 1] if kind == "mig" else [None]
            for k in range(ticks):
                t = T0 + timedelta(seconds=5 * k + float(rng.uniform(0, 0.5)))
                cid = f"c-{n}-{g}" + ("-b" if restart is not None and k >= restart else "")
                for mig in instances:
                    if k < stop and kind != "nvml":
                        gpus.append(
                            {
                                "ts": t,
                                "node": node,
                                "gpu_uuid": uuid,
                                "mig_instance_id": mig,
                                **(names if kind != "idle" else {}),
                                "fb_free_bytes": int(rng.uniform(1, 79) * GIB),
                                "fb_total_bytes": 80 * GIB,
                                "source": "dcgm",
                            }
                        )
                    if kind in ("nvml", "dcgm+nvml"):
                        gpus.append(
                            {
                                "ts": t + timedelta(milliseconds=100),
                                "node": node,
                                "gpu_uuid": uuid,
                                "fb_free_bytes": int(rng.uniform(1, 79) * GIB),
                                "fb_total_bytes": 80 * GIB,
                                "source": "nvml",
                            }
                        )
                        processes.append(
                            {"ts": t, "node": node, "gpu_uuid": uuid, "container_id": cid}
                        )
                    if kind == "two-gpu" and g < 3:  # the same container on the next GPU too
                        processes.append(
                            {
                                "ts": t,
                                "node": node,
                                "gpu_uuid": f"GPU-{n}-{g + 1}",
                                "container_id": cid,
                            }
                        )
                if kind == "idle":
                    continue
                # Mostly within the 2 s skew, sometimes beyond it; some not yet attributed.
                lag_s = float(rng.choice([0.2, 0.8, 1.5, 3.5], p=[0.4, 0.3, 0.2, 0.1]))
                attributed = names if rng.random() < 0.85 else {}
                cgroups.append(
                    {
                        "ts": t + timedelta(seconds=lag_s),
                        "node": node,
                        "container_id": cid,
                        **attributed,
                        "memory_current_bytes": int(rng.uniform(0.5, 70) * GIB),
                    }
                )
    return SmfInputs(
        gpu_samples=table("gpu_samples", gpus),
        container_samples=table("container_samples", cgroups),
        gpu_processes=table("gpu_processes", processes),
    )


def table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    """``rows`` as the table contract's columns (a key a row lacks is NULL)."""
    return conform(name, pa.Table.from_pylist(rows, schema=TABLES[name].schema))


def summaries(inputs: SmfInputs, by: SmfGrouping, cfg: SmfSettings) -> dict[Any, Any]:
    """The old path: ``latest_smf`` (and the namespace) of every group that has one."""
    alignment = align_smf(
        inputs.gpu_samples, inputs.container_samples, inputs.gpu_processes, settings=cfg
    )
    out: dict[Any, Any] = {}
    for s in summarize_smf(alignment, by):
        if s.latest_smf is None:
            continue
        if by is SmfGrouping.gpu:
            out[(s.node, s.gpu_uuid)] = (s.latest_at, s.latest_smf)
        else:
            out[(s.node, s.container_id)] = (s.latest_at, s.latest_smf, s.namespace)
    return out


def same(old: dict[Any, Any], new: dict[Any, Any]) -> None:
    assert new.keys() == old.keys()
    for key, was in old.items():
        now = new[key]
        assert now[0] == was[0], key  # the same latest aligned time
        assert now[1] == pytest.approx(was[1], rel=1e-12, abs=1e-15), key  # mean of the rows
        assert now[2:] == was[2:], key  # the namespace


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("skew_s", [2.0, 0.5])
def test_latest_equals_the_summaries_latest(seed: int, skew_s: float) -> None:
    inputs = fleet(seed)
    cfg = SmfSettings(max_skew_s=skew_s)
    latest = latest_smf(inputs, settings=cfg)
    assert latest.gpus.schema == GPU_LATEST_SCHEMA
    assert latest.containers.schema == CONTAINER_LATEST_SCHEMA
    gpus = {
        (r["node"], r["gpu_uuid"]): (r["latest_at"], r["latest_smf"])
        for r in latest.gpus.to_pylist()
    }
    containers = {
        (r["node"], r["container_id"]): (r["latest_at"], r["latest_smf"], r["namespace"])
        for r in latest.containers.to_pylist()
    }
    old_gpus = summaries(inputs, SmfGrouping.gpu, cfg)
    assert old_gpus  # the fleet aligns something
    same(old_gpus, gpus)
    same(summaries(inputs, SmfGrouping.container, cfg), containers)
    # Sorted by key, as the summaries are.
    assert list(gpus) == sorted(gpus)
    assert list(containers) == sorted(containers)


def test_a_latest_sample_beyond_the_skew_falls_back_to_the_latest_match() -> None:
    gpu = conform(
        "gpu_samples",
        pa.Table.from_pylist(
            [
                {
                    "ts": T0 + timedelta(seconds=s),
                    "node": "n1",
                    "gpu_uuid": "GPU-a",
                    "namespace": "ns",
                    "pod": "p",
                    "container": "c",
                    "fb_free_bytes": free * GIB,
                    "fb_total_bytes": 80 * GIB,
                    "source": "dcgm",
                }
                for s, free in ((0, 40), (10, 60))
            ]
        ),
    )
    cgroups = conform(
        "container_samples",
        pa.Table.from_pylist(
            [
                {
                    "ts": T0 + timedelta(seconds=s),
                    "node": "n1",
                    "container_id": "cid",
                    "namespace": "ns",
                    "pod": "p",
                    "container": "c",
                    "memory_current_bytes": 8 * GIB,
                }
                for s in (1, 11, 15)  # 15 s: 5 s after the last GPU sample, unmatched
            ]
        ),
    )
    inputs = SmfInputs(gpu, cgroups, conform("gpu_processes", pa.Table.from_pylist([])))
    latest = latest_smf(inputs)
    (row,) = latest.gpus.to_pylist()
    assert row["latest_at"] == T0 + timedelta(seconds=11)
    assert row["latest_smf"] == (60 - 8) / 80
    (container,) = latest.containers.to_pylist()
    assert (container["latest_at"], container["namespace"]) == (row["latest_at"], "ns")


def test_empty_inputs_give_empty_tables() -> None:
    empty = SmfInputs(
        *(
            conform(t, pa.Table.from_pylist([]))
            for t in ("gpu_samples", "container_samples", "gpu_processes")
        )
    )
    latest = latest_smf(empty)
    assert latest.gpus.num_rows == 0 and latest.containers.num_rows == 0
    assert latest.gpus.schema == GPU_LATEST_SCHEMA


def test_from_a_store_window_equals_the_summaries(tmp_path: Path) -> None:
    inputs = fleet(3)
    with Store.open(tmp_path / "smf.duckdb") as store:
        store.append("gpu_samples", inputs.gpu_samples)
        store.append("container_samples", inputs.container_samples)
        store.append("gpu_processes", inputs.gpu_processes)
        since = T0 + timedelta(seconds=60)  # a window that cuts the fleet's first minute
        read = read_smf_inputs(store, since=since)
        tables = store.query("SELECT table_name FROM duckdb_tables() ORDER BY 1")
        on_store = read_latest_smf(store, since=since)  # on a cursor of the store
        # Its temporary tables were the cursor's own: the store has the same tables.
        assert store.query("SELECT table_name FROM duckdb_tables() ORDER BY 1") == tables
    cfg = SmfSettings()
    private = latest_smf(read, settings=cfg)  # on a private in-memory database
    assert on_store.gpus.equals(private.gpus)
    assert on_store.containers.equals(private.containers)
    gpus = {
        (r["node"], r["gpu_uuid"]): (r["latest_at"], r["latest_smf"])
        for r in private.gpus.to_pylist()
    }
    same(summaries(read, SmfGrouping.gpu, cfg), gpus)


def test_the_cgroup_samples_are_read_through_a_view() -> None:
    """latest_smf runs the whole-window path's links SQL with one change: the cgroup samples
    are a view over the input, not a copy (the tests above check the answers are equal)."""
    assert _LINKS_ON_VIEW != LINKS_SQL
    assert LINKS_SQL.replace("CREATE TEMP TABLE cg AS", "CREATE TEMP VIEW cg AS") == _LINKS_ON_VIEW
