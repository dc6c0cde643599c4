"""FGD's node score, as kube-scheduler's ``FGDScore`` plugin computes it (Weng et al., USENIX
ATC 2023; hkust-adsl/kubernetes-scheduler-simulator ``pkg/simulator/plugin/fgd_score.go``).

The extender scores nodes with it in production and the lab's replay runs the same function
for its ``fgd`` policy, so a replay measures the shipped rule.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: kube-scheduler's ``MaxNodeScore``.
MAX_NODE_SCORE = 100


def fgd_score(delta_milli: FloatArray) -> IntArray:
    """``FGDScore``: int(100 x sigmoid(-delta / 1000)); delta rounded to 1e-6 milli first so
    that float noise never moves a zero delta off 50."""
    # Clipped: sigmoid is 0 or 1 to double precision well before |x| = 60, and exp stays finite.
    x = np.clip(-np.round(delta_milli, 6) / 1000.0, -60.0, 60.0)
    return truncate(MAX_NODE_SCORE / (1.0 + np.exp(-x)))


def truncate(values: FloatArray) -> IntArray:
    """Go's ``int64(x)`` for the non-negative scores here (toward zero)."""
    return np.trunc(values).astype(np.int64)
