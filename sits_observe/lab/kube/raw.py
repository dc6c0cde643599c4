"""One request of a lab component to the Kubernetes API, without the client's generated API
methods or its urllib3 stack.

The generated methods (``CoreV1Api.create_namespaced_pod``...) validate every argument with
pydantic and walk the body to serialise it, and the official client's transport costs about
0.8 ms of CPU a request; for the simulated kubelets and workload controllers, which write
thousands of pods an hour, that was most of each write's time. :func:`call` sends the JSON
body over a kept HTTP/1.1 connection to the same server (one per ``ApiClient`` and thread, as
the official client's pool keeps them) with the standard library's client, and raises the same
:class:`ApiException`, with the answer's body, on an error. A server the lab does not run
itself (HTTPS, credentials: a real cluster) goes through the official client's transport as
before. Product code never uses this: it talks to the API through
:class:`~sits_observe.collectors.kube.api.KubeJson`.
"""

from __future__ import annotations

import http.client
import json
import threading
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.lab.keepalive import Answer, KeptConnection

#: JSON object as the API serves it.
JsonObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"

#: Seconds a lab request may take (the emulator answers in milliseconds).
TIMEOUT_S = 30.0

#: Per ``ApiClient``, each thread's kept connection.
_CONNECTIONS: weakref.WeakKeyDictionary[k8s_client.ApiClient, threading.local] = (
    weakref.WeakKeyDictionary()
)
_GUARD = threading.Lock()


def call(
    api: k8s_client.ApiClient,
    method: str,
    path: str,
    body: JsonObject | None = None,
    *,
    content_type: str = "application/json",
) -> bytes:
    """``method path`` with ``body``; the answer's bytes, or :class:`ApiException` (status,
    reason and body) for a status of 400 or more; a transport failure is an :class:`OSError`."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if not _lab_server(api):
        return _through_client(api, method, path, body, headers)
    payload = None if body is None else json.dumps(body).encode()
    status, reason, _, data = exchange(api, method, path, payload, headers)
    if status >= 400:
        raise ApiException(status=status, reason=reason, body=data.decode("utf-8", "replace"))
    return data


class LabKube(KubeJson):
    """:class:`KubeJson` (the same requests, answers and :class:`KubeApiError`) whose
    exchanges with a lab server go over :func:`exchange`: the lab's kube-scheduler model
    binds and records events through it."""

    def _send(self, method: str, url: str, headers: Mapping[str, str], payload: object) -> Answer:
        if not _lab_server(self.api):
            return super()._send(method, url, headers, payload)
        data = payload if isinstance(payload, bytes | None) else json.dumps(payload).encode()
        path = url.removeprefix(str(self.api.configuration.host).rstrip("/"))
        return exchange(self.api, method, path, data, headers)


def exchange(
    api: k8s_client.ApiClient,
    method: str,
    path: str,
    payload: bytes | None,
    headers: Mapping[str, str],
) -> Answer:
    """One exchange with the lab server behind ``api`` over this thread's kept connection:
    status, reason, headers and body (a transport failure is an :class:`OSError`)."""
    target = urlsplit(api.configuration.host)
    local = _local(api)
    conn: KeptConnection | None = getattr(local, "conn", None)
    if conn is None:
        conn = local.conn = KeptConnection("http", target.hostname or "", target.port, TIMEOUT_S)
    try:
        return conn.exchange(method, target.path.rstrip("/") + path, payload, headers)
    except http.client.HTTPException as exc:
        raise ConnectionError(f"{method} {path}: {exc!r}") from exc


def _lab_server(api: k8s_client.ApiClient) -> bool:
    """Whether ``api`` talks to a server the lab runs: plain HTTP, no credentials."""
    config = api.configuration
    return urlsplit(config.host).scheme == "http" and not (config.api_key or config.username)


def _local(api: k8s_client.ApiClient) -> threading.local:
    with _GUARD:
        local = _CONNECTIONS.get(api)
        if local is None:
            local = _CONNECTIONS[api] = threading.local()
        return local


def _through_client(
    api: k8s_client.ApiClient,
    method: str,
    path: str,
    body: JsonObject | None,
    headers: dict[str, str],
) -> bytes:
    url = api.configuration.host + path
    response = api.call_api(method, url, header_params=headers, body=body)
    data: bytes = response.read()  # type: ignore[no-untyped-call]
    if int(response.status) >= 400:
        raise ApiException(
            status=int(response.status),
            reason=str(response.reason),
            body=data.decode("utf-8", "replace"),
        )
    return data
