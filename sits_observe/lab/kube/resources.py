"""The API resources the Kubernetes emulator serves, and the verbs and subresources of each."""

from __future__ import annotations

from dataclasses import dataclass

READ_VERBS = frozenset({"get", "list", "watch"})
ALL_VERBS = READ_VERBS | {"create", "update", "patch", "delete", "deletecollection"}


@dataclass(frozen=True)
class ResourceSpec:
    """One API resource the emulator serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False

    @property
    def key(self) -> str:
        """kmock's ``group/version/plural`` spelling (``v1/pods`` for the core group)."""
        prefix = f"{self.group}/{self.version}" if self.group else self.version
        return f"{prefix}/{self.plural}"

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of its objects."""
        return f"{self.group}/{self.version}" if self.group else self.version


#: What sits_observe reads (inventory), writes (controllers, leases) or shows (events).
RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("", "v1", "nodes", "Node", namespaced=False, has_status=True),
    ResourceSpec("", "v1", "pods", "Pod", namespaced=True, has_status=True),
    ResourceSpec("", "v1", "events", "Event", namespaced=True),
    ResourceSpec("", "v1", "namespaces", "Namespace", namespaced=False, has_status=True),
    ResourceSpec("", "v1", "configmaps", "ConfigMap", namespaced=True),
    ResourceSpec("", "v1", "resourcequotas", "ResourceQuota", namespaced=True, has_status=True),
    ResourceSpec("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    ResourceSpec("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    # The simulated workloads' owners (Deployment -> ReplicaSet -> Pod, Job, StatefulSet).
    ResourceSpec("apps", "v1", "deployments", "Deployment", namespaced=True, has_status=True),
    ResourceSpec("apps", "v1", "replicasets", "ReplicaSet", namespaced=True, has_status=True),
    ResourceSpec("apps", "v1", "statefulsets", "StatefulSet", namespaced=True, has_status=True),
    ResourceSpec("batch", "v1", "jobs", "Job", namespaced=True, has_status=True),
    # Dynamic Resource Allocation (GA in Kubernetes 1.34): what the DRA inventory reads.
    ResourceSpec("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
    ResourceSpec(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        namespaced=True,
        has_status=True,
    ),
)
#: Subresources served beyond ``status``.
EXTRA_SUBRESOURCES = {"pods": {"binding"}}
