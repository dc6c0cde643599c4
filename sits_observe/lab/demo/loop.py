"""The demo's closed loop: workloads create pods, the scheduler places them, the nodes run them.

:class:`LiveLoop` composes, against the Kubernetes emulator and the running service:

1. the objects a cluster starts from (:func:`seed_cluster`): the inference, training and
   research namespaces, the device plugin's time-slicing ConfigMap (every workload at the
   spec's default slice of 15 ms), and a ResourceQuota ``sits-quota`` in ``training`` (the
   controller's opt-in; its initial ``requests.nvidia.com/gpu`` is every GPU the inference
   servers leave free, which the controller then sizes from the measured peaks);
2. the workloads' controllers (:mod:`sits_observe.lab.kube.workloads`): Pending pods;
3. the live scheduler (:mod:`sits_observe.lab.scheduler.loop`) with the extenders of
   ``deploy/scheduler-config.yaml``, their ``urlPrefix`` pointed at the demo service, so
   kube-scheduler's filter and prioritize calls reach ``/scheduler/*`` over HTTP; the
   ``bindVerb`` is kept only when the service serves ``/scheduler/bind``;
4. the nodes' kubelets and device plugins (:mod:`sits_observe.lab.cluster.kubelet`), reading a
   pod's GPU request with :func:`~sits_observe.lab.scheduler.nodes.read_gpu_request` (the
   one reader, as the scheduler reads it) and writing HAMi's allocation annotation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client as k8s_client
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from sits_observe.collectors.kube.gpu import hami_allocation
from sits_observe.control.controller.kube import KubeJson
from sits_observe.errors import ConfigError, KubeApiError
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.kubelet import KubeletSettings, SimulatedKubelet
from sits_observe.lab.kube.emulator import api_client_for
from sits_observe.lab.kube.raw import LabKube
from sits_observe.lab.kube.workloads import WorkloadDriver
from sits_observe.lab.scheduler.config import SchedulerConfig, load_scheduler_config
from sits_observe.lab.scheduler.http import HttpExtenderTransport
from sits_observe.lab.scheduler.loop import LiveScheduler, SchedulerLoopSettings
from sits_observe.lab.scheduler.model import Extender, KubeScheduler
from sits_observe.lab.scheduler.nodes import read_gpu_request

#: Where the service's extender serves the bind verb.
BIND_PATH = "/scheduler/bind"

log = logging.getLogger(__name__)

#: Where the demo's NVIDIA device plugin reads its time slices (namespace, name).
TIME_SLICING = ("kube-system", "sits-time-slicing")
TIME_SLICING_KEY = "sits-time-slices.yaml"
#: The spec's default GPU time slice (analytics.settings ClassSettings.slice_default_s).
DEFAULT_SLICE = "15ms"
QUOTA_NAMESPACE = "training"
QUOTA_NAME = "sits-quota"


def demo_scheduler_config(path: Path, service_url: str, *, serves_bind: bool) -> SchedulerConfig:
    """The scheduler configuration at ``path`` with every extender's ``urlPrefix`` moved to
    ``service_url`` (its path kept) and the ``bindVerb`` dropped unless the service binds."""
    if not path.is_file():
        raise ConfigError(
            f"scheduler configuration {path} not found; the demo runs kube-scheduler with the "
            "repository's deploy/scheduler-config.yaml (pass --scheduler-config FILE)"
        )
    return load_scheduler_config(path).pointed_at(service_url, serves_bind=serves_bind)


def seed_cluster(api: k8s_client.ApiClient, *, quota_gpus: int, inference: Sequence[str]) -> None:
    """Create the objects the demo cluster starts from (see the module docstring);
    ``inference`` names the inference Deployments (each gets the default time slice)."""
    entries = {f"inference/{name}": DEFAULT_SLICE for name in inference}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TIME_SLICING[1], "namespace": TIME_SLICING[0]},
        "data": {TIME_SLICING_KEY: yaml.safe_dump(entries, sort_keys=True)},
    }
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA_NAME, "namespace": QUOTA_NAMESPACE},
        "spec": {
            "hard": {
                "requests.nvidia.com/gpu": str(max(quota_gpus, 1)),
                "requests.cpu": str(max(quota_gpus, 1) * 8),
                "requests.memory": f"{max(quota_gpus, 1) * 32}Gi",
            }
        },
    }
    kube = KubeJson(api)
    for path, body in (
        (f"/api/v1/namespaces/{TIME_SLICING[0]}/configmaps", configmap),
        (f"/api/v1/namespaces/{QUOTA_NAMESPACE}/resourcequotas", quota),
    ):
        try:
            kube.request("POST", path, body=body)
        except KubeApiError as exc:
            if exc.status != 409:
                raise


def serves_bind(app: Starlette) -> bool:
    """Whether the service app registered the extender's ``POST /scheduler/bind`` (it does
    only with Kubernetes API access)."""
    return any(getattr(route, "path", None) == BIND_PATH for route in app.routes)


@dataclass
class LoopCounts:
    """What the loop did so far, for the progress display and the closing summary.

    ``scheduled_via_extender``: pods bound after an extender answered in their cycle (its
    filter or prioritize, or its bind verb, ``bound_by_extender`` of them); ``quota_rejections``
    counts refused creation attempts (a refused pod is retried, and counted again).
    """

    scheduled_via_extender: int
    bound_by_extender: int
    scheduled_default: int
    unschedulable_attempts: int
    pending: int
    quota_rejections: int
    created: int


class LiveLoop:
    """Workloads, scheduler and nodes of the demo (see the module docstring)."""

    def __init__(
        self,
        api_url: str,
        cluster: SimulatedCluster,
        config: SchedulerConfig,
        *,
        seed: int,
        registry: CollectorRegistry,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.transport = HttpExtenderTransport(registry=registry)
        extenders = [Extender(e, self.transport) for e in config.extenders]
        self.scheduler = LiveScheduler(
            LabKube(api_client_for(api_url)),
            KubeScheduler(config, extenders),
            settings=SchedulerLoopSettings(seed=seed),
            registry=registry,
        )
        self.kubelet = SimulatedKubelet(
            api_client_for(api_url),
            cluster,
            read_gpu=read_gpu_request,
            allocation=lambda uuids, mib, cores: hami_allocation(
                uuids, memory_mib=mib, cores_percent=cores
            ),
            settings=KubeletSettings(
                time_slicing_configmap=TIME_SLICING, time_slicing_key=TIME_SLICING_KEY
            ),
            registry=registry,
        )
        self.driver = WorkloadDriver(
            api_client_for(api_url),
            cluster.workloads,
            sim_now=lambda: cluster.now_s,
            registry=registry,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.scheduler.run, args=(self._stop,), name="scheduler", daemon=True
        )

    def start(self) -> LiveLoop:
        """Start the nodes, the workloads, then the scheduler."""
        self.kubelet.start()
        self.driver.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the scheduler first (nothing new is placed), then workloads and nodes."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self.driver.stop()
        self.kubelet.stop()
        self.transport.close()

    def counts(self) -> LoopCounts:
        """The loop's counts so far."""
        totals = self.scheduler.totals
        outcomes = self.driver.counts.outcomes
        return LoopCounts(
            scheduled_via_extender=totals["scheduled_extender"] + totals["scheduled_extender_bind"],
            bound_by_extender=totals["scheduled_extender_bind"],
            scheduled_default=totals["scheduled_default"],
            unschedulable_attempts=totals["unschedulable"],
            pending=self.scheduler.pending,
            quota_rejections=outcomes["rejected_quota"],
            created=outcomes["created"],
        )
