"""Runs the simulated cluster in wall time and lays it out in the real formats.

Per simulated node, under ``workdir/nodes/<node>/``:
- an HTTP server on loopback with the node's dcgm-exporter and vLLM ``/metrics``
  (:mod:`.endpoints`);
- a kubelet-style cgroup v2 tree (``cgroup/``), alternating the systemd and cgroupfs drivers
  between nodes so both layouts are exercised (:mod:`.cgroupfs`);
- a JSON-lines request log (``requests.jsonl``) with one exact record per finished request,
  as an inference gateway's access log would hold.

Pods starting and ending are handed to ``on_pod_event``: in the demo the simulated kubelet
(:mod:`.kubelet`) reports a pod whose work ended as ``Succeeded``; a standalone cluster's
publisher (:class:`~.kube_publish.KubePublisher`) creates and deletes the pods. A ticker
thread steps the model every ``tick_s`` and rewrites the cgroup files every
``files_every_s``; shutdown is prompt (the thread waits on an event). Each node's cgroup tree
has the kubelet's QoS hierarchy from the start, before any pod runs there.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from sits_observe.lab.cluster.cgroupfs import (
    CgroupDriver,
    CgroupTree,
    CgroupValues,
    QosClass,
    Runtime,
)
from sits_observe.lab.cluster.cluster import PodEvent, SimContainer, SimPod, SimulatedCluster
from sits_observe.lab.cluster.endpoints import NodeEndpoints

log = logging.getLogger(__name__)

PodEventHandler = Callable[[PodEvent, datetime], None]


class SimulatedNodeFiles:
    """The on-disk side of one node: its cgroup tree (with each container's
    ``memory.numa_stat`` split by ``numa_split``), its ``/sys`` NUMA and PCI files under
    ``sys_root`` and its request log."""

    def __init__(
        self,
        node: str,
        directory: Path,
        driver: CgroupDriver,
        numa_split: Callable[[SimPod], tuple[float, ...]] | None = None,
    ) -> None:
        self.node = node
        self.directory = directory
        self.numa_split = numa_split
        self.cgroup_root = directory / "cgroup"
        self.sys_root = directory / "sys"
        self.request_log = directory / "requests.jsonl"
        self.tree = CgroupTree(self.cgroup_root, driver=driver)
        self.tree.add_kubepods()
        self._log: IO[str] = self.request_log.open("a", encoding="utf-8")
        self._laid_out: set[str] = set()  # the uids of the pods whose cgroups exist

    def add_pod(self, pod: SimPod) -> None:
        self._laid_out.add(pod.uid)
        for c in pod.containers:
            self.tree.add_container(
                pod.uid,
                c.container_id,
                qos=QosClass(pod.qos_class),
                runtime=Runtime.CONTAINERD,
                values=_values(c, self._ratios(pod)),
            )

    def remove_pod(self, pod: SimPod) -> None:
        self._laid_out.discard(pod.uid)
        self.tree.remove_pod(pod.uid)

    def update(self, pods: list[SimPod]) -> None:
        """Rewrite the files of the laid-out ``pods``. A pod started by another thread (the
        kubelet binding what the scheduler placed) after the ticker last took the events has
        no cgroup yet: it is laid out, with its values, when its event is taken."""
        for pod in pods:
            if pod.uid not in self._laid_out:
                continue
            ratios = self._ratios(pod)
            for c in pod.containers:
                self.tree.set_values(c.container_id, _values(c, ratios))

    def _ratios(self, pod: SimPod) -> tuple[float, ...] | None:
        return None if self.numa_split is None else self.numa_split(pod)

    def write_requests(self, lines: list[str]) -> None:
        if lines:
            self._log.write("".join(lines))
            self._log.flush()

    def close(self) -> None:
        self._log.close()


def _values(c: SimContainer, numa_ratios: tuple[float, ...] | None = None) -> CgroupValues:
    anon = int(c.memory_bytes * 0.8)
    return CgroupValues(
        memory_numa_ratios=numa_ratios,
        memory_current_bytes=c.memory_bytes,
        memory_max_bytes=c.memory_limit_bytes,
        memory_anon_bytes=anon,
        memory_file_bytes=c.memory_bytes - anon - c.memory_bytes // 50,
        memory_kernel_bytes=c.memory_bytes // 50,
        oom_events_total=c.oom_kills,
        oom_kill_events_total=c.oom_kills,
        memory_pressure_some_avg10_ratio=(
            min(0.9, c.memory_bytes / c.memory_limit_bytes) ** 8 if c.memory_limit_bytes else 0.0
        ),
        cpu_usage_s=c.cpu_usage_s,
        cpu_limit_cores=c.cpu_limit_cores,
    )


class SimulationRuntime:
    """Drives a :class:`SimulatedCluster` in wall time (see module docstring)."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        workdir: Path,
        *,
        on_pod_event: PodEventHandler | None = None,
        tick_s: float = 0.1,
        files_every_s: float = 1.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.tick_s = tick_s
        self.files_every_s = files_every_s
        self.on_pod_event = on_pod_event
        self.clock = clock
        self.started_at = clock()
        self.endpoints: dict[str, NodeEndpoints] = {}
        self.files: dict[str, SimulatedNodeFiles] = {}
        for i, name in enumerate(cluster.nodes):
            driver = CgroupDriver.SYSTEMD if i % 2 == 0 else CgroupDriver.CGROUPFS
            directory = workdir / "nodes" / name
            directory.mkdir(parents=True, exist_ok=True)
            self.files[name] = SimulatedNodeFiles(name, directory, driver, cluster.numa_split)
            self.endpoints[name] = NodeEndpoints(cluster, name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-ticker", daemon=True)
        self._files_at_s = 0.0
        self.requests_written = 0

    def start(self, *, ticker: bool = True) -> SimulationRuntime:
        """Serve the endpoints, lay out the initial pods and start the ticker (``ticker``
        False: no thread; the caller steps the model with :meth:`advance`, on a simulated
        clock, as ``sits-observe experiment`` does)."""
        for endpoints in self.endpoints.values():
            endpoints.start()
        self._drain_events()
        self._write_files()
        if ticker:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the ticker and the endpoints; the files stay for inspection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for endpoints in self.endpoints.values():
            endpoints.stop()
        for files in self.files.values():
            files.close()

    def sim_time(self, t_s: float) -> datetime:
        """The wall-clock time of simulated second ``t_s``."""
        return self.started_at + timedelta(seconds=t_s)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.advance(self.tick_s)
            except Exception:  # one bad tick must not end the simulation
                log.exception("simulation tick failed; continuing")

    def advance(self, dt_s: float) -> None:
        """One tick: step the model by ``dt_s`` simulated seconds, hand over the pod events,
        append the finished requests and rewrite the cgroup files when due."""
        self.cluster.step(dt_s)
        self._drain_events()
        self._write_requests()
        if self.cluster.now_s - self._files_at_s >= self.files_every_s:
            self._write_files()
            self._files_at_s = self.cluster.now_s

    def _drain_events(self) -> None:
        for event in self.cluster.take_events():
            files = self.files[event.pod.node]
            if event.kind == "added":
                files.add_pod(event.pod)
            else:
                files.remove_pod(event.pod)
            if self.on_pod_event is not None:
                try:
                    self.on_pod_event(event, self.sim_time(event.at_s))
                except Exception:
                    log.exception("publishing pod event %s %s failed", event.kind, event.pod.name)

    def _write_files(self) -> None:
        with self.cluster.lock():
            for name, node in self.cluster.nodes.items():
                files = self.files[name]
                files.update(list(node.pods.values()))
                self.cluster.write_sysfs(name, files.sys_root)

    def _write_requests(self) -> None:
        for name, files in self.files.items():
            lines = []
            for pod, r in self.cluster.finished_requests(name):
                record = {
                    "ts": self.sim_time(r.finished_at_s).isoformat(),
                    "model": r.model,
                    "latency_s": round(r.latency_s, 6),
                    "ttft_s": round(r.ttft_s, 6),
                    "inter_token_s": round(r.inter_token_s, 6),
                    "prompt_tokens": r.prompt_tokens,
                    "output_tokens": r.output_tokens,
                    "status": "200",
                    "namespace": pod.namespace,
                    "pod": pod.name,
                    "node": name,
                }
                lines.append(json.dumps(record) + "\n")
            files.write_requests(lines)
            self.requests_written += len(lines)
