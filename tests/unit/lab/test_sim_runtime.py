"""The simulated cluster's runtime: its files follow pods started from other threads."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from sits_observe.lab.cluster.cluster import PodEvent, SimulatedCluster
from sits_observe.lab.cluster.runtime import SimulationRuntime

NODE = "gpu-node-1"


def test_a_pod_started_between_taking_events_and_writing_files_is_laid_out_next_tick(
    tmp_path: Path,
) -> None:
    cluster = SimulatedCluster(nodes=1, gpus_per_node=8, seed=3, standalone=False, idle_notebooks=1)
    spec = cluster.workloads.idle_notebook(cluster.workloads.idle_notebook_owners[0])
    late = dataclasses.replace(spec, uid=spec.uid + "-late", name=spec.name + "-late")
    started: list[str] = []

    def on_event(event: PodEvent, _at: datetime) -> None:
        # Another thread (the kubelet binding the scheduler's choice) starts a pod while the
        # ticker is between taking the events and rewriting the files: here, synchronously.
        if event.kind == "added" and not started:
            started.append(cluster.start_pod(late, NODE, [1]).uid)

    runtime = SimulationRuntime(cluster, tmp_path, on_pod_event=on_event, files_every_s=0.1)
    runtime.start(ticker=False)
    try:
        cluster.start_pod(spec, NODE, [0])
        runtime.advance(0.1)  # takes the first pod's event; the handler starts the second
        tree = runtime.files[NODE].tree
        assert started and {c.pod_uid for c in tree.containers()} == {spec.uid}
        runtime.advance(0.1)  # the second pod's event is taken and its cgroup laid out
        assert {c.pod_uid for c in tree.containers()} == {spec.uid, late.uid}
        (late_cgroup,) = [c for c in tree.containers() if c.pod_uid == late.uid]
        assert (late_cgroup.path / "memory.current").read_text().strip() != "0"
    finally:
        runtime.stop()
