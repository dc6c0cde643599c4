"""Queued GPU-hours per tenant, from a hand-made list of arrivals and bindings."""

from __future__ import annotations

import pytest

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.lab.experiment.measures import TENANTS, PodTimes, RunMeasures, queued_gpu_hours

WHOLE = PodShape(cpu_milli=4000, num_gpu=1, gpu_milli=1000)
TWO = PodShape(cpu_milli=4000, num_gpu=2, gpu_milli=1000)
QUARTER = PodShape(cpu_milli=0, num_gpu=1, gpu_milli=250)
CPU_ONLY = PodShape(cpu_milli=4000, num_gpu=0, gpu_milli=0)


def test_each_pod_counts_its_gpus_times_its_wait_by_namespace() -> None:
    pods = [
        # team-b: one GPU bound after an hour, two GPUs after half an hour -> 1 + 1 = 2.
        PodTimes("team-b/sweep-1", WHOLE, 0.0, 3600.0),
        PodTimes("team-b/sweep-2", TWO, 600.0, 2400.0),
        # training: a quarter share never bound, from 3600 s to the end (7200 s) -> 0.25;
        # a pod bound in the pass it arrived in waits nothing.
        PodTimes("training/eval-1", QUARTER, 3600.0, None),
        PodTimes("training/train-2", WHOLE, 100.0, 100.0),
        # CPU-only pods hold no GPU: left out.
        PodTimes("training/prep-3", CPU_ONLY, 0.0, None),
    ]
    queued = queued_gpu_hours(pods, end_s=7200.0)
    assert queued == pytest.approx({"team-b": 2.0, "training": 0.25})


def test_every_tenant_has_a_measure_of_its_own() -> None:
    fields = set(RunMeasures.__dataclass_fields__)
    for tenant in TENANTS:
        assert "queued_gpu_hours_" + tenant.replace("-", "_") in fields
