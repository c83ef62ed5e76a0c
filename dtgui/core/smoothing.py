"""TensorBoard's smoothing of training curves: a debiased exponential moving average, in numpy.

`ema(y, weight)` smooths a whole series; `Ema` keeps the state of one growing series so that a
redraw smooths only the points added since the last one (the dashboard redraws 20 times a
second). Neither loops over points in Python: a block of points is smoothed at once with a
scaled cumulative sum (see `_ema_block`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

MAX_WEIGHT = 0.999
# weight^-k over a block stays below e^EXPONENT_LIMIT: no overflow, and the cumulative sum
# stays exact to float64 rounding relative to the (latest, largest) terms that dominate it
EXPONENT_LIMIT = 300.0


def _block_size(weight: float) -> int:
    return max(1, int(EXPONENT_LIMIT / -math.log(weight)))


@functools.lru_cache(maxsize=8)
def _powers(weight: float) -> tuple[np.ndarray, np.ndarray]:
    """w^k and w^-k over one block (computed once per weight: a frame smooths a few new
    points of many series, and these would otherwise cost more than the smoothing)."""
    k = np.arange(_block_size(weight), dtype=np.float64)
    return np.power(weight, k), np.power(weight, -k)


def _smooth_into(out: np.ndarray, y: np.ndarray, weight: float, state: float,
                 count: int) -> float:
    """Write the debiased average of `y` into `out` (same length), continuing from the biased
    accumulator `state` after `count` points; returns the new accumulator.

    Per block, from the accumulator s before it: b_k = w^(k+1) s + (1-w) sum_j<=k w^(k-j) y_j
    = w^k (w s + (1-w) cumsum(w^-j y_j)); debiased, b_k / (1 - w^(count+k+1))."""
    down, up = _powers(weight)
    step = len(down)
    for start in range(0, len(y), step):
        block = np.asarray(y[start:start + step], dtype=np.float64)
        m = len(block)
        biased = down[:m] * (weight * state + (1.0 - weight) * np.cumsum(up[:m] * block))
        state = float(biased[-1])
        # w^(count+start+1+k) = w^(count+start+1) w^k: once it is below float64's resolution
        # the debiasing divisor is exactly 1
        lead = weight ** (count + start + 1)
        out[start:start + m] = biased if lead < 1e-17 else biased / (1.0 - lead * down[:m])
    return state


def clamp_weight(weight: float) -> float:
    return min(max(float(weight), 0.0), MAX_WEIGHT)


def ema(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing of `y` (weight 0: the points themselves; up to 0.999)."""
    weight = clamp_weight(weight)
    y = np.asarray(y, dtype=np.float64)
    if weight == 0.0 or not len(y):
        return y.copy()
    out = np.empty(len(y), dtype=np.float64)
    _smooth_into(out, y, weight, 0.0, 0)
    return out


class Ema:
    """The smoothed values of one append-only series, extended incrementally.

    `update(x, y)` returns the smoothed y for the whole series. When the series only grew
    (same length prefix: its last previously seen point is unchanged) only the new points are
    smoothed; otherwise (a rewind after a restart, a new weight) everything is smoothed again
    into a new array, so arrays handed out before are never written.
    """

    def __init__(self, weight: float = 0.6) -> None:
        self.weight = clamp_weight(weight)
        self._out = np.empty(0, dtype=np.float64)
        self._n = 0
        self._state = 0.0
        self._last: tuple[float, float] | None = None  # (x, y) of the last point smoothed

    def set_weight(self, weight: float) -> bool:
        """True if the weight changed (the next update smooths everything again)."""
        weight = clamp_weight(weight)
        if weight == self.weight:
            return False
        self.weight = weight
        self._n = 0
        self._last = None
        return True

    def update(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        n = len(y)
        if self.weight == 0.0:
            return np.asarray(y)
        grew = (self._last is not None and n >= self._n
                and (float(x[self._n - 1]), float(y[self._n - 1])) == self._last)
        if not grew:
            self._out = np.empty(max(n, 16), dtype=np.float64)  # views handed out stay intact
            self._n, self._state = 0, 0.0
        if n > len(self._out):
            grown = np.empty(max(n, 2 * len(self._out)), dtype=np.float64)
            grown[: self._n] = self._out[: self._n]
            self._out = grown
        if n > self._n:
            self._state = _smooth_into(self._out[self._n:n], y[self._n:], self.weight,
                                       self._state, self._n)
            self._n = n
        self._last = (float(x[n - 1]), float(y[n - 1])) if n else None
        return self._out[:n]
