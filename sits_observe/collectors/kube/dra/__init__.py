"""Dynamic Resource Allocation: GPUs from ResourceSlices, their allocation from ResourceClaims
and the pods' claim statuses (``resource.k8s.io/v1``), read by the inventory collector."""

from sits_observe.collectors.kube.dra.claims import ClaimsRead, DraAllocation, PodDra, read_claims
from sits_observe.collectors.kube.dra.slices import DraDevice, DraInventory, node_gpus, read_slices

__all__ = [
    "ClaimsRead",
    "DraAllocation",
    "DraDevice",
    "DraInventory",
    "PodDra",
    "node_gpus",
    "read_claims",
    "read_slices",
]
