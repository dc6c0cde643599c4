"""One request of a lab component through the official client's transport, without its
generated API methods.

The generated methods (``CoreV1Api.create_namespaced_pod``...) validate every argument with
pydantic and walk the body to serialise it; for the simulated kubelets and workload
controllers, which write thousands of pods an hour, that was most of each write's client
time. :func:`call` sends the JSON body as it is through the same ``ApiClient`` (its pool, its
configuration) and raises the same :class:`ApiException`, with the answer's body, on an error.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

#: JSON object as the API serves it.
JsonObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"


def call(
    api: k8s_client.ApiClient,
    method: str,
    path: str,
    body: JsonObject | None = None,
    *,
    content_type: str = "application/json",
) -> bytes:
    """``method path`` with ``body``; the answer's bytes, or :class:`ApiException` (status,
    reason and body) for a status of 400 or more."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
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
