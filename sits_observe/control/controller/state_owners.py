"""Which workload owns a pod: its ``ownerReferences``, followed up to the top owner.

Recommendations of pod-level actions go on the owner workload: a pod vanishes when it is
recreated, its Deployment does not. :meth:`Workloads.owner_of` follows the pod's controller
reference (the one with ``controller: true``; a pod has at most one):

- ReplicaSet -> its Deployment. The Deployment controller names each ReplicaSet
  ``<deployment>-<pod-template-hash>`` and labels its pods ``pod-template-hash`` with the same
  hash (kubernetes ``pkg/controller/deployment/sync.go``, ``getNewReplicaSet``), so the
  Deployment is the ReplicaSet's name less ``-<hash>`` when the pod's label matches it, and
  only when a Deployment of that name was listed in the namespace. ReplicaSets themselves are
  not listed: every Deployment keeps up to ``revisionHistoryLimit`` (default 10) old ones,
  each with its full pod template, so their list would be several times the Deployments' and
  grow with every rollout, to learn one name the label already gives.
- Job -> its CronJob, from the Job's own controller reference: Jobs are listed anyway (a
  bare Job is an annotation target itself), so no name rule is needed.
- StatefulSet, DaemonSet, Job (bare), CronJob: themselves.

An owner is named only when it was listed (it exists now) and its ``uid`` is the one the
reference names (where both are known: a workload deleted and re-created under the same name
is another object). Otherwise (a bare pod, a bare ReplicaSet, an owner of another kind, one the
list did not return) the pod has no owner and keeps its recommendations on itself.

Vendor JSON is read here and in :mod:`.state` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sits_observe.control.controller.kube import WORKLOAD_RESOURCES

#: (kind, namespace, name) of a listed workload.
_Key = tuple[str, str, str]


@dataclass(frozen=True)
class ControllerRef:
    """A ``metadata.ownerReferences`` entry with ``controller: true``."""

    kind: str
    name: str
    uid: str | None


def controller_ref(meta: Mapping[str, Any]) -> ControllerRef | None:
    """The object's controller reference, or None (malformed entries are ignored)."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        kind, name, uid = ref.get("kind"), ref.get("name"), ref.get("uid")
        if isinstance(kind, str) and kind and isinstance(name, str) and name:
            return ControllerRef(kind, name, uid if isinstance(uid, str) and uid else None)
    return None


@dataclass
class Workloads:
    """The listed workloads (:data:`~.kube.WORKLOAD_RESOURCES`), to resolve pod owners."""

    #: (kind, namespace, name) -> metadata.uid (None when the object has none).
    uids: dict[_Key, str | None] = field(default_factory=dict)
    #: (kind, namespace, name) -> that workload's own controller reference (Job -> CronJob).
    parents: dict[_Key, ControllerRef] = field(default_factory=dict)

    def add(self, kind: str, namespace: str, name: str, meta: Mapping[str, Any]) -> None:
        """Note one listed workload of ``kind`` (its ``metadata``)."""
        if kind not in WORKLOAD_RESOURCES:
            raise ValueError(f"{kind!r} is not a workload kind; valid: {list(WORKLOAD_RESOURCES)}")
        uid = meta.get("uid")
        self.uids[(kind, namespace, name)] = uid if isinstance(uid, str) and uid else None
        parent = controller_ref(meta)
        if parent is not None:
            self.parents[(kind, namespace, name)] = parent

    def _listed(self, kind: str, namespace: str, name: str, uid: str | None) -> bool:
        key = (kind, namespace, name)
        if key not in self.uids:
            return False
        listed = self.uids[key]
        return uid is None or listed is None or uid == listed

    def owner_of(
        self, namespace: str, labels: Mapping[str, str], meta: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        """(kind, name) of the workload a pod's recommendations go on, or None."""
        ref = controller_ref(meta)
        if ref is None:
            return None
        if ref.kind == "ReplicaSet":
            template_hash = labels.get("pod-template-hash")
            suffix = f"-{template_hash}"
            if not template_hash or not ref.name.endswith(suffix):
                return None
            deployment = ref.name[: -len(suffix)]
            listed = self._listed("Deployment", namespace, deployment, None)
            return ("Deployment", deployment) if deployment and listed else None
        if not self._listed(ref.kind, namespace, ref.name, ref.uid):
            return None
        if ref.kind == "Job":
            cron = self.parents.get(("Job", namespace, ref.name))
            if (
                cron is not None
                and cron.kind == "CronJob"
                and self._listed("CronJob", namespace, cron.name, cron.uid)
            ):
                return "CronJob", cron.name
        return ref.kind, ref.name
