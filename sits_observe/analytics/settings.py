"""Typed settings of the top-level analyses (noise-isolated baselines, the pod start timeline),
and the units every settings model of ``analytics/`` shares.

Each analysis keeps its settings beside it: ``topology/settings.py`` (interference, GPU links),
``classes/settings.py``, ``serving/settings.py`` (tenants, prices), ``heatmap/settings.py``,
``fragmentation/settings.py`` (SMF, idle GPUs), ``trends/settings.py``. Those modules import
pydantic and nothing of their analyses, so ``serve`` builds its exporter's flags from them before
its port is up without delaying the scheduler extender's first answer (docs/extender.md, cold
start). Every default is a number from ``SPEC.md`` (section named in the field's comment) or
from a vendor datasheet (cited); analytics functions receive the models as arguments and never
read a global.

Units: ``_bytes`` (GiB = 2^30 bytes where the spec says GiB), ``_bytes_per_s`` (GB/s = 10^9
bytes/s, as link and bandwidth figures are quoted decimally), ``_s``, ``_ms``, ``_rps``
(requests/s), ``_per_h``, ``_ratio`` (0-1), ``_tokens``, ``_usd_per_hour``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3
GB_PER_S = 1_000_000_000


class BaselineSettings(BaseModel):
    """Noise isolation for baselines (SPEC "Baselines and noise")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "a 60 s sliding window; a sample further than 2.5 sigma from the window mean is
    # excluded from baselines (and counted)".
    sliding_window_s: float = Field(
        60.0, gt=0, le=86400, description="sliding window a sample is judged against, seconds"
    )
    sigma_k: float = Field(
        2.5, gt=0, le=100, description="samples further than k standard deviations are noise"
    )
    min_window_samples: int = Field(
        5,
        ge=2,
        le=100_000,
        description="fewest earlier samples in the window needed to judge a sample; with fewer "
        "it is kept and counted as unchecked",
    )
    ddof: Literal[0, 1] = Field(
        1, description="delta degrees of freedom of the window standard deviation (1 = sample)"
    )
    sigma_floor: float = Field(
        0.0,
        ge=0,
        description="smallest window standard deviation used, in the metric's unit (0 = the "
        "spec's literal rule: on a flat window any change is noise)",
    )


class TimelineSettings(BaseModel):
    """Pod start timeline references (SPEC "Pod start jitter")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "p95 start 2,140 ms ... before, 480 ms ... after fixes".
    reference_before_p95_s: float = Field(
        2.140, gt=0, description="the documents' P95 pod start before their fixes, seconds"
    )
    reference_after_p95_s: float = Field(
        0.480, gt=0, description="the documents' P95 pod start after their fixes, seconds"
    )
