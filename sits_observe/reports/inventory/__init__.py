"""Reports on what the cluster holds and how it is doing: the fleet overview and its series,
who holds each GPU, collector health, and the names reports label GPUs with."""
