"""The simulated nodes' kubelets and device plugins, against a Kubernetes API.

What a node does with the pods the scheduler bound to it, as kubelet and the GPU device plugin
do it, one pass (:meth:`SimulatedKubelet.sync_once`) every ``poll_s``:

1. **Admit** each Pending pod bound to a simulated node that is not running yet: its GPU
   request comes from the injected reader (the one reader of a pod's GPU request, which the
   composition root passes in: ``collectors.kube_gpu``); the device plugin model
   (:func:`~sits_observe.analytics.placement.device_plugin.allocate_gpus`, whole GPUs lowest
   index first, shares by HAMi's ``spread`` policy) picks the GPUs, honouring the pod's
   ``nvidia.com/use-gpuuuid`` hint. The node writes HAMi's allocation annotation
   ``hami.io/vgpu-devices-allocated`` (injected writer, ``collectors.kube_gpu.hami_allocation``),
   starts the containers in the cluster model (its cgroup tree, its exporters' GPU attribution)
   and reports the pod Running (Ready once the warm-up passed). A pod no GPU of the node can
   take fails admission as kubelet fails it: phase ``Failed``, reason
   ``UnexpectedAdmissionError``.
2. **Report** each pod whose work ended (a Job's pod, a notebook): phase ``Succeeded`` with a
   terminated container (:meth:`SimulatedKubelet.on_pod_event`, told by the runtime).
3. **Stop** the containers of pods deleted from the API.
4. **Configure** the device plugin's time slicing: the per-workload slices in the time-slicing
   ConfigMap the controller writes (``namespace/workload: 25ms`` under one data key) become the
   slices the simulated inference servers run under (:mod:`.server`).

Every API failure or unreadable pod is logged and counted in
``sits_sim_kubelet_errors_total{stage}``; the loop carries on. Admissions count in
``sits_sim_kubelet_pods_total{outcome}``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.placement.device_plugin import (
    MILLI_PER_GPU,
    DeviceAllocationError,
    GpuPolicy,
    allocate_gpus,
)
from sits_observe.lab.cluster.cluster import PodEvent, SimPod, SimulatedCluster
from sits_observe.lab.kube.publish import WARMUP_S, running_status, spec_of
from sits_observe.lab.kube.raw import MERGE_PATCH, call

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
#: HAMi's annotation naming the devices a pod was given.
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"


class GpuAsk(Protocol):
    """What the kubelet needs of a pod's GPU request."""

    @property
    def num_gpu(self) -> int: ...

    @property
    def gpu_milli(self) -> int: ...

    @property
    def hint_uuids(self) -> tuple[str, ...]: ...

    @property
    def gpu_types(self) -> tuple[str, ...]: ...


#: Reads a pod's GPU request from its JSON.
GpuReader = Callable[[Mapping[str, Any]], GpuAsk]
#: Writes the allocation annotation: (device UUIDs, memory MiB per device, cores percent).
AllocationWriter = Callable[[Sequence[str], int, int], str]


class KubeletSettings(BaseModel):
    """How often the nodes look, and where the time-slicing configuration lives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    poll_s: float = Field(0.25, gt=0, le=60, description="seconds between two passes")
    gpu_policy: GpuPolicy = Field(
        "spread", description="the HAMi-style device plugin's GPU policy for shares"
    )
    time_slicing_configmap: tuple[str, str] | None = Field(
        None,
        description="(namespace, name) of the device plugin's time-slicing ConfigMap; "
        "none: no time slicing",
    )
    time_slicing_key: str = Field(
        "sits-time-slices.yaml", min_length=1, description="its data key (workload -> slice)"
    )
    config_every_s: float = Field(
        2.0, gt=0, le=3600, description="seconds between two reads of that ConfigMap"
    )


@dataclass(frozen=True)
class _Started:
    """A pod this kubelet runs: where it is in the API, since when, and the conditions it
    already had (the scheduler's ``PodScheduled``), kept in every status it reports."""

    namespace: str
    name: str
    at: datetime
    conditions: tuple[JsonObject, ...]


class KubeletMetrics:
    """The kubelets' counters, on an injected registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pods = Counter(
            "sits_sim_kubelet_pods_total",
            "pods the simulated kubelets handled, by outcome: started, admission_failed, "
            "completed, stopped",
            ("outcome",),
            registry=registry,
        )
        self.errors = Counter(
            "sits_sim_kubelet_errors_total",
            "failures of the simulated kubelets by stage: list, admit, patch, config",
            ("stage",),
            registry=registry,
        )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_slice_s(value: object) -> float | None:
    """``25ms`` / ``0.025s`` -> seconds; None when unreadable or not positive."""
    text = str(value).strip()
    try:
        seconds = float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))
    except ValueError:
        return None
    return seconds if seconds > 0 else None


class SimulatedKubelet:
    """Every simulated node's kubelet and device plugin (see the module docstring)."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        cluster: SimulatedCluster,
        *,
        read_gpu: GpuReader,
        allocation: AllocationWriter,
        settings: KubeletSettings | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], datetime] = _utc_now,
        pods: Callable[[], list[JsonObject]] | None = None,
        configmaps: Callable[[], list[JsonObject]] | None = None,
    ) -> None:
        self.api = api
        self.core = k8s_client.CoreV1Api(api)
        #: Reads the pods from an informer when given (:mod:`sits_observe.lab.kube.informer`);
        #: lists them otherwise.
        self.pods = pods
        #: Reads the ConfigMaps from an informer when given (the device plugin's config file,
        #: which the kubelet keeps in sync with its ConfigMap); reads the API otherwise.
        self.configmaps = configmaps
        self.cluster = cluster
        self.read_gpu = read_gpu
        self.allocation = allocation
        self.settings = settings or KubeletSettings()
        self.metrics = KubeletMetrics(registry or CollectorRegistry())
        self.clock = clock
        self._started: dict[str, _Started] = {}
        self._ready: set[str] = set()
        self._refused: set[str] = set()
        self._config_at: datetime | None = None
        self._config_applied: str | None = None  # the time-slicing text last applied
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-kubelet", daemon=True)

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> SimulatedKubelet:
        """Sync in a background thread every ``poll_s``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (prompt: it waits on an event)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.poll_s):
            try:
                self.sync_once()
            except Exception:  # one bad pass must not end the nodes
                self.metrics.errors.labels("sync").inc()
                log.exception("simulated kubelet pass failed; continuing")

    # -- one pass ---------------------------------------------------------------------

    def sync_once(self) -> None:
        """Admit, report, stop and configure once (see the module docstring)."""
        try:
            pods = self._list_pods()
        except (ApiException, OSError, ValueError) as exc:
            self.metrics.errors.labels("list").inc()
            log.warning("simulated kubelet cannot list pods: %s", exc)
            return
        present = {str((p.get("metadata") or {}).get("uid")) for p in pods}
        for pod in pods:
            self._sync_pod(pod)
        for uid in [u for u in self._started if u not in present]:
            if self.cluster.stop_pod(uid) is not None:
                self.metrics.pods.labels("stopped").inc()
            self._forget(uid)
        self._mark_ready()
        self._configure()

    def _list_pods(self) -> list[JsonObject]:
        if self.pods is not None:
            return self.pods()
        # Raw JSON: the client's models would be built (and dropped) for every pod.
        response: Any = self.core.list_pod_for_all_namespaces(_preload_content=False)
        document = json.loads(response.data)
        items = document.get("items") if isinstance(document, dict) else None
        return [i for i in items or () if isinstance(i, dict)]

    def _sync_pod(self, pod: JsonObject) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if (
            not uid
            or node not in self.cluster.nodes
            or phase != "Pending"
            or uid in self._started
            or uid in self._refused
        ):
            return
        try:
            self._admit(pod, str(node))
        except (ValueError, KeyError) as exc:
            self._refused.add(uid)
            self.metrics.errors.labels("admit").inc()
            log.warning("cannot start pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)

    def _admit(self, pod: JsonObject, node_name: str) -> None:
        meta = pod["metadata"]
        namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
        gpu = self.read_gpu(pod)
        spec = spec_of(pod, num_gpu=gpu.num_gpu, gpu_milli=gpu.gpu_milli, gpu_types=gpu.gpu_types)
        node = self.cluster.nodes[node_name]
        with self.cluster.lock():  # the device state must not change between choice and start
            free, pods_per_gpu, uuids = node.device_state()
            try:
                gpus = allocate_gpus(
                    free,
                    pods_per_gpu,
                    uuids,
                    num_gpu=gpu.num_gpu,
                    gpu_milli=gpu.gpu_milli,
                    hint=gpu.hint_uuids,
                    policy=self.settings.gpu_policy,
                )
            except DeviceAllocationError as exc:
                refused = str(exc)
            else:
                refused = ""
                sim_pod = self.cluster.start_pod(spec, node_name, gpus)
        if refused:
            self._refuse(namespace, name, uid, refused)
            return
        now = self.clock()
        kept = tuple(
            c
            for c in (pod.get("status") or {}).get("conditions") or ()
            if isinstance(c, dict) and c.get("type") == "PodScheduled"
        )
        started = _Started(namespace, name, now, kept)
        self._started[uid] = started
        self.metrics.pods.labels("started").inc()
        if gpus:
            per_gpu_mib = node.gpus[0].total_bytes * gpu.gpu_milli // MILLI_PER_GPU // (1 << 20)
            value = self.allocation(
                [uuids[g] for g in gpus], per_gpu_mib, gpu.gpu_milli * 100 // MILLI_PER_GPU
            )
            self._patch(
                namespace, name, {"metadata": {"annotations": {ALLOCATED_ANNOTATION: value}}}
            )
        self._report_running(started, sim_pod, ready=False)

    def _refuse(self, namespace: str, name: str, uid: str, why: str) -> None:
        """Fail the pod's admission as kubelet does when the device plugin cannot allocate."""
        self._refused.add(uid)
        self.metrics.pods.labels("admission_failed").inc()
        message = f"Allocate failed due to {why}, which is unexpected"
        self._patch_status(
            namespace,
            name,
            {
                "status": {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": message,
                }
            },
        )

    def _mark_ready(self) -> None:
        now = self.clock()
        for uid, started in list(self._started.items()):
            if uid in self._ready:
                continue
            pod = self.cluster.running(uid)
            if pod is None:
                continue
            if now - started.at >= timedelta(seconds=WARMUP_S.get(pod.kind, 2.0)):
                self._ready.add(uid)
                self._report_running(started, pod, ready=True)

    def _report_running(self, started: _Started, pod: SimPod, *, ready: bool) -> None:
        status = running_status(pod, started.at, ready=ready)
        status["conditions"] = [*started.conditions, *status["conditions"]]
        self._patch_status(started.namespace, started.name, {"status": status})

    def on_pod_event(self, event: PodEvent, at: datetime) -> None:
        """Report a pod whose work ended as ``Succeeded`` (the runtime calls this)."""
        if event.kind != "deleted" or not event.completed:
            return
        pod = event.pod
        entry = self._started.get(pod.uid)
        started = entry.at if entry is not None else at
        statuses = [
            {
                "name": c.name,
                "containerID": f"containerd://{c.container_id}",
                "ready": False,
                "restartCount": 0,
                "image": "registry.example/sim:1",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": _ts(started),
                        "finishedAt": _ts(at),
                    }
                },
            }
            for c in pod.containers
        ]
        self._patch_status(
            pod.namespace,
            pod.name,
            {"status": {"phase": "Succeeded", "containerStatuses": statuses}},
        )
        self.metrics.pods.labels("completed").inc()
        self._forget(pod.uid)

    def _forget(self, uid: str) -> None:
        self._started.pop(uid, None)
        self._ready.discard(uid)

    # -- time slicing -----------------------------------------------------------------

    def _configure(self) -> None:
        where = self.settings.time_slicing_configmap
        now = self.clock()
        if where is None or (
            self._config_at is not None
            and now - self._config_at < timedelta(seconds=self.settings.config_every_s)
        ):
            return
        self._config_at = now
        try:
            document = self._read_configmap(where[0], where[1])
            raw = ((document.get("data") or {}).get(self.settings.time_slicing_key)) or ""
            if raw == self._config_applied:
                return  # as applied last time (a pod started since got it from the cluster)
            entries = yaml.safe_load(raw) or {}
        except ApiException as exc:
            if exc.status != 404:
                self.metrics.errors.labels("config").inc()
                log.warning("cannot read the time-slicing ConfigMap: %s", exc.status)
            return
        except (OSError, ValueError, yaml.YAMLError) as exc:
            self.metrics.errors.labels("config").inc()
            log.warning("the time-slicing ConfigMap is unreadable: %s", exc)
            return
        slices: dict[str, float] = {}
        unreadable = 0
        for key, value in entries.items() if isinstance(entries, dict) else ():
            seconds = parse_slice_s(value)
            if seconds is None:
                unreadable += 1
                continue
            slices[str(key)] = seconds
        self.metrics.errors.labels("config").inc(unreadable)
        self.cluster.set_time_slices(slices)
        # Read again only when it changes; one with unreadable entries is read (and counted)
        # at every pass, as before.
        self._config_applied = raw if not unreadable else None

    def _read_configmap(self, namespace: str, name: str) -> JsonObject:
        """The ConfigMap, from the informer or the API (:class:`ApiException` 404 if none)."""
        if self.configmaps is None:
            response: Any = self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False
            )
            document: JsonObject = json.loads(response.data)
            return document
        for item in self.configmaps():
            meta = item.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == (namespace, name):
                return item
        raise ApiException(status=404, reason="NotFound")

    # -- API writes -------------------------------------------------------------------

    def _patch(self, namespace: str, name: str, body: JsonObject) -> None:
        try:
            call(self.api, "PATCH", _pod_path(namespace, name), body, content_type=MERGE_PATCH)
        except (ApiException, OSError) as exc:
            self.metrics.errors.labels("patch").inc()
            log.warning("patching pod %s/%s failed: %s", namespace, name, exc)

    def _patch_status(self, namespace: str, name: str, body: JsonObject) -> None:
        try:
            call(
                self.api,
                "PATCH",
                f"{_pod_path(namespace, name)}/status",
                body,
                content_type=MERGE_PATCH,
            )
        except (ApiException, OSError) as exc:
            self.metrics.errors.labels("patch").inc()
            log.warning("patching the status of pod %s/%s failed: %s", namespace, name, exc)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"
