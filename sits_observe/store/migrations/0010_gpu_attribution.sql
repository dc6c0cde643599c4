-- Schema version 10: GPU samples joined to the containers the kubelet says hold each GPU
-- (docs/schema.md, docs/collectors/podresources.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

CREATE TABLE gpu_attribution (
    ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR,
    mig_profile VARCHAR,
    mig_instance_id INTEGER,
    bucket VARCHAR,
    reason VARCHAR,
    holders INTEGER,
    namespace VARCHAR,
    pod VARCHAR,
    container VARCHAR,
    source VARCHAR,
    resource VARCHAR,
    device VARCHAR,
    claim VARCHAR,
    share_id VARCHAR,
    fb_used_bytes BIGINT,
    gpu_util_ratio DOUBLE
);
