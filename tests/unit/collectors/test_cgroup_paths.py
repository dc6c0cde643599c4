"""The kubelet cgroup path grammar: drivers, QoS classes, runtimes, conmon and odd names.

Expected paths are written out here from the kubelet / runtime naming rules (not taken from
the simulator's writer), so the parser is checked against an independent statement of them.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.collectors.cgroup.paths import (
    SKIP,
    CgroupIdentity,
    ContainerDir,
    container_dir,
    kubepods_dir,
    parse_cgroup_path,
)

UID = "0d3f2b1c-9a8e-4c7d-b6a5-f4e3d2c1b0a9"
UID_ = UID.replace("-", "_")
CID = "4f1c" * 16  # 64 hex digits, as every CRI runtime makes them


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
            f"cri-containerd-{CID}.scope",
            CgroupIdentity(UID, CID, "containerd", "Burstable"),
        ),
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
            f"crio-{CID}.scope",
            CgroupIdentity(UID, CID, "cri-o", "BestEffort"),
        ),
        (
            f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope",
            CgroupIdentity(UID, CID, "docker", "Guaranteed"),
        ),
        (
            f"/kubepods/burstable/pod{UID}/{CID}",
            CgroupIdentity(UID, CID, "unknown", "Burstable"),
        ),
        (
            f"/kubepods/besteffort/pod{UID}/crio-{CID}",
            CgroupIdentity(UID, CID, "cri-o", "BestEffort"),
        ),
        (f"/kubepods/pod{UID}/{CID}", CgroupIdentity(UID, CID, "unknown", "Guaranteed")),
        # kind: kubelet --cgroup-root=/kubelet with the systemd driver prefixes unit names.
        (
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
            f"kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope",
            CgroupIdentity(UID, CID, "containerd", "Burstable"),
        ),
        # Static pods have a 32-hex-digit UID without dashes.
        (
            f"kubepods.slice/kubepods-pod{'ab' * 16}.slice/cri-containerd-{CID}.scope",
            CgroupIdentity("ab" * 16, CID, "containerd", "Guaranteed"),
        ),
        # Another runtime's "<prefix>-<id>.scope" is kept with runtime unknown.
        (
            f"/kubepods.slice/kubepods-pod{UID_}.slice/libpod-{CID}.scope",
            CgroupIdentity(UID, CID, "unknown", "Guaranteed"),
        ),
        # A process in a cgroup below the container's still belongs to the container.
        (
            f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope/container",
            CgroupIdentity(UID, CID, "cri-o", "Guaranteed"),
        ),
    ],
)
def test_container_paths_name_pod_container_runtime_and_qos(
    path: str, expected: CgroupIdentity
) -> None:
    assert parse_cgroup_path(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/system.slice/containerd.service",
        "/kubepods.slice",
        "/kubepods.slice/kubepods-burstable.slice",
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",  # pod
        f"/kubepods/burstable/pod{UID}",  # pod level, cgroupfs
        f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope",  # conmon
        f"/kubepods/pod{UID}/crio-conmon-{CID}",
        f"/kubepods.slice/kubepods-pod{UID}.slice/cri-containerd-{CID}.scope",  # '-' in uid
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-pod{UID_}.slice/x-{CID}.scope",
        f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}",  # no .scope
        f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-.scope",  # empty id
        f"/kubepods/guaranteed/pod{UID}/{CID}",  # no such QoS directory
        f"/kubepods/burstable/{UID}/{CID}",  # no pod prefix
    ],
)
def test_paths_that_are_no_container_give_none(path: str) -> None:
    assert parse_cgroup_path(path) is None


def test_conmon_is_skipped_not_unrecognised() -> None:
    assert container_dir(f"crio-conmon-{CID}.scope", systemd=True) == SKIP
    assert container_dir(f"crio-conmon-{CID}", systemd=False) == SKIP
    assert container_dir(f"crio-{CID}.scope", systemd=True) == ContainerDir(CID, "cri-o")
    assert container_dir("memory.current", systemd=True) is None


def test_kubepods_roots() -> None:
    assert kubepods_dir("kubepods.slice") is not None
    assert kubepods_dir("kubelet-kubepods.slice") is not None
    assert kubepods_dir("kubepods") is not None
    assert kubepods_dir("system.slice") is None
    assert kubepods_dir("kubepods-burstable.slice") is None


# -- properties --------------------------------------------------------------------------

_QOS = {"Guaranteed": None, "Burstable": "burstable", "BestEffort": "besteffort"}
_SYSTEMD_PREFIX = {"containerd": "cri-containerd-", "cri-o": "crio-", "docker": "docker-"}


def _systemd_path(uid: str, cid: str, runtime: str, qos: str, root: str) -> str:
    uid_ = uid.replace("-", "_")
    scope = f"{_SYSTEMD_PREFIX[runtime]}{cid}.scope"
    stem = _QOS[qos]
    if stem is None:
        return f"/{root}.slice/{root}-pod{uid_}.slice/{scope}"
    return f"/{root}.slice/{root}-{stem}.slice/{root}-{stem}-pod{uid_}.slice/{scope}"


def _cgroupfs_path(uid: str, cid: str, runtime: str, qos: str) -> str:
    name = f"crio-{cid}" if runtime == "cri-o" else cid
    stem = _QOS[qos]
    return f"/kubepods/pod{uid}/{name}" if stem is None else f"/kubepods/{stem}/pod{uid}/{name}"


uids = st.one_of(st.uuids().map(str), st.text("0123456789abcdef", min_size=32, max_size=32))
cids = st.text("0123456789abcdef", min_size=1, max_size=64)
runtimes = st.sampled_from(sorted(_SYSTEMD_PREFIX))
qoses = st.sampled_from(sorted(_QOS))


@given(uids, cids, runtimes, qoses, st.sampled_from(["kubepods", "kubelet-kubepods"]))
def test_systemd_paths_round_trip(uid: str, cid: str, runtime: str, qos: str, root: str) -> None:
    path = _systemd_path(uid, cid, runtime, qos, root)
    assert parse_cgroup_path(path) == CgroupIdentity(uid, cid, runtime, qos)


@given(uids, cids, runtimes, qoses)
def test_cgroupfs_paths_round_trip(uid: str, cid: str, runtime: str, qos: str) -> None:
    expected_runtime = "cri-o" if runtime == "cri-o" else "unknown"
    path = _cgroupfs_path(uid, cid, runtime, qos)
    assert parse_cgroup_path(path) == CgroupIdentity(uid, cid, expected_runtime, qos)


@given(st.lists(st.text(max_size=30), max_size=7).map("/".join))
def test_any_text_parses_to_none_or_an_identity(path: str) -> None:
    found = parse_cgroup_path(path)
    assert found is None or isinstance(found, CgroupIdentity)


path_parts = st.sampled_from(
    [
        "kubepods",
        "kubepods.slice",
        "kubepods-burstable.slice",
        "burstable",
        "besteffort",
        f"pod{UID}",
        f"kubepods-pod{UID_}.slice",
        f"kubepods-burstable-pod{UID_}.slice",
        f"cri-containerd-{CID}.scope",
        f"crio-conmon-{CID}.scope",
        CID,
        "init.scope",
    ]
)


@given(st.lists(path_parts, max_size=6).map("/".join))
def test_identities_always_come_from_a_container_level(path: str) -> None:
    """Whatever the arrangement of real-looking parts, a result names a real container."""
    found = parse_cgroup_path(path)
    if found is not None:
        assert found.container_id == CID
        assert found.pod_uid == UID
        assert found.qos_class in _QOS
        uuid.UUID(found.pod_uid)
