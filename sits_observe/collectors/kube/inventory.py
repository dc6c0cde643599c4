"""Kubernetes inventory: nodes, pods and DRA devices from the API server into the store.

Nodes and pods become the ``nodes`` / ``pods`` tables; ResourceSlices and ResourceClaims
(``resource.k8s.io/v1``) the ``dra_devices`` / ``dra_allocations`` tables, and their GPUs are
folded into the node and pod rows (:mod:`sits_observe.collectors.kube.dra.rows`), so a GPU
that only DRA publishes counts like any other.

The official ``kubernetes`` client carries the transport (kubeconfig, in-cluster token, TLS)
behind the shared JSON adapter (:mod:`sits_observe.collectors.kube.api`); each raw object is
parsed here, so one malformed object is dropped and counted instead of failing the whole page
the way the client's model deserialiser would, and a 10k-pod list does not build 10k model
trees.

Quantities follow the API's grammar (``resource.Quantity``: ``7910m``, ``8``, ``32Gi``,
``1000000Ki``, ``1e9``) and are rounded up like ``Quantity.Value()`` / ``MilliValue()``. Node
rows are built here; pod rows (requests, QoS, workload, GPU share and devices) in
:mod:`sits_observe.collectors.kube.pods`; the tolerant JSON accessors both use in
:mod:`sits_observe.collectors.kube.json_shapes`.

Errors: an unreachable or refusing API (401, 403, 5xx, connection refused, non-JSON) raises
:class:`CollectorError`; a malformed object is dropped (``node_malformed`` / ``pod_malformed``);
an unreadable field becomes NULL and is counted (``*_bad_quantity``, ``*_bad_timestamp``,
``node_bad_label``; ``pod_bad_gpu_request`` keeps the default instead).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.collectors.kube.dra.claims import pod_claims, read_claims
from sits_observe.collectors.kube.dra.rows import (
    allocation_rows,
    device_rows,
    merge_node,
    merge_pod,
)
from sits_observe.collectors.kube.dra.shapes import (
    DRA_API,
    NVIDIA_DEVICE_CLASSES,
    NVIDIA_GPU_DRIVER,
)
from sits_observe.collectors.kube.dra.slices import DraInventory, node_gpus, read_slices
from sits_observe.collectors.kube.gpu import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sits_observe.collectors.kube.json_shapes import Malformed, NodeJson, identity, obj, seq, text
from sits_observe.collectors.kube.pods import pod_row
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.quantity import quantity_milli, quantity_value
from sits_observe.domain.schema.dra_tables import DRA_ALLOCATIONS, DRA_DEVICES
from sits_observe.domain.tables import NODES, PODS
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, KubeApiError, ParseError

if TYPE_CHECKING:
    from kubernetes import client as k8s_client

#: GPU feature discovery label, MiB (github.com/NVIDIA/k8s-device-plugin, gpu-feature-discovery).
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
MIB = 1024 * 1024

# -- settings and collector ----------------------------------------------------------------


class KubeInventorySettings(BaseModel):
    """How the inventory collector reads the API server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    page_size: int = Field(
        500, ge=1, le=10_000, description="objects per list page (the API's limit parameter)"
    )
    request_timeout_s: float = Field(
        30.0, gt=0, le=600, description="read timeout of one list request, seconds"
    )
    dra: bool = Field(
        True,
        description="read ResourceSlices and ResourceClaims (resource.k8s.io/v1); a cluster "
        "that does not serve them is read without",
    )
    dra_drivers: tuple[str, ...] = Field(
        (NVIDIA_GPU_DRIVER,), description="DRA drivers whose devices are GPUs"
    )
    dra_gpu_classes: tuple[str, ...] = Field(
        NVIDIA_DEVICE_CLASSES,
        description="DeviceClasses whose requests ask for GPUs (claims not yet allocated)",
    )


class KubeInventoryCollector:
    """Snapshot the cluster's nodes and pods (``name = "kube"``).

    ``api`` is an official-client ``ApiClient`` (kubeconfig, in-cluster or test emulator);
    ``now_fn`` is the clock :meth:`snapshot` stamps with (``collect(now)`` uses ``now``).
    """

    name = "kube"

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        now_fn: Callable[[], datetime] | None = None,
        settings: KubeInventorySettings | None = None,
    ) -> None:
        self.settings = settings or KubeInventorySettings()
        self._kube = KubeJson(api, timeout_s=self.settings.request_timeout_s)
        self._now_fn = now_fn or (lambda: datetime.now(UTC))

    def snapshot(self) -> CollectResult:
        """``collect`` stamped with the injected clock."""
        return self.collect(self._now_fn())

    def collect(self, now: datetime) -> CollectResult:
        """List every node and pod once; raises :class:`CollectorError` when the API fails."""
        ts = utc_naive(now)
        dropped: Counter[str] = Counter()
        nodes = self._list_all("nodes")
        pods = self._list_all("pods")
        node_rows = _rows(nodes, node_row, "node_malformed", dropped)
        pod_rows = _rows(pods, pod_row, "pod_malformed", dropped)
        dra = self._dra(pods, node_rows, pod_rows, ts, dropped)
        for row in node_rows:
            row["ts"] = ts
        for row in pod_rows:
            row["ts"] = ts
        return CollectResult(
            tables={
                "nodes": pa.Table.from_pylist(node_rows, schema=NODES.schema),
                "pods": pa.Table.from_pylist(pod_rows, schema=PODS.schema),
                **dra,
            },
            dropped=dropped,
        )

    def _dra(
        self,
        pods: list[Any],
        node_rows: list[dict[str, Any]],
        pod_rows: list[dict[str, Any]],
        ts: datetime,
        dropped: Counter[str],
    ) -> dict[str, pa.Table]:
        """Read DRA, fold its GPUs into the node and pod rows, and its own tables' rows.

        A cluster that does not serve ``resource.k8s.io/v1`` (404) has no DRA: empty tables.
        One that forbids it (403: the RBAC predates DRA) is counted (``dra_forbidden``) and
        read without, so the nodes and pods still arrive.
        """
        if not self.settings.dra:
            return {}
        s = self.settings
        try:
            slices = self._kube.list_all(f"{DRA_API}/resourceslices", page_size=s.page_size)
            claims = self._kube.list_all(f"{DRA_API}/resourceclaims", page_size=s.page_size)
        except KubeApiError as exc:
            if exc.status == 404:
                slices, claims = [], []
            elif exc.status == 403:
                dropped["dra_forbidden"] += 1
                return {}
            else:
                raise CollectorError(self._api_error("resourceslices/resourceclaims", exc)) from exc
        inventory: DraInventory = read_slices(slices, s.dra_drivers, dropped)
        read = read_claims(
            claims,
            pod_claims(pods),
            inventory.by_key(),
            drivers=s.dra_drivers,
            gpu_classes=s.dra_gpu_classes,
            dropped=dropped,
        )
        per_node = node_gpus(inventory)
        for row in node_rows:
            merge_node(row, per_node.get(row["node"]))
        for row in pod_rows:
            merge_pod(row, read.pods.get(row["pod_uid"]))
        return {
            "dra_devices": pa.Table.from_pylist(
                device_rows(inventory, ts), schema=DRA_DEVICES.schema
            ),
            "dra_allocations": pa.Table.from_pylist(
                allocation_rows(read.allocations, ts), schema=DRA_ALLOCATIONS.schema
            ),
        }

    # -- paginated reads ---------------------------------------------------------------

    def _list_all(self, what: str) -> list[Any]:
        """Every item of one list, page by page (restarted once on 410 Expired)."""
        try:
            return self._kube.list_all(f"/api/v1/{what}", page_size=self.settings.page_size)
        except KubeApiError as exc:
            raise CollectorError(self._api_error(what, exc)) from exc

    def _api_error(self, what: str, exc: KubeApiError) -> str:
        host = self._kube.host
        if not exc.status:  # unreachable, refused, or the client's own failures (TLS)
            return f"cannot reach the Kubernetes API at {host} while listing {what}: {exc}"
        if exc.status == 401:
            return (
                f"the Kubernetes API at {host} rejected the credentials listing {what} "
                f"({exc}); check the kubeconfig user or service-account token"
            )
        if exc.status == 403:
            return (
                f"the Kubernetes API at {host} forbids listing {what} ({exc}); "
                "grant get/list/watch on nodes and pods, and on resourceslices and "
                "resourceclaims of resource.k8s.io (see collectors/rbac.yaml)"
            )
        return f"the Kubernetes API at {host} answered {exc.status} listing {what} ({exc})"


def _rows(
    items: Iterable[Any],
    parse: Callable[[Any, Counter[str]], dict[str, Any]],
    malformed: str,
    dropped: Counter[str],
) -> list[dict[str, Any]]:
    rows = []
    for item in items:
        try:
            rows.append(parse(item, dropped))
        except Malformed:
            dropped[malformed] += 1
    return rows


# -- nodes ---------------------------------------------------------------------------------


def node_row(item: Any, dropped: Counter[str]) -> dict[str, Any]:
    """One ``nodes`` row (without ``ts``) from a Node's JSON; raises ``Malformed``."""
    node = cast(NodeJson, obj(item, "node", required=True))
    meta = obj(node.get("metadata"), "metadata", required=True)
    status = obj(node.get("status"), "status")
    labels = obj(meta.get("labels"), "metadata.labels")
    allocatable = obj(status.get("allocatable"), "status.allocatable")

    def quantity(key: str, convert: Callable[[str], int]) -> int | None:
        if key not in allocatable:
            return None
        try:
            return convert(allocatable[key])
        except ParseError:
            dropped["node_bad_quantity"] += 1
            return None

    gpu_memory_bytes = None
    if GPU_MEMORY_LABEL in labels:
        try:
            gpu_memory_bytes = quantity_value(labels[GPU_MEMORY_LABEL]) * MIB
        except ParseError:
            dropped["node_bad_label"] += 1
    ready = None
    for raw in seq(status.get("conditions"), "status.conditions"):
        cond = obj(raw, "condition")
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    gpus = quantity(GPU_RESOURCE, quantity_value)
    return {
        "node": identity(meta, "name"),
        "gpu_allocatable": 0 if gpus is None and GPU_RESOURCE not in allocatable else gpus,
        "gpu_product": text(labels.get(GPU_PRODUCT_LABEL)),
        "gpu_memory_bytes": gpu_memory_bytes,
        "cpu_allocatable_milli": quantity("cpu", quantity_milli),
        "memory_allocatable_bytes": quantity("memory", quantity_value),
        "ready": ready,
        "labels_json": json.dumps(labels, sort_keys=True),
    }
