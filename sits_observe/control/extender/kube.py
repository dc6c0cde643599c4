"""The bind verb's Kubernetes API calls, through the shared JSON adapter.

Three calls (:class:`sits_observe.control.extender.bind.PodApi`), all through
:class:`~sits_observe.collectors.kube.api.KubeJson`:

- read a pod: ``GET /api/v1/namespaces/<ns>/pods/<name>`` (only when the bind verb did not
  see the pod in the cycle's filter / prioritize call);
- the GPU hint: a JSON merge PATCH of ``metadata.annotations`` (a merge patch touches only the
  keys it names; the generated ``patch_namespaced_pod`` would pick JSON Patch for a dict, see
  :mod:`sits_observe.collectors.kube.api`);
- the Binding: ``POST .../pods/<name>/binding`` with the pod's UID in ``metadata.uid`` (a
  precondition: the API server refuses to bind a pod recreated under the same name), as
  kube-scheduler's default binder writes it (``pkg/scheduler/framework/plugins/defaultbinder``).
  The answer is read as plain JSON: the generated ``V1Binding`` model rejects the API server's
  answer (``target`` must not be None, kubernetes-client/python issue 547).

RBAC: ``pods/binding`` create and ``pods`` patch (deploy/rbac.yaml). Errors are
:class:`~sits_observe.errors.KubeApiError` with the HTTP status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sits_observe.collectors.kube.api import MERGE_PATCH, KubeJson, object_path

if TYPE_CHECKING:
    from kubernetes import client as k8s_client


class KubePodApi:
    """:class:`~sits_observe.control.extender.bind.PodApi` over an official-client
    ``ApiClient`` (kubeconfig or in-cluster service account)."""

    def __init__(self, api: k8s_client.ApiClient, *, timeout_s: float = 5.0) -> None:
        self.json = KubeJson(api, timeout_s=timeout_s)

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
        metadata = {"name": name, "namespace": namespace} | ({"uid": uid} if uid else {})
        self.json.request(
            "POST",
            object_path("Pod", namespace, name) + "/binding",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )
