"""What ``sits-observe experiment`` runs: the arms, the size and the simulated cadence.

Kept apart from the runner (:mod:`.experiment`, which imports the emulator, the service and
the agents) so the CLI can build its flags and help without importing them.

Defaults, and why: 8 nodes x 8 GPUs (4 H100 and 4 A100 nodes, 32 GPUs left to Jobs and
notebooks after the inference servers) for 1 simulated hour; the scheduler, kubelets and
workload controllers pass every 2 simulated seconds (pods run 30-180 s and back off 1-10 s);
the agents collect every 60 s, the inventory is snapshotted (and the extender's view rebuilt)
every 10 s, the controller passes every 60 s, the allocation is sampled every 30 s. One run
(one arm, one seed) takes about 5 minutes on a 2-core machine (docs/benchmarks.md); the issue's
size is ``--hours 6 --nodes 50``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sits_observe.control.controller.settings import NAMESPACE_QUOTA_ACTIONS
from sits_observe.domain.validation import comma_separated
from sits_observe.lab.demo.settings import SCHEDULER_CONFIG

#: The arms, with what each runs (the parts are built in :mod:`.experiment_parts`).
ARM_DOCS: dict[str, str] = {
    "kube-default": "kube-scheduler without extenders, no controller (what a team runs today)",
    "kube-sits": "the shipped scheduler configuration's extenders, the controller in --act",
    "kube-sits-gpuhint": "kube-sits with a GPU-hinting bind verb added where the configuration "
    "has none (the shipped one binds already)",
    "kube-sits-nobind": "kube-sits without the bind verb: HAMi's device plugin picks the GPU",
}
#: Ablation (SPEC "Baselines": one module disabled at a time): each arm is ``kube-sits`` with
#: the one module named here switched off, so ``kube-sits`` minus the arm is what the module
#: is worth. The extender's terms are switched off by a weight of 0 (ranked mode leaves the
#: term out, :mod:`sits_observe.control.extender.scoring`).
ABLATIONS: dict[str, str] = {
    "kube-sits-no-fragmentation": "the extender's FGD fragmentation term",
    "kube-sits-no-memory-fit": "the extender's free-memory / topology term",
    "kube-sits-no-interference": "the extender's interference penalty",
    "kube-sits-no-gpuhint": "the bind verb's GPU hint (the device plugin picks a share's GPU)",
    "kube-sits-nobind": "the bind verb (kube-scheduler binds; the device plugin picks)",
    "kube-sits-no-controller": "the controller (the extender alone)",
    "kube-sits-no-time-slice": "the controller's time-slice rule",
    "kube-sits-no-qos-quota": "the controller's QoS memory and bandwidth quota rule",
}
#: The controller actions each rule ablation arm switches off (``ControllerSettings.rules_off``).
RULES_OFF: dict[str, tuple[str, ...]] = {
    "kube-sits-no-time-slice": ("time-slice",),
    "kube-sits-no-qos-quota": ("qos-memory-quota", "qos-bandwidth-quota"),
}
ARM_DOCS.update(
    {arm: f"kube-sits without {module}" for arm, module in ABLATIONS.items() if arm not in ARM_DOCS}
)
#: The controller's rules that are off by default where it writes (``RULES_OFF_BY_DEFAULT``):
#: each arm is ``kube-sits`` with the one rule switched back on (``ControllerSettings.rules_on``),
#: so the arm minus ``kube-sits`` is what the rule would be worth on.
RULES_ON: dict[str, tuple[str, ...]] = {
    "kube-sits-with-memory-class": ("memory-class",),
    "kube-sits-with-fragmentation-rule": ("fragmentation",),
    "kube-sits-with-namespace-quota": NAMESPACE_QUOTA_ACTIONS,
}
ARM_DOCS.update(
    {
        "kube-sits-with-memory-class": "kube-sits with the controller's memory-class label rule "
        "switched on (off by default)",
        "kube-sits-with-fragmentation-rule": "kube-sits with the controller's node fragmentation "
        "label rule switched on (off by default)",
        "kube-sits-with-namespace-quota": "kube-sits with the controller's namespace quota rule "
        "switched on (off by default: it lends idle quota, which cost the cluster more queueing "
        "than it saved)",
    }
)
#: The arm every sits arm is compared against.
BASELINE = "kube-default"
#: The arm the ablation arms take one module from.
FULL = "kube-sits"


#: Memory one run may take at the largest default-like sizes (an 8x8x1 h run peaks near
#: 0.6 GiB; 50 nodes for 6 hours, more): what ``jobs=0`` allows each worker.
RUN_MEMORY_GIB = 2


def _memory_gib() -> int:
    """The machine's memory, GiB (a large number where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 30))
    except (ValueError, OSError, AttributeError):
        return 1 << 20


@dataclass(frozen=True)
class Cadence:
    """How often, in simulated seconds, each part runs (all multiples of ``step_s``)."""

    step_s: float
    collect_every_s: float
    inventory_every_s: float
    controller_every_s: float
    sample_every_s: float

    def every(self, interval_s: float) -> int:
        """``interval_s`` in steps (at least one)."""
        return max(1, round(interval_s / self.step_s))


class ExperimentSettings(BaseModel):
    """What ``sits-observe experiment`` runs (every interval in simulated seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arms: tuple[str, ...] = Field(
        (BASELINE, "kube-sits"),
        min_length=1,
        description=f"arms to run: {', '.join(ARM_DOCS)} (repeat the flag or comma-separate)",
    )
    seeds: int = Field(5, ge=1, le=100, description="seeds per arm")
    first_seed: int = Field(0, ge=0, description="first seed (seeds are first .. first+seeds-1)")
    hours: float = Field(1.0, gt=0, le=48, description="simulated hours per run")
    nodes: int = Field(8, ge=1, le=200, description="simulated GPU nodes (even H100, odd A100)")
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per simulated node")
    step_s: float = Field(
        2.0,
        ge=0.25,
        le=30,
        description="simulated seconds between two passes of the scheduler, kubelets and "
        "workload controllers",
    )
    collect_every_s: float = Field(
        60.0, gt=0, le=3600, description="simulated seconds between two agent collections"
    )
    inventory_every_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="simulated seconds between inventory snapshots (and extender view rebuilds)",
    )
    controller_every_s: float = Field(
        60.0, gt=0, le=3600, description="simulated seconds between two controller passes"
    )
    sample_every_s: float = Field(
        30.0, gt=0, le=3600, description="simulated seconds between two allocation samples"
    )
    scheduler_config: Path = Field(
        SCHEDULER_CONFIG, description="KubeSchedulerConfiguration whose extenders sits arms call"
    )
    jobs: int = Field(
        0,
        ge=0,
        le=64,
        description="runs at once, in worker processes (0: one per CPU core, at most one per "
        f"{RUN_MEMORY_GIB} GiB of memory and the number of runs)",
    )
    workdir: Path | None = Field(
        None,
        description="folder to keep each run's DuckDB file and node files in (none: a "
        "temporary folder, removed after each run)",
    )

    _split_arms = field_validator("arms", mode="before")(comma_separated)

    @field_validator("arms")
    @classmethod
    def _known_arms(cls, arms: tuple[str, ...]) -> tuple[str, ...]:
        for name in arms:
            if name not in ARM_DOCS:
                raise ValueError(f"unknown arm {name!r}; valid arms: {', '.join(ARM_DOCS)}")
        if len(set(arms)) != len(arms):
            raise ValueError(f"an arm is named twice in {', '.join(arms)}")
        return arms

    @model_validator(mode="after")
    def _multiples_of_step(self) -> ExperimentSettings:
        for name in (
            "collect_every_s",
            "inventory_every_s",
            "controller_every_s",
            "sample_every_s",
        ):
            value = float(getattr(self, name))
            steps = value / self.step_s
            if steps < 1 - 1e-9 or abs(steps - round(steps)) > 1e-9:
                raise ValueError(f"{name} {value:g} is not a multiple of step_s {self.step_s:g}")
        if not self.scheduler_config.is_file():
            raise ValueError(f"scheduler configuration {self.scheduler_config} not found")
        return self

    @property
    def workers(self) -> int:
        """Runs at once: ``jobs``, or with 0 one per core, memory and run allowing."""
        if self.jobs:
            return self.jobs
        runs = len(self.arms) * self.seeds
        return max(1, min(os.cpu_count() or 1, _memory_gib() // RUN_MEMORY_GIB, runs))

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds, in order."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))

    @property
    def cadence(self) -> Cadence:
        """The parts' intervals."""
        return Cadence(
            step_s=self.step_s,
            collect_every_s=self.collect_every_s,
            inventory_every_s=self.inventory_every_s,
            controller_every_s=self.controller_every_s,
            sample_every_s=self.sample_every_s,
        )
