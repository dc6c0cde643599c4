-- Schema version 9: Dynamic Resource Allocation (docs/schema.md, "DRA"; docs/collectors/kube.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.
--
-- The DRA devices (ResourceSlices) and allocations (ResourceClaims) of each inventory
-- snapshot, stored as changes exactly like pods and nodes (schema version 6): versions valid
-- over valid_from <= ts < valid_to within one epoch, snapshot times in inventory_snapshots
-- under the kinds 'dra_devices' and 'dra_allocations', and views that expand them.

CREATE TABLE dra_device_versions (
    epoch_at TIMESTAMP NOT NULL,
    valid_from TIMESTAMP NOT NULL,
    valid_to TIMESTAMP,
    node VARCHAR,
    driver VARCHAR,
    pool VARCHAR,
    pool_generation BIGINT,
    slice VARCHAR,
    device VARCHAR,
    device_type VARCHAR,
    device_uuid VARCHAR,
    gpu_uuid VARCHAR,
    physical_gpu VARCHAR,
    gpu_product VARCHAR,
    mig_profile VARCHAR,
    memory_bytes BIGINT,
    gpu_memory_bytes BIGINT,
    shares BIGINT,
    multiple_allocations BOOLEAN,
    counter_set VARCHAR,
    counters_json VARCHAR,
    counter_set_json VARCHAR
);

CREATE VIEW dra_devices AS
SELECT s.ts, v.node, v.driver, v.pool, v.pool_generation, v.slice, v.device, v.device_type, v.device_uuid, v.gpu_uuid, v.physical_gpu, v.gpu_product, v.mig_profile, v.memory_bytes, v.gpu_memory_bytes, v.shares, v.multiple_allocations, v.counter_set, v.counters_json, v.counter_set_json
FROM inventory_snapshots AS s
JOIN dra_device_versions AS v
    ON v.epoch_at = s.epoch_at AND v.valid_from <= s.ts
    AND s.ts < coalesce(v.valid_to, 'infinity'::TIMESTAMP)
WHERE s.kind = 'dra_devices';

CREATE VIEW dra_device_snapshots AS SELECT ts, epoch_at FROM inventory_snapshots WHERE kind = 'dra_devices';

CREATE TABLE dra_allocation_versions (
    epoch_at TIMESTAMP NOT NULL,
    valid_from TIMESTAMP NOT NULL,
    valid_to TIMESTAMP,
    namespace VARCHAR,
    claim VARCHAR,
    claim_uid VARCHAR,
    pod_uid VARCHAR,
    pod VARCHAR,
    pod_claim VARCHAR,
    extended_resource BOOLEAN,
    consumers INTEGER,
    node VARCHAR,
    driver VARCHAR,
    pool VARCHAR,
    device VARCHAR,
    request VARCHAR,
    share_id VARCHAR,
    consumed_memory_bytes BIGINT,
    share_milli INTEGER,
    pod_share_milli INTEGER,
    sharing_strategy VARCHAR,
    device_uuid VARCHAR,
    gpu_uuid VARCHAR,
    mig_profile VARCHAR,
    allocated_at TIMESTAMP
);

CREATE VIEW dra_allocations AS
SELECT s.ts, v.namespace, v.claim, v.claim_uid, v.pod_uid, v.pod, v.pod_claim, v.extended_resource, v.consumers, v.node, v.driver, v.pool, v.device, v.request, v.share_id, v.consumed_memory_bytes, v.share_milli, v.pod_share_milli, v.sharing_strategy, v.device_uuid, v.gpu_uuid, v.mig_profile, v.allocated_at
FROM inventory_snapshots AS s
JOIN dra_allocation_versions AS v
    ON v.epoch_at = s.epoch_at AND v.valid_from <= s.ts
    AND s.ts < coalesce(v.valid_to, 'infinity'::TIMESTAMP)
WHERE s.kind = 'dra_allocations';

CREATE VIEW dra_allocation_snapshots AS SELECT ts, epoch_at FROM inventory_snapshots WHERE kind = 'dra_allocations';

