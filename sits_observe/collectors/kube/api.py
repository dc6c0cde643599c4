"""The one JSON adapter over the official Kubernetes client's ``ApiClient``.

Every reader and writer of the API (the inventory collector, the controller, the leader
lease, the scheduler extender's bind verb, the live scheduler) goes through :class:`KubeJson`.
Why not the generated ``CoreV1Api`` methods: they coerce request bodies into models (a
``datetime`` with zero microseconds then serialises without the fraction a Lease's
``MicroTime`` needs), default ``PATCH`` to ``application/json-patch+json`` (a dict body is a
merge patch), and build a model per listed object (slow at 10,000 pods, and one malformed
object would fail the whole page). Going through ``ApiClient.call_api`` keeps the official
client's configuration (kubeconfig, in-cluster token, TLS) and sends exactly the JSON written
here; callers parse the raw objects themselves.

Errors become :class:`~sits_observe.errors.KubeApiError` with the HTTP status (0 when the API
could not be reached) and, for 429, the ``Retry-After`` seconds. Retries of writes are the
controller's policy (:mod:`sits_observe.control.controller.kube`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3

from sits_observe.errors import KubeApiError

if TYPE_CHECKING:  # the client is a type here: importing it costs ``serve`` 0.2 s of start-up
    from kubernetes import client as k8s_client

JsonObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"


def _status_message(body: bytes | str | None) -> str:
    try:
        doc = json.loads(body) if body else None
    except (ValueError, TypeError):
        return ""
    message = doc.get("message") if isinstance(doc, dict) else None
    return f": {message}" if isinstance(message, str) and message else ""


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    value = (headers or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class KubeJson:
    """JSON requests to the API server behind an official-client ``ApiClient``."""

    def __init__(self, api: k8s_client.ApiClient, *, timeout_s: float = 30.0) -> None:
        self.api = api
        self.timeout_s = timeout_s

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return str(self.api.configuration.host).rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        query: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """One request; the decoded JSON object answered. Raises :class:`KubeApiError`."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        # param_serialize adds the credentials (bearer token) the configuration carries.
        _, url, headers, payload, _ = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            status, reason, answer_headers, data = self._send(method, url, headers, payload)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(
                f"{method} {path}: cannot reach the Kubernetes API at {self.host}: {exc}",
                status=0,
            ) from exc
        if status >= 400:
            raise KubeApiError(
                f"{method} {path}: {status} {reason}{_status_message(data)}",
                status=status,
                retry_after_s=_retry_after(answer_headers),
            )
        try:
            doc = json.loads(data) if data else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise KubeApiError(
                f"{method} {path}: the answer is not JSON: {exc}", status=status
            ) from exc
        if not isinstance(doc, dict):
            raise KubeApiError(f"{method} {path}: the answer is not a JSON object", status=status)
        return doc

    def _send(
        self, method: str, url: str, headers: Mapping[str, str], payload: object
    ) -> tuple[int, str, Mapping[str, str], bytes]:
        """One exchange through the official client's transport: status, reason, headers and
        body of the answer (a transport failure raises)."""
        response = self.api.call_api(
            method, url, header_params=dict(headers), body=payload, _request_timeout=self.timeout_s
        )
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        return int(response.status), str(response.reason), response.headers, data

    def list_all(
        self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
    ) -> list[JsonObject]:
        """Every item of a list, page by page (``limit`` / ``continue``).

        A continue token outlives etcd compaction only about five minutes; a page answered
        410 Expired starts the list over once, from the first page.
        """
        try:
            return self._list_pages(path, page_size, query)
        except KubeApiError as exc:
            if exc.status != 410:
                raise
        return self._list_pages(path, page_size, query)

    def _list_pages(
        self, path: str, page_size: int, query: Mapping[str, str] | None
    ) -> list[JsonObject]:
        items: list[JsonObject] = []
        token: str | None = None
        while True:
            params: dict[str, str | int] = {**(query or {}), "limit": page_size}
            if token:
                params["continue"] = token
            page = self.request("GET", path, query=params)
            found = page.get("items")
            if not isinstance(found, list):
                raise KubeApiError(f"GET {path}: the list has no items array", status=200)
            items.extend(i for i in found if isinstance(i, dict))
            meta = page.get("metadata")
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token:
                return items


def object_path(kind: str, namespace: str | None, name: str) -> str:
    """REST path of one object of the kinds sits_observe reads or writes."""
    paths = {
        "Node": "/api/v1/nodes/{name}",
        "Namespace": "/api/v1/namespaces/{name}",
        "Pod": "/api/v1/namespaces/{ns}/pods/{name}",
        "ResourceQuota": "/api/v1/namespaces/{ns}/resourcequotas/{name}",
        "ConfigMap": "/api/v1/namespaces/{ns}/configmaps/{name}",
        "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
    }
    if kind not in paths:
        raise ValueError(f"kind {kind!r} is not one sits_observe writes; valid: {list(paths)}")
    if "{ns}" in paths[kind] and not namespace:
        raise ValueError(f"a {kind} needs a namespace")
    return paths[kind].format(ns=quote(namespace or "", safe=""), name=quote(name, safe=""))
