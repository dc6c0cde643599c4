"""What a user sees of DRA fragmentation: the ``fragmentation`` report's DRA tables (and
their JSON) and the exporter's ``sits_dra_*`` families, over the driver's shapes served by
the emulator and stored by the inventory loop (the cluster of test_dra_fragmentation.py:
three A100s under dynamic MIG, two H100s under consumable shares).

mig-a's claims (3g.20gb at 0, 2g.10gb at 4, 1g.5gb at 6, in claim order) are what first fit
gives in the driver's order, and strand slice 7; best fit (3g.20gb at 4, then the others on
slices 0-3) strands none: first fit wastes one slice there. mig-c (3g.20gb at 0, then
1g.5gb at 4) likewise; mig-b's lone 4g.20gb wastes nothing.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s_client

from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.reports.fragmentation import FragmentationQuery, build
from sits_observe.reports.fragmentation_dra import dra_tables
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.registry import REGISTRY
from sits_observe.surfaces.service.inventory import InventoryLoop
from tests.integration.kube import bodies
from tests.integration.kube.dra_bodies import GIB
from tests.integration.kube.test_dra_fragmentation import NOW, _create

pytestmark = pytest.mark.k8s


def _stored(api: k8s_client.ApiClient, store: Store) -> None:
    _create(api)
    # A CPU pod, so the report's FGD part has a pods snapshot to read.
    k8s_client.CoreV1Api(api).create_namespaced_pod(
        "work", bodies.pod("cpu-pod", node_name="mig-a")
    )
    InventoryLoop(KubeInventoryCollector(api), store, interval_s=3600, clock=lambda: NOW).run_once()


def _exposition(store: Store, signal: str, now: datetime) -> str:
    """What ``/metrics`` shows of one derived signal over ``store`` at ``now``."""
    signals = DerivedSignals(
        store,
        ExporterSettings(),
        clock=lambda: now.replace(tzinfo=None),
        monotonic=lambda: 0.0,
        spawn=lambda job: job(),
        signals=[s for s in REGISTRY if s.name == signal],
    )
    return signals.exposition().decode()


def test_the_report_has_a_dra_table_and_one_row_per_node(api: k8s_client.ApiClient) -> None:
    with Store.open(":memory:") as store:
        _stored(api, store)
        naive = NOW.replace(tzinfo=None)
        window = Window(naive - timedelta(hours=1), naive + timedelta(seconds=1), "given")
        report = build(store, window, FragmentationQuery())
        tables = {t.name: t for t in report.tables}
        (cluster,) = tables["dra"].rows.to_pylist()
        assert cluster["partitionable_gpus"] == 3
        assert (cluster["slices_free"], cluster["slices_stranded"]) == (8, 2)
        assert cluster["first_fit_wasted_slices"] == 2
        assert (cluster["shared_devices"], cluster["shared_stranded_bytes"]) == (2, 2 * GIB)
        nodes = {r["node"]: r for r in tables["dra_nodes"].rows.to_pylist()}
        assert set(nodes) == {"mig-a", "mig-b", "mig-c", "share-node"}
        mig_a = nodes["mig-a"]
        assert (mig_a["slices_stranded"], mig_a["first_fit_stranded_slices"]) == (1, 1)
        assert (mig_a["best_fit_stranded_slices"], mig_a["first_fit_wasted_slices"]) == (0, 1)
        assert nodes["mig-b"]["first_fit_wasted_slices"] == 0
        # Most first-fit waste first.
        assert [r["node"] for r in tables["dra_nodes"].rows.to_pylist()][:2] == ["mig-a", "mig-c"]
        assert nodes["share-node"]["shared_free_bytes"] == 74 * GIB
        doc = json.loads(json.dumps(report.document(), default=str))
        assert doc["tables"]["dra"]["rows"][0]["slices_stranded"] == 2
        # A window before the snapshot has no DRA table.
        early = Window(None, naive - timedelta(hours=2), "given")
        assert dra_tables(store, early) == ()


def test_the_exporter_has_the_dra_families_per_node(api: k8s_client.ApiClient) -> None:
    with Store.open(":memory:") as store:
        _stored(api, store)
        text = _exposition(store, "dra", NOW)
        assert 'sits_dra_memory_slices_stranded{Hostname="mig-a"} 1.0' in text
        assert 'sits_dra_memory_slices_free{Hostname="mig-b"} 4.0' in text
        assert 'sits_dra_first_fit_wasted_slices{Hostname="mig-c"} 1.0' in text
        assert 'sits_dra_shared_stranded_bytes{Hostname="share-node"} 2.147483648e+09' in text


def test_no_dra_snapshot_exports_nothing() -> None:
    with Store.open(":memory:") as store:
        text = _exposition(store, "dra", datetime(2026, 1, 1, tzinfo=UTC))
        assert "sits_dra_memory_slices_stranded{" not in text


def test_the_fgd_families_count_dra_gpus_like_any_other(api: k8s_client.ApiClient) -> None:
    """The nodes' allocatable lists no GPU (``gpus=None``): only the ResourceSlices give them
    GPUs, so a node series here is a DRA GPU counted like a device plugin's. Every one of
    those GPUs is partly held (a MIG partition or a memory share), so no whole-GPU task fits
    on it: F_n is each node's GPU count (share-node's two GPUs, one A100 on each mig node)."""
    with Store.open(":memory:") as store:
        _stored(api, store)
        text = _exposition(store, "fragmentation", NOW)
        per_node = dict(
            re.findall(r'sits_fgd_node_fragmentation_gpus\{Hostname="([^"]+)"\} (\S+)', text)
        )
        assert {n: float(v) for n, v in per_node.items()} == {
            "share-node": 2.0,
            "mig-a": 1.0,
            "mig-b": 1.0,
            "mig-c": 1.0,
        }
        assert "sits_fgd_fragmentation_ratio 1.0" in text
