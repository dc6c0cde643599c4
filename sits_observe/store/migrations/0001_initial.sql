-- Schema version 1: the sample tables (see docs/schema.md), batch ledger and rollups.
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

CREATE TABLE gpu_samples (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR,
    gpu_index SMALLINT,
    device VARCHAR,
    model_name VARCHAR,
    pci_bus_id VARCHAR,
    driver_version VARCHAR,
    mig_profile VARCHAR,
    mig_instance_id INTEGER,
    namespace VARCHAR,
    pod VARCHAR,
    container VARCHAR,
    fb_used_bytes BIGINT,
    fb_free_bytes BIGINT,
    fb_reserved_bytes BIGINT,
    fb_total_bytes BIGINT,
    gpu_util_ratio DOUBLE,
    mem_copy_util_ratio DOUBLE,
    gr_engine_active_ratio DOUBLE,
    sm_active_ratio DOUBLE,
    tensor_active_ratio DOUBLE,
    dram_active_ratio DOUBLE,
    pcie_tx_bytes_per_s DOUBLE,
    pcie_rx_bytes_per_s DOUBLE,
    nvlink_tx_bytes_per_s DOUBLE,
    nvlink_rx_bytes_per_s DOUBLE,
    power_w DOUBLE,
    gpu_temp_c DOUBLE,
    memory_temp_c DOUBLE,
    sm_clock_hz DOUBLE,
    mem_clock_hz DOUBLE,
    energy_j DOUBLE,
    xid_last BIGINT,
    source VARCHAR
);

CREATE TABLE container_samples (
    ts TIMESTAMP,
    node VARCHAR,
    pod_uid VARCHAR,
    container_id VARCHAR,
    runtime VARCHAR,
    qos_class VARCHAR,
    namespace VARCHAR,
    pod VARCHAR,
    container VARCHAR,
    memory_current_bytes BIGINT,
    memory_max_bytes BIGINT,
    memory_anon_bytes BIGINT,
    memory_file_bytes BIGINT,
    memory_kernel_bytes BIGINT,
    oom_events_total BIGINT,
    oom_kill_events_total BIGINT,
    memory_pressure_some_avg10_ratio DOUBLE,
    memory_pressure_full_avg10_ratio DOUBLE,
    memory_pressure_some_total_s DOUBLE,
    cpu_pressure_some_avg10_ratio DOUBLE,
    cpu_pressure_some_total_s DOUBLE,
    cpu_usage_s DOUBLE,
    cpu_throttled_s DOUBLE,
    cpu_periods_total BIGINT,
    cpu_throttled_periods_total BIGINT,
    cpu_limit_cores DOUBLE
);

CREATE TABLE gpu_processes (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR,
    mig_instance_id INTEGER,
    pid BIGINT,
    used_memory_bytes BIGINT,
    container_id VARCHAR,
    pod_uid VARCHAR,
    source VARCHAR
);

CREATE TABLE requests (
    ts TIMESTAMP,
    model VARCHAR,
    latency_s DOUBLE,
    ttft_s DOUBLE,
    inter_token_s DOUBLE,
    prompt_tokens BIGINT,
    output_tokens BIGINT,
    ok BOOLEAN,
    status VARCHAR,
    namespace VARCHAR,
    pod VARCHAR,
    node VARCHAR,
    gpu_uuid VARCHAR,
    source VARCHAR
);

CREATE TABLE server_windows (
    ts TIMESTAMP,
    window_s DOUBLE,
    node VARCHAR,
    namespace VARCHAR,
    pod VARCHAR,
    server VARCHAR,
    model VARCHAR,
    completed DOUBLE,
    throughput_rps DOUBLE,
    requests_running DOUBLE,
    requests_waiting DOUBLE,
    kv_cache_usage_ratio DOUBLE,
    latency_mean_s DOUBLE,
    latency_p50_s DOUBLE,
    latency_p95_s DOUBLE,
    latency_p99_s DOUBLE,
    latency_error_bound_s DOUBLE,
    ttft_p95_s DOUBLE,
    inter_token_p95_s DOUBLE,
    estimate BOOLEAN
);

CREATE TABLE nodes (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_allocatable INTEGER,
    gpu_product VARCHAR,
    gpu_memory_bytes BIGINT,
    cpu_allocatable_milli BIGINT,
    memory_allocatable_bytes BIGINT,
    ready BOOLEAN,
    labels_json VARCHAR
);

CREATE TABLE pods (
    ts TIMESTAMP,
    pod_uid VARCHAR,
    namespace VARCHAR,
    pod VARCHAR,
    node VARCHAR,
    phase VARCHAR,
    qos_class VARCHAR,
    owner_kind VARCHAR,
    owner_name VARCHAR,
    workload VARCHAR,
    gpu_request INTEGER,
    cpu_request_milli BIGINT,
    memory_request_bytes BIGINT,
    priority_class VARCHAR,
    containers_json VARCHAR,
    created_at TIMESTAMP,
    scheduled_at TIMESTAMP,
    initialized_at TIMESTAMP,
    containers_ready_at TIMESTAMP,
    ready_at TIMESTAMP
);

CREATE TABLE collector_drops (
    ts TIMESTAMP,
    node VARCHAR,
    collector VARCHAR,
    reason VARCHAR,
    count BIGINT
);

-- Agents ship batches with a unique id; a replayed batch is acknowledged, not stored twice.
CREATE TABLE ingest_batches (
    batch_id VARCHAR PRIMARY KEY,
    received_at TIMESTAMP NOT NULL,
    node VARCHAR,
    rows BIGINT NOT NULL
);

-- One-minute rollups keep sums, counts and maxima so that late rows merge exactly.
CREATE TABLE gpu_samples_1m (
    minute TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    mig_instance_id INTEGER NOT NULL,  -- -1 for the whole GPU
    samples BIGINT NOT NULL,
    fb_used_bytes_sum HUGEINT,
    fb_used_bytes_max BIGINT,
    fb_total_bytes_max BIGINT,
    gpu_util_ratio_sum DOUBLE,
    gpu_util_ratio_max DOUBLE,
    power_w_sum DOUBLE,
    power_w_max DOUBLE,
    PRIMARY KEY (minute, node, gpu_uuid, mig_instance_id)
);

CREATE TABLE container_samples_1m (
    minute TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    pod_uid VARCHAR NOT NULL,
    container_id VARCHAR NOT NULL,
    samples BIGINT NOT NULL,
    memory_current_bytes_sum HUGEINT,
    memory_current_bytes_max BIGINT,
    memory_max_bytes_max BIGINT,
    cpu_usage_s_max DOUBLE,
    PRIMARY KEY (minute, node, pod_uid, container_id)
);

-- No ART indexes on ts: DuckDB's zone maps prune time ranges and indexes slow appends.
