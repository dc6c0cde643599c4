"""The topology and NUMA tables (schema version 7, docs/collectors/topology.md).

The kernel's NUMA allocation counters per NUMA node and where each container's memory lies,
each GPU's NUMA node, nearby CPUs and NVLink state, the distance class of every GPU pair, and
collective sync delays read from a series the user names. Conventions:
:mod:`sits_observe.domain.tables`, which lists every table.
"""

from __future__ import annotations

import pyarrow as pa

from sits_observe.domain.schema.table_spec import TS, TableSpec, table_schema

NUMA_SAMPLES = TableSpec(
    "numa_samples",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("numa_node", pa.int16(), "NUMA node number of the machine"),
        ("numa_hit_pages_total", pa.int64(), "numastat numa_hit: allocated where intended"),
        ("numa_miss_pages_total", pa.int64(), "numastat numa_miss: got here, meant elsewhere"),
        ("numa_foreign_pages_total", pa.int64(), "numa_foreign: meant here, got elsewhere"),
        ("interleave_hit_pages_total", pa.int64(), "numastat interleave_hit"),
        ("local_node_pages_total", pa.int64(), "numastat local_node"),
        ("other_node_pages_total", pa.int64(), "numastat other_node"),
    ),
    "one row per NUMA node per read: the kernel's allocation counters (pages since boot)",
)

CONTAINER_NUMA_SAMPLES = TableSpec(
    "container_numa_samples",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("pod_uid", pa.string(), "pod UID from the cgroup path"),
        ("container_id", pa.string(), "container id from the cgroup scope name"),
        ("numa_node", pa.int16(), "NUMA node number of the machine"),
        ("anon_bytes", pa.int64(), "memory.numa_stat anon on this NUMA node"),
        ("file_bytes", pa.int64(), "memory.numa_stat file on this NUMA node"),
    ),
    "one row per container cgroup and NUMA node per read: where its memory lies",
)

GPU_TOPOLOGY = TableSpec(
    "gpu_topology",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("gpu_uuid", pa.string(), "GPU UUID"),
        ("gpu_index", pa.int16(), "device index on the node"),
        ("pci_bus_id", pa.string(), "PCI bus id as sysfs names it (0000:18:00.0)"),
        ("numa_node", pa.int16(), "NUMA node of the GPU; NULL = the platform reports none"),
        ("numa_source", pa.string(), "nvml | sysfs: where numa_node was read"),
        ("cpu_affinity", pa.string(), "CPUs close to the GPU, as a cpulist (0-23,48-71)"),
        ("nvlink_links_active", pa.int16(), "NVLink links up; NULL = NVLink not readable"),
        ("nvlink_links_total", pa.int16(), "NVLink links the GPU has"),
    ),
    "one row per GPU per topology read",
)

GPU_LINKS = TableSpec(
    "gpu_links",
    table_schema(
        ("ts", TS, "read time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("gpu_uuid", pa.string(), "one GPU of the pair"),
        ("peer_gpu_uuid", pa.string(), "the other GPU of the pair"),
        ("common_ancestor", pa.string(), "NVML topology level: board, pcie-switch ... system"),
        ("nvlink", pa.bool_(), "GPU peer-to-peer over NVLink is available"),
        ("path", pa.string(), "nvlink | pcie-switch | numa-node | cross-numa: the distance class"),
    ),
    "one row per ordered GPU pair per topology read",
)

SYNC_DELAYS = TableSpec(
    "sync_delays",
    table_schema(
        ("ts", TS, "sample time, UTC"),
        ("node", pa.string(), "Kubernetes node name"),
        ("pod", pa.string(), "pod label of the series, if any"),
        ("metric", pa.string(), "the exposition series it was read from"),
        ("delay_s", pa.float64(), "one collective synchronisation delay"),
    ),
    "collective sync delays read from a series the user names",
)
