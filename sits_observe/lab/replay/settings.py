"""What ``sits-observe simulate`` replays besides the replay's own settings: the policies,
the workload variant, the seeds and the worker processes.

The replay's settings (load, tie-break, memory filter, coverage) are
:class:`~sits_observe.lab.replay.engine.replay.SimulationSettings`, shared with the ``whatif``
report; these are the command's. Kept apart from the CLI so its flags, defaults and help
come from one model (:mod:`sits_observe.surfaces.cli.flags`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.traces.variants import STUDY_VARIANTS
from sits_observe.lab.replay.extender import all_policy_names


class SimulateRunSettings(BaseModel):
    """Which policies ``simulate`` replays, on which workload, over which seeds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = Field(
        "all", min_length=1, description=f"one of {', '.join(all_policy_names())}, or all"
    )
    workload: str = Field(
        "default",
        min_length=1,
        description="default (the pod list as given) or a variant generated from it: "
        f"cpu<P>, gpushare<P>, gpuspec<P>, multigpu<P> (the study's: {', '.join(STUDY_VARIANTS)})",
    )
    seeds: int = Field(10, ge=1, le=1000, description="replays per policy")
    seed_base: int = Field(
        0, ge=0, description="first seed (seeds are seed-base .. seed-base+seeds-1)"
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=64,
        description="processes running the replays (none: 2, or 1 on a one-core machine)",
    )

    @property
    def seed_list(self) -> list[int]:
        """The seeds, in order."""
        return list(range(self.seed_base, self.seed_base + self.seeds))
