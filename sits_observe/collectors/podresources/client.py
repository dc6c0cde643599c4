"""Which container holds which device: the kubelet's pod-resources ``List`` over its socket.

The kubelet answers ``v1.PodResourcesLister/List`` on a unix socket (default
``/var/lib/kubelet/pod-resources/kubelet.sock``, mounted into the agent read-only) with every
pod's containers and, per container, the device-plugin devices (``devices``: resource name and
device ids) and the DRA devices (``dynamic_resources``: claim, then driver, pool, device and
``share_id`` per device; ``KubeletPodResourcesDynamicResources``, beta and on since 1.34).
:meth:`PodResourcesClient.list` flattens that into one :class:`Holder` per container and
device, keeping only GPU resources (``nvidia.com/...`` of the device plugin, the DRA drivers
named in the settings).

The connection uses gRPC (``grpcio``, in the ``agent`` extra), imported on first use. An
absent socket, a refused or timed-out call, or an answer that is not the message raise
:class:`~sits_observe.errors.CollectorError` naming the socket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sits_observe.collectors.podresources.proto import LIST_METHOD, message_class
from sits_observe.errors import CollectorError

#: Where the kubelet serves the API (``pkg/kubelet/apis/podresources``).
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
#: Device-plugin resources that are NVIDIA GPUs or parts of one (``nvidia.com/gpu``,
#: ``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb``, ...).
GPU_RESOURCE_PREFIX = "nvidia.com/"
#: DRA drivers whose devices are GPUs.
GPU_DRIVERS = ("gpu.nvidia.com",)


@dataclass(frozen=True)
class Holder:
    """One device one container holds, as the kubelet reports it.

    ``source`` is ``device-plugin`` (``resource`` the resource name, ``device`` the plugin's
    device id) or ``dra`` (``resource`` the driver, ``device`` ``<pool>/<device>``, ``claim``
    ``<namespace>/<name>``, ``share_id`` for a share of a device).
    """

    namespace: str
    pod: str
    container: str
    source: str
    resource: str
    device: str
    claim: str | None = None
    share_id: str | None = None

    @property
    def device_name(self) -> str:
        """The device's own name: the plugin's id, or the DRA device name without its pool."""
        return self.device.rsplit("/", 1)[-1] if self.source == "dra" else self.device


class PodResourcesClient:
    """``List`` on the kubelet's pod-resources socket (see the module docstring)."""

    def __init__(
        self,
        socket: Path = DEFAULT_SOCKET,
        *,
        timeout_s: float = 5.0,
        gpu_drivers: Iterable[str] = GPU_DRIVERS,
        resource_prefix: str = GPU_RESOURCE_PREFIX,
    ) -> None:
        self.socket = Path(socket)
        self.timeout_s = timeout_s
        self.gpu_drivers = frozenset(gpu_drivers)
        self.resource_prefix = resource_prefix
        self._channel: Any = None
        self._list: Any = None

    def list(self) -> list[Holder]:
        """Every GPU device held by a container, now."""
        if not self.socket.exists():
            raise CollectorError(
                f"no kubelet pod-resources socket at {self.socket}; mount "
                "/var/lib/kubelet/pod-resources into the agent or give its path"
            )
        import grpc  # the agent extra; only nodes that attribute pods need it

        if self._list is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket}")
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=message_class("ListPodResourcesResponse").FromString,
            )
        try:
            answer = self._list(message_class("ListPodResourcesRequest")(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            raise CollectorError(
                f"kubelet pod-resources List on {self.socket} failed ({code}): {exc}"
            ) from exc
        return holders(answer, self.gpu_drivers, self.resource_prefix)

    def close(self) -> None:
        """Close the channel (a later :meth:`list` opens a new one)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._list = None


def holders(answer: Any, drivers: frozenset[str], prefix: str) -> list[Holder]:
    """The GPU devices of a ``ListPodResourcesResponse``, one per container and device."""
    out: list[Holder] = []
    for pod in answer.pod_resources:
        for container in pod.containers:
            who = (pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if devices.resource_name.startswith(prefix):
                    out += [
                        Holder(*who, "device-plugin", devices.resource_name, device_id)
                        for device_id in devices.device_ids
                    ]
            for dynamic in container.dynamic_resources:
                claim = f"{dynamic.claim_namespace}/{dynamic.claim_name}"
                for res in dynamic.claim_resources:
                    if res.driver_name in drivers:
                        share = res.share_id if res.HasField("share_id") else None
                        device = f"{res.pool_name}/{res.device_name}"
                        out.append(Holder(*who, "dra", res.driver_name, device, claim, share))
    return out
