-- Schema version 7: GPU topology, NUMA counters and placement, collective sync delays
-- (docs/schema.md, docs/collectors/topology.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

-- numastat counters per NUMA node (pages since boot); the miss ratio is computed from two reads.
CREATE TABLE numa_samples (
    ts TIMESTAMP,
    node VARCHAR,
    numa_node SMALLINT,
    numa_hit_pages_total BIGINT,
    numa_miss_pages_total BIGINT,
    numa_foreign_pages_total BIGINT,
    interleave_hit_pages_total BIGINT,
    local_node_pages_total BIGINT,
    other_node_pages_total BIGINT
);

-- cgroup v2 memory.numa_stat per container and NUMA node.
CREATE TABLE container_numa_samples (
    ts TIMESTAMP,
    node VARCHAR,
    pod_uid VARCHAR,
    container_id VARCHAR,
    numa_node SMALLINT,
    anon_bytes BIGINT,
    file_bytes BIGINT
);

-- NVML topology per GPU and per ordered GPU pair.
CREATE TABLE gpu_topology (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR,
    gpu_index SMALLINT,
    pci_bus_id VARCHAR,
    numa_node SMALLINT,
    numa_source VARCHAR,
    cpu_affinity VARCHAR,
    nvlink_links_active SMALLINT,
    nvlink_links_total SMALLINT
);

CREATE TABLE gpu_links (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR,
    peer_gpu_uuid VARCHAR,
    common_ancestor VARCHAR,
    nvlink BOOLEAN,
    path VARCHAR
);

-- Collective synchronisation delays from a series the user names.
CREATE TABLE sync_delays (
    ts TIMESTAMP,
    node VARCHAR,
    pod VARCHAR,
    metric VARCHAR,
    delay_s DOUBLE
);
