"""The bind verb's Kubernetes API calls, through the official client.

Three calls (:class:`sits_observe.control.extender_bind.PodApi`):

- read a pod: ``GET /api/v1/namespaces/<ns>/pods/<name>`` (only when the bind verb did not
  see the pod in the cycle's filter / prioritize call);
- the GPU hint: a JSON merge PATCH of ``metadata.annotations`` (a merge patch touches only the
  keys it names; the generated ``patch_namespaced_pod`` would pick JSON Patch for a dict, see
  :mod:`sits_observe.control.kube`);
- the Binding: ``CoreV1Api.create_namespaced_pod_binding`` (``POST .../pods/<name>/binding``)
  with the pod's UID in ``metadata.uid`` (a precondition: the API server refuses to bind a
  pod recreated under the same name), as kube-scheduler's default binder writes it
  (``pkg/scheduler/framework/plugins/defaultbinder``). The answer is not deserialised: the
  generated ``V1Binding`` model rejects the API server's answer (``target`` must not be None,
  kubernetes-client/python issue 547).

RBAC: ``pods/binding`` create and ``pods`` patch (deploy/rbac.yaml). Errors are
:class:`~sits_observe.errors.KubeApiError` with the HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from sits_observe.control.kube import MERGE_PATCH, KubeJson, object_path
from sits_observe.errors import KubeApiError


class KubePodApi:
    """:class:`~sits_observe.control.extender_bind.PodApi` over an official-client
    ``ApiClient`` (kubeconfig or in-cluster service account)."""

    def __init__(self, api: k8s_client.ApiClient, *, timeout_s: float = 5.0) -> None:
        self.json = KubeJson(api, timeout_s=timeout_s)
        self.core = k8s_client.CoreV1Api(api)
        self.timeout_s = timeout_s

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The pod as JSON."""
        return self.json.request("GET", object_path("Pod", namespace, name))

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the pod's (a JSON merge patch)."""
        self.json.request(
            "PATCH",
            object_path("Pod", namespace, name),
            body={"metadata": {"annotations": dict(annotations)}},
            content_type=MERGE_PATCH,
        )

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to ``node`` through the ``pods/binding`` subresource."""
        binding = k8s_client.V1Binding(
            metadata=k8s_client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
            target=k8s_client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self.core.create_namespaced_pod_binding(
                name,
                namespace,
                binding,
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
        except ApiException as exc:
            raise KubeApiError(
                f"POST pods/{name}/binding: {exc.status} {exc.reason}{_message(exc.body)}",
                status=int(exc.status or 0),
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(
                f"POST pods/{name}/binding: cannot reach the Kubernetes API: {exc}", status=0
            ) from exc


def _message(body: object) -> str:
    """``: <message>`` of an API server ``Status`` body, or ""."""
    try:
        doc = json.loads(body) if isinstance(body, (str, bytes)) and body else None
    except ValueError:
        return ""
    message = doc.get("message") if isinstance(doc, dict) else None
    return f": {message}" if isinstance(message, str) and message else ""
