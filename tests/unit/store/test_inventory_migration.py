"""Schema version 6: a version-5 file's pod and node snapshots become versions, and every read
of ``pods`` / ``nodes`` keeps its answer; snapshots stored after the upgrade continue them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from sits_observe.domain.tables import NODES
from sits_observe.store import Store
from sits_observe.store.migrations import migrations
from tests.unit.store.test_inventory import READS, STEP, T0, history, reference


def version_5_file(path: Path, pods: list[pa.Table], nodes: pa.Table) -> None:
    """What a build of schema version 5 left: full snapshots in plain tables."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    for migration in migrations()[:5]:
        con.execute(migration.sql)
        con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)", [migration.version])
    for t in pods:
        con.register("_t", t)
        con.execute("INSERT INTO pods BY NAME SELECT * FROM _t")
    con.register("_n", nodes)
    con.execute("INSERT INTO nodes BY NAME SELECT * FROM _n")
    # A row without a time: no time-bounded read ever saw it; it is not carried over.
    con.execute("INSERT INTO pods (ts, pod) VALUES (NULL, 'no-time')")
    con.close()


def node_rows(snapshots: int) -> pa.Table:
    rows = [
        {
            "ts": T0 + i * STEP,
            "node": f"n{k}",
            "gpu_allocatable": 8,
            "ready": not (k == 1 and i > 9),
        }
        for i in range(snapshots)
        for k in range(3)
    ]
    return pa.Table.from_pylist(rows, schema=NODES.schema)


def test_a_version_5_history_reads_the_same_after_the_upgrade(tmp_path: Path) -> None:
    # 160 snapshots at 30 s: 80 minutes, so the copied versions span two hourly epochs.
    pods = history(3, 170)
    old, new = pods[:160], pods[160:]
    path = tmp_path / "v5.duckdb"
    nodes = node_rows(160)
    version_5_file(path, old, nodes)
    ref = reference(old)
    ref.register("_n", nodes)
    ref.execute("CREATE TABLE nodes AS SELECT * FROM _n")
    with Store.open(path) as store:
        assert store.schema_version() >= 6
        assert store.columns("pods") == ref.sql("SELECT * FROM pods LIMIT 0").columns
        for sql in READS:
            assert store.query(sql).to_pylist() == ref.sql(sql).to_arrow_table().to_pylist()
        for sql in (
            "SELECT * FROM nodes ORDER BY ALL",
            "SELECT node, ready FROM nodes WHERE ts = (SELECT max(ts) FROM nodes) ORDER BY 1",
        ):
            assert store.query(sql).to_pylist() == ref.sql(sql).to_arrow_table().to_pylist()
        assert store.scalar("SELECT count(*) FROM pods WHERE pod = 'no-time'") == 0
        epochs = store.scalar(
            "SELECT count(DISTINCT epoch_at) FROM inventory_snapshots WHERE kind = 'pods'"
        )
        assert epochs == 2
        stored = store.scalar("SELECT count(*) FROM pod_versions")
        assert stored < store.count("pods") / 5
        for t in new:
            store.append("pods", t)
            ref.register("_t", t)
            ref.execute("INSERT INTO pods SELECT * FROM _t")
        for sql in READS:
            assert store.query(sql).to_pylist() == ref.sql(sql).to_arrow_table().to_pylist()
