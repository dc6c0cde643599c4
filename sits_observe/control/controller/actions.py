"""The decisions the controller makes, by name: the vocabulary its settings (``--rules-off``),
its model, its rules and its records share."""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """The decisions the controller makes (each from the spec)."""

    MEMORY_CLASS = "memory-class"
    FRAGMENTATION = "fragmentation"
    TOPOLOGY_POLICY = "topology-policy"
    TIME_SLICE = "time-slice"
    QOS_MEMORY_QUOTA = "qos-memory-quota"
    QOS_BANDWIDTH_QUOTA = "qos-bandwidth-quota"
    PRIORITY_CLASS = "priority-class"
    QUOTA_GPU = "quota-gpu"
    QUOTA_CPU = "quota-cpu"
    QUOTA_MEMORY = "quota-memory"
    QUEUE_GPU_QUOTA = "queue-gpu-quota"
    QUEUE_GPU_BORROWING_LIMIT = "queue-gpu-borrowing-limit"
    QUEUE_GPU_LIMIT = "queue-gpu-limit"
    TENANT_THROTTLE = "tenant-throttle"
