"""The controller's RBAC files grant exactly what each mode does on the API, no more.

Three files, one per need (docs/controller.md, "RBAC"):

- ``deploy/controller-rbac.yaml``: dry-run (``sits-observe controller`` without ``--annotate``
  / ``--act``, and the in-process controller of ``serve --controller``): list the objects the
  plan reads, and the leader-election Lease;
- ``deploy/controller-write-rbac.yaml``: ``--annotate`` / ``--act``: patches (the owner
  workloads' recommendation annotations included) and Events;
- ``deploy/controller-time-slicing-rbac.yaml``: ``--time-slicing-configmap``: that ConfigMap.

Each test records every request a real pass sends to the emulator and checks it against what
the files grant to the account that runs it, evaluated the way the API server's RBAC
authorizer does (bindings -> roles -> rules), and that the files grant nothing unused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from kubernetes import client as k8s_client
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import JsonObject, KubeJson
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.leader import LeaderElector
from sits_observe.control.controller.planning.inputs import Signals
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import StoreRecorder
from sits_observe.control.controller.settings import RULES_OFF_BY_DEFAULT, ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.store import Store
from sits_observe.surfaces.cli.controller import build_loop
from tests.integration.control.conftest import FakeClock, seed, seed_workloads
from tests.integration.control.signals import cluster_signals, workload_signals
from tests.unit.control.queue_objects import cluster_queue, kai_pod, kai_queue, local_queue

pytestmark = pytest.mark.k8s

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
DRY_RUN = DEPLOY / "controller-rbac.yaml"
WRITE = DEPLOY / "controller-write-rbac.yaml"
TIME_SLICING = DEPLOY / "controller-time-slicing-rbac.yaml"
SERVICE = DEPLOY / "rbac.yaml"
CONTROLLER_FILES = (DRY_RUN, WRITE, TIME_SLICING)
#: (namespace, name) of the accounts: the standalone controller's and the service's.
CONTROLLER = ("sits-observe", "sits-observe-controller")
SERVICE_ACCOUNT = ("sits-observe", "sits-observe")
MODELS = {
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
}
_PATH = re.compile(
    r"^/apis?/(?:(?P<group>[^/]+)/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)"
    r"(?:/(?P<name>[^/?]+))?$"
)
Request = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name
#: (API group, resource) of the owner workloads recommendations go on.
WORKLOADS = (
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
)


class Recording(KubeJson):
    """Keeps (verb, group, resource, namespace, name) of every request."""

    def __init__(self, base: KubeJson) -> None:
        super().__init__(base.api, timeout_s=base.timeout_s)
        self.seen: set[Request] = set()

    def request(self, method: str, path: str, **kw: Any) -> JsonObject:
        match = _PATH.match(path)
        assert match, path
        group = match["group"] if path.startswith("/apis/") else ""
        name = match["name"]
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "PUT": "update",
                "POST": "create", "DELETE": "delete"}[method]  # fmt: skip
        self.seen.add((verb, group or "", match["resource"], match["ns"], name))
        return super().request(method, path, **kw)


def install_queues(kube: KubeJson) -> None:
    """A Kueue ClusterQueue with a LocalQueue and a KAI Queue with a labelled pod."""
    kueue = "/apis/kueue.x-k8s.io/v1beta1"
    kube.request("POST", f"{kueue}/clusterqueues", body=cluster_queue("team-a"))
    kube.request(
        "POST",
        f"{kueue}/namespaces/team/localqueues",
        body=local_queue("team", "default", "team-a"),
    )
    kube.request("POST", "/apis/scheduling.run.ai/v2/queues", body=kai_queue("research"))
    kube.request("POST", "/api/v1/namespaces/lab/pods", body=kai_pod("lab", "r-0", "research"))


def documents(*paths: Path) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]


def _subject_is(subject: dict[str, Any], account: tuple[str, str]) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and (
            subject.get("namespace"),
            subject.get("name"),
        )
        == account
    )


def rules_of(account: tuple[str, str], docs: list[dict[str, Any]]) -> list[tuple[str | None, Any]]:
    """(namespace the rule holds in, or None for cluster-wide; rule) bound to ``account``."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    found: list[tuple[str | None, Any]] = []
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(_subject_is(s, account) for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_ns = where if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} refers to a missing {ref}"
        found += [(where, rule) for rule in role["rules"]]
    return found


def allowed(rules: list[tuple[str | None, Any]], request: Request) -> bool:
    verb, group, resource, ns, name = request
    for where, rule in rules:
        names = rule.get("resourceNames")
        if (
            (where is None or where == ns)
            and group in rule["apiGroups"]
            and resource in rule["resources"]
            and verb in rule["verbs"]
            and (names is None or name in names)
        ):
            return True
    return False


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (verb, resource)
        for doc in docs
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
        for verb in rule["verbs"]
        for resource in rule["resources"]
    }


def used(seen: set[Request]) -> set[tuple[str, str]]:
    return {(verb, resource) for verb, _, resource, _, _ in seen}


@pytest.mark.parametrize("path", [*CONTROLLER_FILES, SERVICE], ids=lambda p: p.name)
def test_every_object_round_trips_through_the_client_models(path: Path) -> None:
    api = k8s_client.ApiClient()
    docs = documents(path)
    assert docs, f"{path.name} holds nothing"
    for doc in docs:
        model = api.deserialize(json.dumps(doc), MODELS[doc["kind"]], "application/json")
        assert api.sanitize_for_serialization(model) == doc


def test_dry_run_needs_only_the_dry_run_file_for_serve_and_for_the_controller(
    kube: KubeJson, store: Store
) -> None:
    """What ``serve --controller`` builds (``build_loop`` with the default, dry-run settings),
    run for two passes and a shutdown against the emulator."""
    seed(kube)
    recording = Recording(kube)
    loop = build_loop(
        store=store, kube=recording, settings=ControllerSettings(), registry=CollectorRegistry()
    )
    assert loop.run_once().leader  # create the Lease, read the cluster, plan, record
    assert loop.run_once().error is None  # get + update the Lease
    assert loop.elector is not None
    loop.elector.release()
    # The owner workloads and the queues are listed whether any exist or not (the emulator
    # serves no DaemonSets, CronJobs or queue CRDs until one is created: 404, read as none).
    assert {r[2] for r in recording.seen} == {
        "leases",
        "nodes",
        "pods",
        "namespaces",
        "resourcequotas",
        *("deployments", "statefulsets", "daemonsets", "jobs", "cronjobs"),
        *("clusterqueues", "localqueues", "queues"),
    }
    dry_run = documents(DRY_RUN)
    for account, files in ((SERVICE_ACCOUNT, [SERVICE, DRY_RUN]), (CONTROLLER, [DRY_RUN])):
        rules = rules_of(account, documents(*files))
        denied = sorted(r for r in recording.seen if not allowed(rules, r))
        assert denied == [], account
    # Least privilege: the dry-run file grants nothing a dry-run pass does not use, and no
    # write but on its own Lease.
    assert granted(dry_run) == used(recording.seen)
    writes = {(v, r) for v, r in granted(dry_run) if v not in ("get", "list", "watch")}
    assert writes == {("create", "leases"), ("update", "leases")}


def test_the_write_files_cover_an_act_pass_and_nothing_else(
    kube: KubeJson, clock: FakeClock, recorder: StoreRecorder
) -> None:
    seed(kube)
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "lab"}})
    # Pods of each workload kind: their recommendations are patched onto the workloads.
    seed_workloads(kube, "apps")
    install_queues(kube)
    recording = Recording(kube)
    # Every rule on, those off by default too: the files cover what any flags can write.
    settings = ControllerSettings(
        mode="act",
        time_slicing_configmap="gpu-operator/time-slicing-config",
        rules_on=RULES_OFF_BY_DEFAULT,
    )
    kube.request(
        "POST", "/api/v1/namespaces/gpu-operator/configmaps",
        body={"metadata": {"name": "time-slicing-config"}, "data": {}},
    )  # fmt: skip
    elector = LeaderElector(recording, settings, clock=clock)
    assert elector.tick()  # create
    assert elector.tick()  # get + update
    state = read_state(recording, settings)
    signals = cluster_signals(clock())
    # A namespace without the managed quota gets its advice as a Namespace annotation.
    extra = pl.DataFrame(
        {"namespace": ["lab"], "resource": ["requests.nvidia.com/gpu"], "daily_peaks": [[2.0]]}
    )
    signals = Signals.of(
        signals.at,
        nodes=signals.nodes,
        pods=pl.concat(
            [signals.pods, workload_signals(signals.at, ["apps"]).pods], how="diagonal_relaxed"
        ),
        namespaces=pl.concat([signals.namespaces, extra], how="diagonal"),
        queues=pl.DataFrame(
            {
                "kind": ["ClusterQueue", "Queue"],
                "name": ["team-a", "research"],
                "daily_peaks": [[4.0] * 7 + [6.0], [10.0]],
                "allocatable": [64.0, 64.0],
            }
        ),
    )
    decisions = plan(signals, state, settings, at=clock())
    Applier(recording, settings, recorder, limiter=TokenBucket(1000, 1000),
            sleep=clock.sleep, clock=clock).apply(decisions)  # fmt: skip
    elector.release()
    rules = rules_of(CONTROLLER, documents(*CONTROLLER_FILES))
    denied = sorted(r for r in recording.seen if not allowed(rules, r))
    assert denied == []
    assert granted(documents(*CONTROLLER_FILES)) == used(recording.seen)
    # Every workload kind was patched (its recommendation annotation), and nothing else
    # of the apps and batch groups: no ReplicaSet, no spec.
    workload_writes = {(r[0], r[1], r[2]) for r in recording.seen if r[1] in ("apps", "batch")}
    assert workload_writes == {
        *(("list", g, r) for g, r in WORKLOADS),
        *(("patch", g, r) for g, r in WORKLOADS),
    }
    # Both queues' quotas were written: a ClusterQueue read then patched, a KAI Queue patched.
    queue_requests = {r for r in recording.seen if r[2] in ("clusterqueues", "queues")}
    assert {r for r in queue_requests if r[0] != "list"} == {
        ("get", "kueue.x-k8s.io", "clusterqueues", None, "team-a"),
        ("patch", "kueue.x-k8s.io", "clusterqueues", None, "team-a"),
        ("patch", "scheduling.run.ai", "queues", None, "research"),
    }
    # The write file holds exactly the object writes; the time-slicing file that ConfigMap.
    assert granted(documents(WRITE)) == {
        ("patch", r)
        for r in (
            "nodes",
            "pods",
            "namespaces",
            "resourcequotas",
            *(r for _, r in WORKLOADS),
            "clusterqueues",
            "queues",
        )
    } | {("create", "events"), ("get", "clusterqueues")}
    assert granted(documents(TIME_SLICING)) == {("get", "configmaps"), ("update", "configmaps")}


def test_the_service_account_is_never_given_a_write_role() -> None:
    """``serve --controller`` is dry-run only: the write files bind the controller alone."""
    for path in (WRITE, TIME_SLICING):
        docs = documents(path)
        assert rules_of(SERVICE_ACCOUNT, docs) == [], path.name
        assert rules_of(CONTROLLER, docs), path.name
        assert not [d for d in docs if d["kind"] == "ServiceAccount"]  # defined once, dry-run
    assert [d["metadata"]["name"] for d in documents(DRY_RUN) if d["kind"] == "ServiceAccount"] == [
        CONTROLLER[1]
    ]
