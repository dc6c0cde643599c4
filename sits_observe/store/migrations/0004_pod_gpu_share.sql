-- Schema version 4: which share of which GPUs a pod holds (docs/schema.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

-- The share of each GPU the pod asks for, milli (1000 = a whole GPU): the trace annotation
-- alibabacloud.com/gpu-milli or HAMi's nvidia.com/gpucores / gpumem-percentage. NULL for a
-- CPU-only pod, and for every row stored before version 4 (read as whole GPUs).
ALTER TABLE pods ADD COLUMN gpu_milli INTEGER;
-- The GPU products it may run on (nvidia.com/gpu.product in its node selector or required
-- node affinity), sorted and |-joined; NULL = any product.
ALTER TABLE pods ADD COLUMN gpu_types VARCHAR;
-- The GPUs the device plugin assigned (HAMi's hami.io/vgpu-devices-allocated), comma-joined
-- UUIDs in the annotation's order; NULL = not known.
ALTER TABLE pods ADD COLUMN gpu_uuids VARCHAR;
