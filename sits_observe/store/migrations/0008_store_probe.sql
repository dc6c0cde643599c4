-- Schema version 8: the row the service's write probe updates (docs/api.md, Probes).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

-- One row; /readyz proves the store can commit by bumping `writes` (a write-ahead-log record
-- and its sync, as an ingest needs) when nothing else committed in the last few seconds.
CREATE TABLE store_probe (
    id INTEGER PRIMARY KEY,
    writes BIGINT NOT NULL,
    written_at TIMESTAMP NOT NULL
);
INSERT INTO store_probe VALUES (1, 0, now()::TIMESTAMP);
