-- Schema version 2: the controller's decisions and their outcomes (docs/controller.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

CREATE TABLE decisions (
    ts TIMESTAMP,
    replica VARCHAR,
    mode VARCHAR,
    dry_run BOOLEAN,
    kind VARCHAR,
    namespace VARCHAR,
    name VARCHAR,
    action VARCHAR,
    current VARCHAR,
    proposed VARCHAR,
    reason VARCHAR,
    evidence VARCHAR,
    outcome VARCHAR,
    detail VARCHAR,
    attempts INTEGER
);
