"""The kubelet's cgroup v2 path grammar: which directory is a pod, which is a container, whose.

Kubelet names pod cgroups after its cgroup driver, and the container runtime names the
container cgroups inside them (Kubernetes ``pkg/kubelet/cm/cgroup_manager_linux.go``,
containerd / CRI-O / cri-dockerd cgroup code)::

    systemd driver ('-' in a unit name means nesting, so the pod UID's dashes become '_')
      kubepods.slice/kubepods-pod<uid>.slice/<scope>                             Guaranteed
      kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/<scope>
      kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/<scope>
      <scope> = cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope

    cgroupfs driver (the UID keeps its dashes)
      kubepods/pod<uid>/<cgroup>                                                 Guaranteed
      kubepods/burstable/pod<uid>/<cgroup>
      kubepods/besteffort/pod<uid>/<cgroup>
      <cgroup> = crio-<id> | <id>   (containerd and docker use the bare id: runtime "unknown")

A kubelet started with ``--cgroup-root`` prefixes the systemd unit names (kind runs
``kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/...``), so any slice
called ``kubepods.slice`` or ``<prefix>-kubepods.slice`` starts a hierarchy.

``crio-conmon-<id>`` cgroups hold CRI-O's monitor process, not a container: they are skipped.
Pause (sandbox) containers have ordinary container cgroups and are kept: they are real cgroups
that use real memory, and the inventory tells them apart (their id is no container's id).
Only the container level is read: deeper cgroups a container makes for itself are already
counted in its own (cgroup v2 statistics are hierarchical).

The per-level functions serve the collector's directory walk; :func:`parse_cgroup_path`
reads a whole path (``/proc/<pid>/cgroup`` entries, tests) with the same rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

GUARANTEED: Final = "Guaranteed"
BURSTABLE: Final = "Burstable"
BEST_EFFORT: Final = "BestEffort"

CONTAINERD: Final = "containerd"
CRIO: Final = "cri-o"
DOCKER: Final = "docker"
UNKNOWN_RUNTIME: Final = "unknown"

#: Returned for a cgroup that is deliberately not a container (CRI-O's conmon).
SKIP: Final = "skip"

_SLICE = ".slice"
_SCOPE = ".scope"
_QOS_DIRS: Final = {"burstable": BURSTABLE, "besteffort": BEST_EFFORT}
# Scope-name prefixes of the runtimes, longest first so "crio-conmon-" wins over "crio-".
_SCOPE_PREFIXES: Final = (
    ("crio-conmon-", SKIP),
    ("cri-containerd-", CONTAINERD),
    ("crio-", CRIO),
    ("docker-", DOCKER),
)
# Pod UIDs are UUIDs, or 32-hex-digit hashes for static pods; the systemd form escapes '-'.
_SYSTEMD_UID = re.compile(r"[0-9A-Za-z_]{1,64}")
_CGROUPFS_UID = re.compile(r"[0-9A-Za-z-]{1,64}")
# Container ids are 64 lowercase hex digits for containerd, CRI-O and docker; other lengths
# are accepted, other characters are not (under cgroupfs any name would otherwise pass).
_CONTAINER_ID = re.compile(r"[0-9a-f]{1,128}")


@dataclass(frozen=True, slots=True)
class KubepodsDir:
    """The top of a kubelet hierarchy: ``unit`` is its systemd unit stem, None for cgroupfs."""

    unit: str | None

    @property
    def systemd(self) -> bool:
        """Whether this hierarchy uses the systemd driver's names."""
        return self.unit is not None


@dataclass(frozen=True, slots=True)
class QosDir:
    """A QoS-class directory under kubepods (``burstable`` / ``besteffort``)."""

    qos_class: str
    unit: str | None


@dataclass(frozen=True, slots=True)
class PodDir:
    """A pod's cgroup: its UID (dashes restored) and QoS class."""

    pod_uid: str
    qos_class: str


@dataclass(frozen=True, slots=True)
class ContainerDir:
    """A container's cgroup name: the container id and the runtime that made it."""

    container_id: str
    runtime: str


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Whose a container cgroup is, from its path alone."""

    pod_uid: str
    container_id: str
    runtime: str
    qos_class: str


def kubepods_dir(name: str) -> KubepodsDir | None:
    """The hierarchy that directory ``name`` starts, or None when it starts none."""
    if name == "kubepods":
        return KubepodsDir(None)
    if name == "kubepods.slice" or (name.endswith("-kubepods.slice")):
        return KubepodsDir(name[: -len(_SLICE)])
    return None


def kubepods_child(name: str, parent: KubepodsDir) -> QosDir | PodDir | None:
    """A directory directly under kubepods: a QoS directory, a Guaranteed pod, or None."""
    unit = parent.unit
    if unit is None:
        qos = _QOS_DIRS.get(name)
        if qos is not None:
            return QosDir(qos, None)
        return _pod_dir(name, None, GUARANTEED)
    if not name.endswith(_SLICE) or not name.startswith(unit + "-"):
        return None
    stem = name[len(unit) + 1 : -len(_SLICE)]
    qos = _QOS_DIRS.get(stem)
    if qos is not None:
        return QosDir(qos, f"{unit}-{stem}")
    return _pod_dir(name, unit, GUARANTEED)


def qos_child(name: str, parent: QosDir) -> PodDir | None:
    """A pod directory under a QoS directory, or None."""
    return _pod_dir(name, parent.unit, parent.qos_class)


def _pod_dir(name: str, unit: str | None, qos_class: str) -> PodDir | None:
    if unit is None:
        if not name.startswith("pod"):
            return None
        uid = name[3:]
        return PodDir(uid, qos_class) if _CGROUPFS_UID.fullmatch(uid) else None
    prefix = unit + "-pod"
    if not name.startswith(prefix) or not name.endswith(_SLICE):
        return None
    escaped = name[len(prefix) : -len(_SLICE)]
    if not _SYSTEMD_UID.fullmatch(escaped):
        return None
    return PodDir(escaped.replace("_", "-"), qos_class)


def container_dir(name: str, *, systemd: bool) -> ContainerDir | Literal["skip"] | None:
    """A directory under a pod: a container, :data:`SKIP` (conmon), or None (unknown name)."""
    if systemd:
        if not name.endswith(_SCOPE):
            return None
        stem = name[: -len(_SCOPE)]
    else:
        stem = name
    for prefix, runtime in _SCOPE_PREFIXES:
        if stem.startswith(prefix):
            cid = stem[len(prefix) :]
            if not _CONTAINER_ID.fullmatch(cid):
                return None
            return SKIP if runtime == SKIP else ContainerDir(cid, runtime)
    if systemd:
        # Another runtime's "<prefix>-<id>.scope" (podman's libpod-, ...): keep, runtime unknown.
        _, dash, cid = stem.rpartition("-")
        if not dash or not _CONTAINER_ID.fullmatch(cid):
            return None
        return ContainerDir(cid, UNKNOWN_RUNTIME)
    return ContainerDir(stem, UNKNOWN_RUNTIME) if _CONTAINER_ID.fullmatch(stem) else None


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """Whose container cgroup ``path`` is (or lies under); None when it is no container's.

    ``path`` is relative to the cgroup mount or absolute within it, as in the
    ``0::/kubepods.slice/...`` lines of ``/proc/<pid>/cgroup``.
    """
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        top = kubepods_dir(part)
        if top is not None:
            return _identity(parts[i + 1 :], top)
    return None


def _identity(parts: list[str], top: KubepodsDir) -> CgroupIdentity | None:
    if len(parts) < 2:
        return None
    level = kubepods_child(parts[0], top)
    rest = parts[1:]
    if isinstance(level, QosDir):
        level = qos_child(rest[0], level) if len(rest) >= 2 else None
        rest = rest[1:]
    if level is None:
        return None
    found = container_dir(rest[0], systemd=top.systemd)
    if not isinstance(found, ContainerDir):
        return None
    return CgroupIdentity(level.pod_uid, found.container_id, found.runtime, level.qos_class)
