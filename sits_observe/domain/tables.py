"""The sample tables every layer agrees on, as Arrow schemas.

Collectors build Arrow tables with exactly these columns; the store creates its DuckDB
tables from the same specs and checks every append against them; analytics read them back.
Keeping the contract here (under every layer) lets collectors and the store stay ignorant of
each other. :data:`TABLES` lists every table: those here, the topology and NUMA tables
(:mod:`.topology_tables`) and the DRA tables (:mod:`.dra_tables`), each a
:class:`~.table_spec.TableSpec`; :func:`conform` fits a table to its spec.

Conventions (see docs/schema.md):
- ``ts`` and every ``*_at`` column are UTC, microsecond precision, stored without a zone.
- Every quantity names its unit: ``_bytes``, ``_ratio`` (0-1), ``_s``, ``_bytes_per_s``,
  ``_w``, ``_c`` (Celsius), ``_hz``, ``_j``, ``_milli`` (thousandths of a CPU or GPU).
- NULL means "not measured" (or, for ``memory_max_bytes``, "unlimited"); never a sentinel.
"""

from __future__ import annotations

import pyarrow as pa

from sits_observe.domain.schema.dra_tables import DRA_ALLOCATIONS, DRA_DEVICES
from sits_observe.domain.schema.table_spec import TS, TableSpec, table_schema
from sits_observe.domain.schema.topology_tables import (
    CONTAINER_NUMA_SAMPLES,
    GPU_LINKS,
    GPU_TOPOLOGY,
    NUMA_SAMPLES,
    SYNC_DELAYS,
)
from sits_observe.errors import UnknownNameError

GPU_SAMPLES = TableSpec(
    "gpu_samples",
    table_schema(
        ("ts", TS, "sample time (scrape time when the exporter gives none), UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("gpu_uuid", pa.string(), "GPU UUID (GPU-...), the physical device"),
        ("gpu_index", pa.int16(), "device index on the node"),
        ("device", pa.string(), "device file name, e.g. nvidia0"),
        ("model_name", pa.string(), "GPU product name, e.g. NVIDIA H100 80GB HBM3"),
        ("pci_bus_id", pa.string(), "PCI bus id"),
        ("driver_version", pa.string(), "NVIDIA driver version"),
        ("mig_profile", pa.string(), "MIG GPU-instance profile (1g.5gb ...); NULL = whole GPU"),
        ("mig_instance_id", pa.int32(), "MIG GPU-instance id; NULL = whole GPU"),
        ("namespace", pa.string(), "namespace of the pod using the GPU, if attributed"),
        ("pod", pa.string(), "pod using the GPU, if attributed"),
        ("container", pa.string(), "container using the GPU, if attributed"),
        ("fb_used_bytes", pa.int64(), "framebuffer used"),
        ("fb_free_bytes", pa.int64(), "framebuffer free"),
        ("fb_reserved_bytes", pa.int64(), "framebuffer reserved by the driver"),
        ("fb_total_bytes", pa.int64(), "framebuffer total (free + used + reserved if absent)"),
        ("gpu_util_ratio", pa.float64(), "fraction of time a kernel ran (DCGM GPU_UTIL / 100)"),
        ("mem_copy_util_ratio", pa.float64(), "memory copy utilisation (MEM_COPY_UTIL / 100)"),
        ("gr_engine_active_ratio", pa.float64(), "graphics/compute engine active ratio"),
        ("sm_active_ratio", pa.float64(), "SM active ratio"),
        ("tensor_active_ratio", pa.float64(), "tensor pipe active ratio"),
        ("dram_active_ratio", pa.float64(), "device memory interface active ratio"),
        ("pcie_tx_bytes_per_s", pa.float64(), "PCIe transmit rate"),
        ("pcie_rx_bytes_per_s", pa.float64(), "PCIe receive rate"),
        ("nvlink_tx_bytes_per_s", pa.float64(), "NVLink transmit rate"),
        ("nvlink_rx_bytes_per_s", pa.float64(), "NVLink receive rate"),
        ("power_w", pa.float64(), "power draw"),
        ("gpu_temp_c", pa.float64(), "GPU temperature"),
        ("memory_temp_c", pa.float64(), "memory temperature"),
        ("sm_clock_hz", pa.float64(), "SM clock"),
        ("mem_clock_hz", pa.float64(), "memory clock"),
        ("energy_j", pa.float64(), "energy since boot"),
        ("xid_last", pa.int64(), "last XID error code (0 = none)"),
        ("source", pa.string(), "dcgm | nvml | sim"),
    ),
    "one row per GPU (or MIG instance) per scrape",
)

CONTAINER_SAMPLES = TableSpec(
    "container_samples",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("pod_uid", pa.string(), "pod UID from the cgroup path (dashes restored)"),
        ("container_id", pa.string(), "container id from the cgroup scope name"),
        ("runtime", pa.string(), "containerd | cri-o | docker | unknown"),
        ("qos_class", pa.string(), "Guaranteed | Burstable | BestEffort"),
        ("namespace", pa.string(), "pod namespace, filled from the inventory when known"),
        ("pod", pa.string(), "pod name, filled from the inventory when known"),
        ("container", pa.string(), "container name, filled from the inventory when known"),
        ("memory_current_bytes", pa.int64(), "memory.current"),
        ("memory_max_bytes", pa.int64(), "memory.max; NULL when unlimited ('max')"),
        ("memory_anon_bytes", pa.int64(), "memory.stat anon"),
        ("memory_file_bytes", pa.int64(), "memory.stat file"),
        ("memory_kernel_bytes", pa.int64(), "memory.stat kernel"),
        ("oom_events_total", pa.int64(), "memory.events oom"),
        ("oom_kill_events_total", pa.int64(), "memory.events oom_kill"),
        ("memory_pressure_some_avg10_ratio", pa.float64(), "memory PSI some avg10 / 100"),
        ("memory_pressure_full_avg10_ratio", pa.float64(), "memory PSI full avg10 / 100"),
        ("memory_pressure_some_total_s", pa.float64(), "memory PSI some total stall"),
        ("cpu_pressure_some_avg10_ratio", pa.float64(), "cpu PSI some avg10 / 100"),
        ("cpu_pressure_some_total_s", pa.float64(), "cpu PSI some total stall"),
        ("cpu_usage_s", pa.float64(), "cpu.stat usage_usec / 1e6"),
        ("cpu_throttled_s", pa.float64(), "cpu.stat throttled_usec / 1e6"),
        ("cpu_periods_total", pa.int64(), "cpu.stat nr_periods"),
        ("cpu_throttled_periods_total", pa.int64(), "cpu.stat nr_throttled"),
        ("cpu_limit_cores", pa.float64(), "cpu.max quota / period; NULL when unlimited"),
    ),
    "one row per container cgroup per read",
)

REQUESTS = TableSpec(
    "requests",
    table_schema(
        ("ts", TS, "request completion time, UTC"),
        ("model", pa.string(), "model or service name"),
        ("latency_s", pa.float64(), "end-to-end latency, exact"),
        ("ttft_s", pa.float64(), "time to first token, if recorded"),
        ("inter_token_s", pa.float64(), "mean inter-token latency, if recorded"),
        ("prompt_tokens", pa.int64(), "input tokens, if recorded"),
        ("output_tokens", pa.int64(), "output tokens, if recorded"),
        ("ok", pa.bool_(), "false for failed requests (kept out of latency quantiles)"),
        ("status", pa.string(), "status as recorded (HTTP code, 'error', ...)"),
        ("namespace", pa.string(), "namespace of the serving pod, if known"),
        ("pod", pa.string(), "serving pod, if known"),
        ("node", pa.string(), "serving node, if known"),
        ("gpu_uuid", pa.string(), "serving GPU, if known"),
        ("source", pa.string(), "file name, 'sim', 'otlp' ..."),
        ("trace_id", pa.string(), "OTLP trace id (hex) of the request span; NULL otherwise"),
        ("span_id", pa.string(), "OTLP span id (hex); a span is stored once per trace"),
    ),
    "one row per request with an exact latency",
)

SERVER_WINDOWS = TableSpec(
    "server_windows",
    table_schema(
        ("ts", TS, "end of the window, UTC"),
        ("window_s", pa.float64(), "window length"),
        ("node", pa.string(), "node of the scraped server, if known"),
        ("namespace", pa.string(), "namespace of the scraped server, if known"),
        ("pod", pa.string(), "pod of the scraped server, if known"),
        ("server", pa.string(), "serving engine (collectors/inference/engines.py)"),
        ("model", pa.string(), "model name"),
        ("completed", pa.float64(), "requests completed in the window (counter delta)"),
        ("throughput_rps", pa.float64(), "completed / window_s"),
        ("requests_running", pa.float64(), "requests running at the window end"),
        ("requests_waiting", pa.float64(), "requests waiting at the window end"),
        ("kv_cache_usage_ratio", pa.float64(), "KV-cache usage at the window end"),
        ("latency_mean_s", pa.float64(), "mean latency in the window (sum / count delta)"),
        ("latency_p50_s", pa.float64(), "ESTIMATE from histogram buckets"),
        ("latency_p95_s", pa.float64(), "ESTIMATE from histogram buckets"),
        ("latency_p99_s", pa.float64(), "ESTIMATE from histogram buckets"),
        ("latency_error_bound_s", pa.float64(), "max error of the estimates (bucket width)"),
        ("ttft_p95_s", pa.float64(), "ESTIMATE: time to first token P95"),
        ("inter_token_p95_s", pa.float64(), "ESTIMATE: inter-token latency P95"),
        ("estimate", pa.bool_(), "always true: these come from buckets or counters"),
    ),
    "per-window throughput and latency ESTIMATES from inference-server metrics",
)

GPU_PROCESSES = TableSpec(
    "gpu_processes",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("gpu_uuid", pa.string(), "GPU UUID"),
        ("mig_instance_id", pa.int32(), "MIG GPU-instance id; NULL = whole GPU"),
        ("pid", pa.int64(), "process id (host PID namespace)"),
        ("used_memory_bytes", pa.int64(), "GPU memory used by the process"),
        ("container_id", pa.string(), "container id from /proc/<pid>/cgroup, if readable"),
        ("pod_uid", pa.string(), "pod UID from /proc/<pid>/cgroup, if readable"),
        ("source", pa.string(), "nvml | sim"),
    ),
    "one row per GPU process per read: links containers to GPUs",
)

NODES = TableSpec(
    "nodes",
    table_schema(
        ("ts", TS, "inventory snapshot time, UTC"),
        ("node", pa.string(), "node name"),
        (
            "gpu_allocatable",
            pa.int32(),
            "allocatable nvidia.com/gpu plus the physical GPUs DRA publishes on the node",
        ),
        ("gpu_product", pa.string(), "nvidia.com/gpu.product label, else DRA productName"),
        (
            "gpu_memory_bytes",
            pa.int64(),
            "nvidia.com/gpu.memory label (MiB) in bytes, else DRA capacity.memory",
        ),
        ("cpu_allocatable_milli", pa.int64(), "allocatable CPU in millicores"),
        ("memory_allocatable_bytes", pa.int64(), "allocatable memory"),
        ("ready", pa.bool_(), "Ready condition"),
        ("labels_json", pa.string(), "all node labels as JSON"),
    ),
    "Kubernetes node inventory snapshots",
)

PODS = TableSpec(
    "pods",
    table_schema(
        ("ts", TS, "inventory snapshot time, UTC"),
        ("pod_uid", pa.string(), "pod UID"),
        ("namespace", pa.string(), "namespace"),
        ("pod", pa.string(), "pod name"),
        ("node", pa.string(), "node the pod is bound to"),
        ("phase", pa.string(), "Pending | Running | Succeeded | Failed | Unknown"),
        ("qos_class", pa.string(), "Guaranteed | Burstable | BestEffort"),
        ("owner_kind", pa.string(), "controller owner kind"),
        ("owner_name", pa.string(), "controller owner name"),
        ("workload", pa.string(), "top-level workload (ReplicaSet hash stripped)"),
        (
            "gpu_request",
            pa.int32(),
            "nvidia.com/gpu requested (sum over containers) plus GPU devices of its DRA claims",
        ),
        ("cpu_request_milli", pa.int64(), "CPU requested"),
        ("memory_request_bytes", pa.int64(), "memory requested"),
        ("priority_class", pa.string(), "priorityClassName"),
        ("containers_json", pa.string(), "[{name, container_id}] as JSON"),
        ("created_at", TS, "metadata.creationTimestamp"),
        ("scheduled_at", TS, "PodScheduled condition time"),
        ("initialized_at", TS, "Initialized condition time"),
        ("containers_ready_at", TS, "ContainersReady condition time"),
        ("ready_at", TS, "Ready condition time"),
        ("gpu_milli", pa.int32(), "share of each GPU, milli (1000 = whole); NULL = no GPU"),
        ("gpu_types", pa.string(), "allowed GPU products, sorted, joined by a bar; NULL = any"),
        ("gpu_uuids", pa.string(), "UUIDs of the assigned GPUs, comma-joined; NULL = unknown"),
        (
            "gpu_stack_json",
            pa.string(),
            "pod-spec facts of its GPU stack (GPU resources, vLLM flag, KAI annotations) as a "
            "pruned pod JSON; NULL = none",
        ),
    ),
    "Kubernetes pod inventory snapshots",
)

COLLECTOR_DROPS = TableSpec(
    "collector_drops",
    table_schema(
        ("ts", TS, "when the drop happened, UTC"),
        ("node", pa.string(), "node of the collector"),
        ("collector", pa.string(), "collector name"),
        ("reason", pa.string(), "why samples were dropped"),
        ("count", pa.int64(), "how many"),
    ),
    "samples collectors dropped, by reason",
)

DECISIONS = TableSpec(
    "decisions",
    table_schema(
        ("ts", TS, "when the decision's outcome was known, UTC"),
        ("replica", pa.string(), "controller replica that decided (its Lease identity)"),
        ("mode", pa.string(), "dry-run, annotate or act"),
        ("dry_run", pa.bool_(), "true when nothing was written to the cluster"),
        ("kind", pa.string(), "kind of the object concerned: Node, Pod, ResourceQuota ..."),
        ("namespace", pa.string(), "its namespace; NULL for cluster-scoped objects"),
        ("name", pa.string(), "its name"),
        ("action", pa.string(), "memory-class, fragmentation ... (docs/controller.md)"),
        ("current", pa.string(), "value in effect before (NULL = unknown or unset)"),
        ("proposed", pa.string(), "value proposed after the safety rules"),
        ("reason", pa.string(), "why, in words, with the thresholds"),
        ("evidence", pa.string(), "the signals behind it, as a JSON object"),
        ("outcome", pa.string(), "recommended, applied, skipped:<why> or failed:<why>"),
        ("detail", pa.string(), "error text of a failure or skip, if any"),
        ("attempts", pa.int32(), "API requests tried for the object write (0 = none)"),
    ),
    "one row per controller decision and its outcome",
)

# -- GPU attribution from the kubelet (schema version 10, docs/collectors/podresources.md) --

GPU_ATTRIBUTION = TableSpec(
    "gpu_attribution",
    table_schema(
        ("ts", TS, "sample time of the GPU (the read time for an unresolved holder), UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("gpu_uuid", pa.string(), "GPU UUID of the sample; NULL = the holder names no sample"),
        ("mig_profile", pa.string(), "MIG profile of the sample; NULL = whole GPU"),
        ("mig_instance_id", pa.int32(), "MIG GPU-instance id of the sample; NULL = whole GPU"),
        ("bucket", pa.string(), "pod (one pod holds it) | unattributed"),
        ("reason", pa.string(), "why unattributed: shared | ambiguous | no-holder | unresolved"),
        ("holders", pa.int32(), "containers holding the device (0 = none)"),
        ("namespace", pa.string(), "holder's namespace; NULL = no holder"),
        ("pod", pa.string(), "holder's pod"),
        ("container", pa.string(), "holder's container"),
        ("source", pa.string(), "device-plugin | dra: how the kubelet gave the device"),
        ("resource", pa.string(), "device-plugin resource name, or the DRA driver"),
        ("device", pa.string(), "device-plugin device id, or the DRA pool/device"),
        ("claim", pa.string(), "DRA claim as namespace/name; NULL = device plugin"),
        ("share_id", pa.string(), "DRA share of a device with consumable capacity"),
        ("fb_used_bytes", pa.int64(), "framebuffer used by the sampled GPU"),
        ("gpu_util_ratio", pa.float64(), "utilisation of the sampled GPU"),
    ),
    "per GPU sample (and per held device without one): the pods the kubelet says hold it",
)

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        GPU_SAMPLES,
        CONTAINER_SAMPLES,
        GPU_PROCESSES,
        REQUESTS,
        SERVER_WINDOWS,
        NODES,
        PODS,
        COLLECTOR_DROPS,
        DECISIONS,
        NUMA_SAMPLES,
        CONTAINER_NUMA_SAMPLES,
        GPU_TOPOLOGY,
        GPU_LINKS,
        SYNC_DELAYS,
        DRA_DEVICES,
        DRA_ALLOCATIONS,
        GPU_ATTRIBUTION,
    )
}


def table_names() -> list[str]:
    """Names of every sample table, in definition order."""
    return list(TABLES)


def find_table(name: str) -> TableSpec:
    """The spec of ``name``; raises :class:`UnknownNameError` listing the valid names on a miss."""
    try:
        return TABLES[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown table {name!r}; valid tables: {', '.join(TABLES)}"
        ) from None


def empty_table(name: str) -> pa.Table:
    """A zero-row Arrow table with ``name``'s schema."""
    return find_table(name).schema.empty_table()


def conform(name: str, data: pa.Table) -> pa.Table:
    """Return ``data`` with exactly ``name``'s columns, in order, cast to its types.

    Missing columns become NULL; unknown columns raise ``ValueError`` naming them, so a typo
    is never silently dropped.
    """
    schema = find_table(name).schema
    unknown = [c for c in data.column_names if schema.get_field_index(c) < 0]
    if unknown:
        raise ValueError(
            f"table {name!r} has no column(s) {', '.join(unknown)}; "
            f"valid columns: {', '.join(schema.names)}"
        )
    columns = []
    for field in schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
