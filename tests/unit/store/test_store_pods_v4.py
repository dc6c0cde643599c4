"""Schema version 4: a version-3 file gains the pods' GPU share columns and keeps its rows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.domain.tables import PODS
from sits_observe.store import Store
from sits_observe.store.migrations import latest_version, migrations

T0 = datetime(2026, 11, 1, 12, 0, 0)
T1 = datetime(2026, 11, 1, 12, 1, 0)


def version_3_file(path: Path) -> None:
    """What a build of schema version 3 left: a node, and a pod holding one whole GPU."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    for migration in migrations()[:3]:
        con.execute(migration.sql)
        con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)", [migration.version])
    con.execute(
        "INSERT INTO nodes (ts, node, gpu_allocatable, gpu_product, cpu_allocatable_milli, ready) "
        "VALUES (?, 'g1', 2, 'A10', 8000, true)",
        [T0],
    )
    con.execute(
        "INSERT INTO pods (ts, pod_uid, namespace, pod, node, phase, gpu_request, "
        "cpu_request_milli) VALUES (?, 'u-old', 'ml', 'old', 'g1', 'Running', 1, 1000)",
        [T0],
    )
    con.close()


def test_a_version_3_file_gains_the_gpu_columns_and_old_rows_are_whole_gpus(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.duckdb"
    version_3_file(path)
    with Store.open(path) as store:
        assert store.schema_version() == latest_version()  # 4 and every later step
        assert store.columns("pods") == PODS.schema.names
        assert store.query(
            "SELECT pod, gpu_request, gpu_milli, gpu_types, gpu_uuids FROM pods"
        ).to_pylist() == [
            {
                "pod": "old",
                "gpu_request": 1,
                "gpu_milli": None,
                "gpu_types": None,
                "gpu_uuids": None,
            }
        ]
        live = live_cluster(store)
        np.testing.assert_array_equal(live.state.gpu_free_milli, [[0, 1000]])
        # A snapshot written after the upgrade stores the share.
        store.append_batch(
            {
                "nodes": pa.Table.from_pylist(
                    [
                        {
                            "ts": T1,
                            "node": "g1",
                            "gpu_allocatable": 2,
                            "gpu_product": "A10",
                            "cpu_allocatable_milli": 8000,
                            "ready": True,
                        }
                    ]
                ),
                "pods": pa.Table.from_pylist(
                    [
                        {
                            "ts": T1,
                            "pod_uid": "u-new",
                            "namespace": "ml",
                            "pod": "new",
                            "node": "g1",
                            "phase": "Running",
                            "gpu_request": 1,
                            "gpu_milli": 300,
                            "cpu_request_milli": 1000,
                        }
                    ]
                ),
            }
        )
    with Store.open(path, read_only=True) as store:
        np.testing.assert_array_equal(live_cluster(store).state.gpu_free_milli, [[700, 1000]])
