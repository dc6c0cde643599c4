"""The kubelet's pod-resources API (``podresources/v1``) as protobuf messages, built in code.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``). Its messages are those of
``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``, written out here field by field (names,
numbers and types as that file declares them) into a ``FileDescriptorProto`` in a private
descriptor pool, so no ``protoc`` run and no generated module is needed, and no other library's
``v1`` package can collide with it. Only ``List`` is called; ``Get`` and
``GetAllocatableResources`` are declared for completeness of the service.

Wire facts worth knowing: ``DynamicResource`` starts at field 2 (field 1, ``class_name``, was
removed), and ``ClaimResource.share_id`` (5) is a proto3 ``optional`` (set only for a share of
a device with consumable capacity).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "v1"
SERVICE = "v1.PodResourcesLister"
#: The gRPC method path of ``List``.
LIST_METHOD = f"/{SERVICE}/List"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _INT64, _UINT64, _MESSAGE = _F.TYPE_STRING, _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

#: message -> (field name, number, type, repeated, message type) as api.proto declares them.
_MESSAGES: dict[str, list[tuple[str, int, int, bool, str]]] = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [
        ("devices", 1, _MESSAGE, True, "ContainerDevices"),
        ("cpu_ids", 2, _INT64, True, ""),
        ("memory", 3, _MESSAGE, True, "ContainerMemory"),
    ],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, _MESSAGE, True, "PodResources")],
    "PodResources": [
        ("name", 1, _STRING, False, ""),
        ("namespace", 2, _STRING, False, ""),
        ("containers", 3, _MESSAGE, True, "ContainerResources"),
        ("cpu_ids", 4, _INT64, True, ""),
        ("memory", 5, _MESSAGE, True, "ContainerMemory"),
    ],
    "ContainerResources": [
        ("name", 1, _STRING, False, ""),
        ("devices", 2, _MESSAGE, True, "ContainerDevices"),
        ("cpu_ids", 3, _INT64, True, ""),
        ("memory", 4, _MESSAGE, True, "ContainerMemory"),
        ("dynamic_resources", 5, _MESSAGE, True, "DynamicResource"),
    ],
    "ContainerMemory": [
        ("memory_type", 1, _STRING, False, ""),
        ("size", 2, _UINT64, False, ""),
        ("topology", 3, _MESSAGE, False, "TopologyInfo"),
    ],
    "ContainerDevices": [
        ("resource_name", 1, _STRING, False, ""),
        ("device_ids", 2, _STRING, True, ""),
        ("topology", 3, _MESSAGE, False, "TopologyInfo"),
    ],
    "TopologyInfo": [("nodes", 1, _MESSAGE, True, "NUMANode")],
    "NUMANode": [("ID", 1, _INT64, False, "")],
    "DynamicResource": [
        ("claim_name", 2, _STRING, False, ""),
        ("claim_namespace", 3, _STRING, False, ""),
        ("claim_resources", 4, _MESSAGE, True, "ClaimResource"),
    ],
    "ClaimResource": [
        ("cdi_devices", 1, _MESSAGE, True, "CDIDevice"),
        ("driver_name", 2, _STRING, False, ""),
        ("pool_name", 3, _STRING, False, ""),
        ("device_name", 4, _STRING, False, ""),
        ("share_id", 5, _STRING, False, ""),  # proto3 optional: see _file()
    ],
    "CDIDevice": [("name", 1, _STRING, False, "")],
    "GetPodResourcesRequest": [
        ("pod_name", 1, _STRING, False, ""),
        ("pod_namespace", 2, _STRING, False, ""),
    ],
    "GetPodResourcesResponse": [("pod_resources", 1, _MESSAGE, False, "PodResources")],
}
#: Proto3 ``optional`` fields (each gets its synthetic one-of, as protoc makes it).
_OPTIONAL = {("ClaimResource", "share_id")}
_METHODS = (
    ("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
    ("GetAllocatableResources", "AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
)


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="k8s.io/kubelet/pkg/apis/podresources/v1/api.proto",
        package=PACKAGE,
        syntax="proto3",
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(
                name=field_name, number=number, type=kind, label=_MANY if repeated else _ONE
            )
            if type_name:
                field.type_name = f".{PACKAGE}.{type_name}"
            if (name, field_name) in _OPTIONAL:
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{field_name}")
    service = proto.service.add(name=SERVICE.split(".", 1)[1])
    for method, request, response in _METHODS:
        service.method.add(
            name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}"
        )
    return proto


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return pool


@cache
def message_class(name: str) -> Any:
    """The message class of ``v1.<name>`` (e.g. ``ListPodResourcesResponse``)."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(f"{PACKAGE}.{name}"))
