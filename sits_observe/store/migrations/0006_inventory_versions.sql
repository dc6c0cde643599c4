-- Schema version 6: pods and nodes stored when they change (docs/schema.md, "Inventory").
-- Frozen once released: change the schema with a new numbered file, never by editing this one.
--
-- A snapshot is one inventory_snapshots row; each distinct row is stored once per run of
-- consecutive snapshots it appears in (pod_versions / node_versions, valid_from <= ts <
-- valid_to, valid_to NULL = still current); the views pods and nodes expand versions over
-- snapshot times, so every read of pods / nodes keeps its answer. epoch_at is the time of the
-- last full snapshot at or before a snapshot (sits_observe/store/inventory.py): every version
-- belongs to one epoch and the views join on it. Rows stored before version 6 are copied into
-- versions with one epoch per hour; rows without a ts (never visible to a time-bounded read)
-- are not copied.

CREATE TABLE inventory_snapshots (
    kind VARCHAR NOT NULL,  -- pods | nodes
    ts TIMESTAMP NOT NULL,
    epoch_at TIMESTAMP NOT NULL
);

INSERT INTO inventory_snapshots
SELECT 'nodes', ts, min(ts) OVER (PARTITION BY date_trunc('hour', ts))
FROM (SELECT DISTINCT ts FROM nodes WHERE ts IS NOT NULL)
ORDER BY ts;

CREATE TABLE node_versions (
    epoch_at TIMESTAMP NOT NULL,
    valid_from TIMESTAMP NOT NULL,
    valid_to TIMESTAMP,
    node VARCHAR,
    gpu_allocatable INTEGER,
    gpu_product VARCHAR,
    gpu_memory_bytes BIGINT,
    cpu_allocatable_milli BIGINT,
    memory_allocatable_bytes BIGINT,
    ready BOOLEAN,
    labels_json VARCHAR
);

-- Gaps and islands: a run is consecutive snapshots of one row (and copy, and epoch).
INSERT INTO node_versions
WITH snaps AS (
    SELECT row_number() OVER (ORDER BY ts) AS k, ts, epoch_at
    FROM inventory_snapshots WHERE kind = 'nodes'
),
copies AS (
    SELECT s.k, s.epoch_at, p.node, p.gpu_allocatable, p.gpu_product, p.gpu_memory_bytes, p.cpu_allocatable_milli, p.memory_allocatable_bytes, p.ready, p.labels_json,
           row_number() OVER (PARTITION BY p.ts, p.node, p.gpu_allocatable, p.gpu_product, p.gpu_memory_bytes, p.cpu_allocatable_milli, p.memory_allocatable_bytes, p.ready, p.labels_json) AS copy
    FROM nodes AS p JOIN snaps AS s ON s.ts = p.ts
),
islands AS (
    SELECT *, k - row_number() OVER (PARTITION BY node, gpu_allocatable, gpu_product, gpu_memory_bytes, cpu_allocatable_milli, memory_allocatable_bytes, ready, labels_json, copy, epoch_at ORDER BY k) AS island
    FROM copies
),
runs AS (
    SELECT epoch_at, min(k) AS first_k, max(k) AS last_k, node, gpu_allocatable, gpu_product, gpu_memory_bytes, cpu_allocatable_milli, memory_allocatable_bytes, ready, labels_json
    FROM islands GROUP BY node, gpu_allocatable, gpu_product, gpu_memory_bytes, cpu_allocatable_milli, memory_allocatable_bytes, ready, labels_json, copy, epoch_at, island
)
SELECT r.epoch_at, f.ts, n.ts, r.node, r.gpu_allocatable, r.gpu_product, r.gpu_memory_bytes, r.cpu_allocatable_milli, r.memory_allocatable_bytes, r.ready, r.labels_json
FROM runs AS r
JOIN snaps AS f ON f.k = r.first_k
LEFT JOIN snaps AS n ON n.k = r.last_k + 1
ORDER BY r.epoch_at, f.ts;

DROP TABLE nodes;

CREATE VIEW nodes AS
SELECT s.ts, v.node, v.gpu_allocatable, v.gpu_product, v.gpu_memory_bytes, v.cpu_allocatable_milli, v.memory_allocatable_bytes, v.ready, v.labels_json
FROM inventory_snapshots AS s
JOIN node_versions AS v
    ON v.epoch_at = s.epoch_at AND v.valid_from <= s.ts
    AND s.ts < coalesce(v.valid_to, 'infinity'::TIMESTAMP)
WHERE s.kind = 'nodes';

INSERT INTO inventory_snapshots
SELECT 'pods', ts, min(ts) OVER (PARTITION BY date_trunc('hour', ts))
FROM (SELECT DISTINCT ts FROM pods WHERE ts IS NOT NULL)
ORDER BY ts;

CREATE TABLE pod_versions (
    epoch_at TIMESTAMP NOT NULL,
    valid_from TIMESTAMP NOT NULL,
    valid_to TIMESTAMP,
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
    ready_at TIMESTAMP,
    gpu_milli INTEGER,
    gpu_types VARCHAR,
    gpu_uuids VARCHAR,
    gpu_stack_json VARCHAR
);

-- Gaps and islands: a run is consecutive snapshots of one row (and copy, and epoch).
INSERT INTO pod_versions
WITH snaps AS (
    SELECT row_number() OVER (ORDER BY ts) AS k, ts, epoch_at
    FROM inventory_snapshots WHERE kind = 'pods'
),
copies AS (
    SELECT s.k, s.epoch_at, p.pod_uid, p.namespace, p.pod, p.node, p.phase, p.qos_class, p.owner_kind, p.owner_name, p.workload, p.gpu_request, p.cpu_request_milli, p.memory_request_bytes, p.priority_class, p.containers_json, p.created_at, p.scheduled_at, p.initialized_at, p.containers_ready_at, p.ready_at, p.gpu_milli, p.gpu_types, p.gpu_uuids, p.gpu_stack_json,
           row_number() OVER (PARTITION BY p.ts, p.pod_uid, p.namespace, p.pod, p.node, p.phase, p.qos_class, p.owner_kind, p.owner_name, p.workload, p.gpu_request, p.cpu_request_milli, p.memory_request_bytes, p.priority_class, p.containers_json, p.created_at, p.scheduled_at, p.initialized_at, p.containers_ready_at, p.ready_at, p.gpu_milli, p.gpu_types, p.gpu_uuids, p.gpu_stack_json) AS copy
    FROM pods AS p JOIN snaps AS s ON s.ts = p.ts
),
islands AS (
    SELECT *, k - row_number() OVER (PARTITION BY pod_uid, namespace, pod, node, phase, qos_class, owner_kind, owner_name, workload, gpu_request, cpu_request_milli, memory_request_bytes, priority_class, containers_json, created_at, scheduled_at, initialized_at, containers_ready_at, ready_at, gpu_milli, gpu_types, gpu_uuids, gpu_stack_json, copy, epoch_at ORDER BY k) AS island
    FROM copies
),
runs AS (
    SELECT epoch_at, min(k) AS first_k, max(k) AS last_k, pod_uid, namespace, pod, node, phase, qos_class, owner_kind, owner_name, workload, gpu_request, cpu_request_milli, memory_request_bytes, priority_class, containers_json, created_at, scheduled_at, initialized_at, containers_ready_at, ready_at, gpu_milli, gpu_types, gpu_uuids, gpu_stack_json
    FROM islands GROUP BY pod_uid, namespace, pod, node, phase, qos_class, owner_kind, owner_name, workload, gpu_request, cpu_request_milli, memory_request_bytes, priority_class, containers_json, created_at, scheduled_at, initialized_at, containers_ready_at, ready_at, gpu_milli, gpu_types, gpu_uuids, gpu_stack_json, copy, epoch_at, island
)
SELECT r.epoch_at, f.ts, n.ts, r.pod_uid, r.namespace, r.pod, r.node, r.phase, r.qos_class, r.owner_kind, r.owner_name, r.workload, r.gpu_request, r.cpu_request_milli, r.memory_request_bytes, r.priority_class, r.containers_json, r.created_at, r.scheduled_at, r.initialized_at, r.containers_ready_at, r.ready_at, r.gpu_milli, r.gpu_types, r.gpu_uuids, r.gpu_stack_json
FROM runs AS r
JOIN snaps AS f ON f.k = r.first_k
LEFT JOIN snaps AS n ON n.k = r.last_k + 1
ORDER BY r.epoch_at, f.ts;

DROP TABLE pods;

CREATE VIEW pods AS
SELECT s.ts, v.pod_uid, v.namespace, v.pod, v.node, v.phase, v.qos_class, v.owner_kind, v.owner_name, v.workload, v.gpu_request, v.cpu_request_milli, v.memory_request_bytes, v.priority_class, v.containers_json, v.created_at, v.scheduled_at, v.initialized_at, v.containers_ready_at, v.ready_at, v.gpu_milli, v.gpu_types, v.gpu_uuids, v.gpu_stack_json
FROM inventory_snapshots AS s
JOIN pod_versions AS v
    ON v.epoch_at = s.epoch_at AND v.valid_from <= s.ts
    AND s.ts < coalesce(v.valid_to, 'infinity'::TIMESTAMP)
WHERE s.kind = 'pods';

-- The snapshot times alone: "the latest pod snapshot" without expanding any version. Every
-- time here has at least one row in its view (a time is only stored with its rows).
CREATE VIEW pod_snapshots AS SELECT ts, epoch_at FROM inventory_snapshots WHERE kind = 'pods';

CREATE VIEW node_snapshots AS SELECT ts, epoch_at FROM inventory_snapshots WHERE kind = 'nodes';
