"""Per-pod GPU attribution from the kubelet's pod-resources API (``podresources/v1`` List:
device-plugin devices and DRA ``dynamic_resources``), joined to the GPU samples by GPU."""

from sits_observe.collectors.podresources.attribution import Attributed, attribute
from sits_observe.collectors.podresources.client import Holder, PodResourcesClient
from sits_observe.collectors.podresources.collector import PodAttributed

__all__ = ["Attributed", "Holder", "PodAttributed", "PodResourcesClient", "attribute"]
