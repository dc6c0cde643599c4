"""Owner resolution from ownerReferences, and what read_state makes of the cluster's JSON.

The JSON is written by hand the way the Deployment, StatefulSet, DaemonSet, Job and CronJob
controllers create their objects (names, ``pod-template-hash``, controller references).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sits_observe.collectors.kube.api import JsonObject, KubeJson
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.control.controller.state_owners import ControllerRef, Workloads, controller_ref
from sits_observe.errors import KubeApiError


def ref(kind: str, name: str, uid: str | None = None, controller: bool = True) -> JsonObject:
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    out: JsonObject = {"apiVersion": api, "kind": kind, "name": name, "controller": controller}
    if uid:
        out["uid"] = uid
    return out


def meta(name: str, *owners: JsonObject, uid: str | None = None, **labels: str) -> JsonObject:
    out: JsonObject = {"name": name, "namespace": "team", "labels": labels}
    if owners:
        out["ownerReferences"] = list(owners)
    if uid:
        out["uid"] = uid
    return out


def listed(*items: tuple[str, JsonObject]) -> Workloads:
    workloads = Workloads()
    for kind, m in items:
        workloads.add(kind, str(m["namespace"]), str(m["name"]), m)
    return workloads


def owner(workloads: Workloads, pod: JsonObject) -> tuple[str, str] | None:
    return workloads.owner_of("team", pod.get("labels") or {}, pod)


DEPLOYMENT = ("Deployment", meta("chat", uid="u-dep"))
#: A pod of Deployment chat's ReplicaSet chat-7d4b9c6f5d, as the Deployment controller names
#: it and labels the pod.
RS_POD = meta(
    "chat-7d4b9c6f5d-x2x9q",
    ref("ReplicaSet", "chat-7d4b9c6f5d", "u-rs"),
    **{"pod-template-hash": "7d4b9c6f5d"},
)


def test_a_replicaset_pod_belongs_to_its_deployment() -> None:
    assert owner(listed(DEPLOYMENT), RS_POD) == ("Deployment", "chat")


def test_a_replicaset_pod_without_the_hash_label_or_a_listed_deployment_has_no_owner() -> None:
    no_label = meta("chat-7d4b9c6f5d-x2x9q", ref("ReplicaSet", "chat-7d4b9c6f5d", "u-rs"))
    assert owner(listed(DEPLOYMENT), no_label) is None
    other_hash = meta(
        "chat-7d4b9c6f5d-x2x9q",
        ref("ReplicaSet", "chat-7d4b9c6f5d"),
        **{"pod-template-hash": "abcde"},
    )
    assert owner(listed(DEPLOYMENT), other_hash) is None
    # A bare ReplicaSet (no Deployment of that name): the pod keeps its own annotations.
    assert owner(listed(), RS_POD) is None
    assert owner(listed(("Deployment", meta("chat-7d4b9c6f5d"))), RS_POD) is None


def test_a_cronjobs_pod_belongs_to_the_cronjob_a_bare_jobs_to_the_job() -> None:
    cron = ("CronJob", meta("nightly", uid="u-cron"))
    job = ("Job", meta("nightly-29000000", ref("CronJob", "nightly", "u-cron"), uid="u-job"))
    bare = ("Job", meta("train", uid="u-train"))
    workloads = listed(cron, job, bare)
    run = meta("nightly-29000000-q", ref("Job", "nightly-29000000", "u-job"))
    assert owner(workloads, run) == ("CronJob", "nightly")
    assert owner(workloads, meta("train-abc", ref("Job", "train", "u-train"))) == ("Job", "train")
    # The CronJob not listed (an API server without batch/v1 CronJobs): the Job.
    assert owner(listed(job), run) == ("Job", "nightly-29000000")


@pytest.mark.parametrize("kind", ["StatefulSet", "DaemonSet"])
def test_statefulset_and_daemonset_pods_belong_to_them(kind: str) -> None:
    workloads = listed((kind, meta("db", uid="u-db")))
    assert owner(workloads, meta("db-0", ref(kind, "db", "u-db"))) == (kind, "db")
    # Another object under the same name (deleted and re-created): not this pod's owner.
    assert owner(workloads, meta("db-0", ref(kind, "db", "u-old"))) is None


def test_bare_pods_and_other_owners_have_none() -> None:
    workloads = listed(DEPLOYMENT)
    assert owner(workloads, meta("solo")) is None
    assert owner(workloads, meta("mirror", ref("Node", "n1"))) is None  # a static pod
    # Only the controller reference counts.
    assert owner(workloads, meta("x", ref("Deployment", "chat", controller=False))) is None


def test_controller_ref_ignores_malformed_entries() -> None:
    assert controller_ref({"ownerReferences": "nope"}) is None
    found = controller_ref(
        {"ownerReferences": [7, {"kind": "", "controller": True}, ref("Job", "j", "u")]}
    )
    assert found == ControllerRef("Job", "j", "u")


def test_workloads_refuse_other_kinds() -> None:
    with pytest.raises(ValueError, match="ReplicaSet"):
        Workloads().add("ReplicaSet", "team", "x", {})


class FakeKube(KubeJson):
    """Answers lists from hand-written items; a path missing from ``lists`` answers 404."""

    def __init__(self, lists: Mapping[str, list[JsonObject]]) -> None:
        self.lists = dict(lists)
        self.asked: list[str] = []

    def list_all(
        self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
    ) -> list[JsonObject]:
        self.asked.append(path)
        if path not in self.lists:
            raise KubeApiError(f"GET {path}: 404 Not Found", status=404)
        return self.lists[path]

    def request(self, method: str, path: str, **kw: Any) -> JsonObject:
        raise AssertionError(f"unexpected {method} {path}")


def test_read_state_lists_workloads_resolves_owners_and_reads_the_namespace_label() -> None:
    kube = FakeKube(
        {
            "/api/v1/nodes": [],
            "/apis/apps/v1/deployments": [
                {"metadata": {**DEPLOYMENT[1], "annotations": {"sits.io/opt-out": "true"}}}
            ],
            "/apis/apps/v1/statefulsets": [],
            "/apis/apps/v1/daemonsets": [],
            "/apis/batch/v1/jobs": [],
            # no /apis/batch/v1/cronjobs: the server does not serve them (404), read as none
            "/api/v1/pods": [{"metadata": RS_POD}, {"metadata": meta("solo")}],
            "/api/v1/namespaces": [
                {"metadata": {"name": "team", "labels": {"sits.io/enabled": "True "}}},
                {"metadata": {"name": "off", "labels": {"sits.io/enabled": "false"}}},
                {"metadata": {"name": "other", "labels": {"sits.io/enabled": "maybe"}}},
                {"metadata": {"name": "plain"}},
            ],
            "/api/v1/resourcequotas": [],
        }
    )
    state = read_state(kube, ControllerSettings())
    assert "/apis/batch/v1/cronjobs" in kube.asked
    assert state.owners.rows() == [("team", "chat-7d4b9c6f5d-x2x9q", "Deployment", "chat")]
    rows = {
        (r["kind"], r["name"]): (r["opt_out"], r["enabled"])
        for r in state.objects.iter_rows(named=True)
    }
    assert rows[("Deployment", "chat")] == (True, None)
    assert rows[("Pod", "solo")] == (False, None)
    assert rows[("Namespace", "team")] == (False, True)
    assert rows[("Namespace", "off")] == (False, False)
    assert rows[("Namespace", "other")] == (False, None)  # neither true nor false: unlabelled
    assert rows[("Namespace", "plain")] == (False, None)


def test_read_state_fails_on_other_list_errors() -> None:
    class Denied(FakeKube):
        def list_all(
            self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
        ) -> list[JsonObject]:
            if path == "/apis/apps/v1/deployments":
                raise KubeApiError(f"GET {path}: 403 Forbidden", status=403)
            return []

    with pytest.raises(KubeApiError, match="403"):
        read_state(Denied({}), ControllerSettings())
