"""Safety rules: hysteresis, change threshold, maximum step, hard bounds, and the write rate.

All pure and vectorised (NumPy) except :class:`TokenBucket`, which holds the API request
budget between calls and takes an injectable monotonic clock.

- Hysteresis (a Schmitt trigger per boundary): a level is *entered* when the signal crosses
  the spec's boundary exactly (so "score above 0.65" means what the spec says), and *left*
  only when the signal falls below ``boundary x (1 - hysteresis_ratio)``. Noise smaller than
  that band around a boundary therefore never flips a label back and forth.
- Numeric values: a proposal is moved at most ``max_step_ratio`` away from the current value
  in one write, then clamped to hard ``[min, max]`` bounds (bounds win), and written only when
  the result differs from the current value by at least ``change_threshold_ratio``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def levels(values: FloatArray, boundaries: Sequence[float], inclusive: Sequence[bool]) -> IntArray:
    """Level index of each value: how many boundaries it is above (``>=`` where inclusive).

    NaN (not measured) gives -1.
    """
    out = np.zeros(values.shape, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        for bound, incl in zip(boundaries, inclusive, strict=True):
            out += (values >= bound) if incl else (values > bound)
    out[np.isnan(values)] = -1
    return out


def hysteresis_levels(
    values: FloatArray,
    state: IntArray,
    boundaries: Sequence[float],
    inclusive: Sequence[bool],
    band_ratio: float,
) -> IntArray:
    """Levels with hysteresis around the object's current level ``state`` (-1 = none).

    Up moves use the boundaries exactly; down moves use ``boundary x (1 - band_ratio)`` and
    never go below the exact level. A NaN value keeps the state (-1 when there is none).
    """
    raw = levels(values, boundaries, inclusive)
    lowered = levels(values, [b * (1.0 - band_ratio) for b in boundaries], inclusive)
    down = np.minimum(state, np.maximum(lowered, raw))
    out = np.where((state < 0) | (raw >= state), raw, down)
    return np.where(raw < 0, state, out)


def above_with_hysteresis(
    values: FloatArray, threshold: float, engaged: BoolArray, band_ratio: float
) -> BoolArray:
    """``value > threshold``, or, where ``engaged``, ``value > threshold x (1 - band)``.

    NaN is never above.
    """
    with np.errstate(invalid="ignore"):
        entered = values > threshold
        held = engaged & (values > threshold * (1.0 - band_ratio))
    return np.asarray((entered | held) & ~np.isnan(values), dtype=np.bool_)


def limit_step(proposed: FloatArray, current: FloatArray, max_step_ratio: float) -> FloatArray:
    """``proposed`` moved at most ``max_step_ratio x current`` away from ``current``.

    Where the current value is unknown (NaN) or zero there is no step to scale: unchanged.
    """
    known = ~np.isnan(current) & (current > 0)
    low = current * (1.0 - max_step_ratio)
    high = current * (1.0 + max_step_ratio)
    with np.errstate(invalid="ignore"):
        clipped = np.clip(proposed, np.where(known, low, -np.inf), np.where(known, high, np.inf))
    return np.where(known, clipped, proposed)


def clamp(values: FloatArray, low: FloatArray, high: FloatArray) -> FloatArray:
    """``values`` inside ``[low, high]`` (element-wise bounds)."""
    return np.minimum(np.maximum(values, low), high)


def below_threshold(proposed: FloatArray, current: FloatArray, threshold_ratio: float) -> BoolArray:
    """Where a change from ``current`` to ``proposed`` is too small to be worth a write.

    A relative change below ``threshold_ratio`` is too small; from a current of 0 any change
    counts; an unknown current (NaN) is never below the threshold.
    """
    known = ~np.isnan(current)
    delta = np.abs(proposed - current)
    scale = np.abs(current)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(scale > 0, delta / scale, np.where(delta > 0, np.inf, 0.0))
    return np.asarray(known & (relative < threshold_ratio), dtype=np.bool_)


#: Floating-point slack: a bucket refilled for exactly the time :meth:`TokenBucket.wait_s` said
#: may hold 0.9999999999 tokens, which is one.
_TOKEN_SLACK = 1e-9


class TokenBucket:
    """A budget of API requests: ``rate_per_s`` tokens a second, at most ``burst`` saved up.

    The controller's apply path takes one token per request it sends, retries included
    (:class:`~sits_observe.control.controller.apply.Applier`). ``clock`` is a monotonic clock in
    seconds (injectable for tests). Thread-safe.
    """

    def __init__(
        self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"rate_per_s must be > 0 and burst >= 1, got {rate_per_s}, {burst}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate_per_s)

    def try_take(self) -> bool:
        """Take one token if one is available (never waits)."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0 - _TOKEN_SLACK:
                self._tokens -= 1.0
                return True
            return False

    def has(self, tokens: int) -> bool:
        """Whether ``tokens`` (capped at ``burst``: a full bucket has all it can) are available
        now; takes none."""
        with self._lock:
            self._refill()
            return self._tokens >= min(tokens, self.burst) - _TOKEN_SLACK

    def wait_s(self) -> float:
        """Seconds until one token is available; 0 when one is now."""
        with self._lock:
            self._refill()
            return max(0.0, (1.0 - self._tokens) / self.rate_per_s)

    @property
    def available(self) -> float:
        """Tokens available now."""
        with self._lock:
            self._refill()
            return self._tokens
