"""A kubelet pod-resources server for tests: real gRPC on a unix socket, ``v1`` wire format.

The answers are encoded here, byte by byte, from the field numbers of the kubelet's
``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (a few lines of protobuf wire format),
not with the product's message classes: a wrong field number or type in the product's
descriptors then fails the tests instead of agreeing with itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

SERVICE = "v1.PodResourcesLister"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings and embedded messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _bytes(number, value.encode()) if value else b""


@dataclass
class DraDevice:
    """ClaimResource: cdi_devices 1, driver_name 2, pool_name 3, device_name 4, share_id 5."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    cdi: tuple[str, ...] = ()

    def encode(self) -> bytes:
        cdi = b"".join(_bytes(1, _text(1, name)) for name in self.cdi)
        share = _bytes(5, self.share_id.encode()) if self.share_id is not None else b""
        return cdi + _text(2, self.driver) + _text(3, self.pool) + _text(4, self.device) + share


@dataclass
class Container:
    """ContainerResources: name 1, devices 2 (ContainerDevices: resource_name 1, device_ids 2),
    cpu_ids 3, dynamic_resources 5 (DynamicResource: claim_name 2, claim_namespace 3,
    claim_resources 4)."""

    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)
    claims: dict[tuple[str, str], list[DraDevice]] = field(default_factory=dict)
    cpu_ids: tuple[int, ...] = ()

    def encode(self) -> bytes:
        out = _text(1, self.name)
        for resource, ids in self.devices.items():
            out += _bytes(2, _text(1, resource) + b"".join(_text(2, i) for i in ids))
        if self.cpu_ids:  # packed repeated int64
            out += _bytes(3, b"".join(_varint(c) for c in self.cpu_ids))
        for (namespace, claim), devices in self.claims.items():
            body = _text(2, claim) + _text(3, namespace)
            body += b"".join(_bytes(4, d.encode()) for d in devices)
            out += _bytes(5, body)
        return out


@dataclass
class Pod:
    """PodResources: name 1, namespace 2, containers 3."""

    namespace: str
    name: str
    containers: list[Container]

    def encode(self) -> bytes:
        body = _text(1, self.name) + _text(2, self.namespace)
        return body + b"".join(_bytes(3, c.encode()) for c in self.containers)


def list_response(pods: list[Pod]) -> bytes:
    """ListPodResourcesResponse: pod_resources 1."""
    return b"".join(_bytes(1, p.encode()) for p in pods)


class FakeKubelet:
    """The kubelet's ``PodResourcesLister`` on a unix socket; answers ``List`` with ``pods``.

    ``status`` other than OK makes ``List`` fail with it. ``calls`` counts the requests.
    """

    def __init__(self, socket: Path, pods: list[Pod]) -> None:
        self.socket = socket
        self.pods = pods
        self.status = grpc.StatusCode.OK
        self.calls = 0
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=lambda raw: raw,
                    response_serializer=lambda raw: raw,
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        if not self._server.add_insecure_port(f"unix://{socket}"):
            raise RuntimeError(f"cannot listen on {socket}")

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.calls += 1
        if request:  # ListPodResourcesRequest has no field
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unexpected request fields")
        if self.status != grpc.StatusCode.OK:
            context.abort(self.status, "injected by the test")
        return list_response(self.pods)


@contextmanager
def serving(socket: Path, pods: list[Pod]) -> Iterator[FakeKubelet]:
    """A :class:`FakeKubelet` started on ``socket`` and stopped afterwards."""
    kubelet = FakeKubelet(socket, pods)
    kubelet._server.start()
    try:
        yield kubelet
    finally:
        kubelet._server.stop(grace=None)
