-- Schema version 3: what makes a delivery the same delivery (docs/schema.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

-- SHA-256 (hex) of the body a batch id was first stored with: the same id with another body
-- is a conflict (HTTP 409), not a replay. NULL for batches stored before version 3, which
-- keep being acknowledged as duplicates.
ALTER TABLE ingest_batches ADD COLUMN body_sha256 VARCHAR;

-- The OTLP identity of a request span (hex), so a span exported twice is stored once.
-- NULL for requests from other sources (request logs, the simulator, agents).
ALTER TABLE requests ADD COLUMN trace_id VARCHAR;
ALTER TABLE requests ADD COLUMN span_id VARCHAR;
