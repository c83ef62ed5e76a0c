"""TensorBoard's smoothing of training curves: a debiased exponential moving average, in numpy.

`ema(y, weight)` smooths a whole series; `Ema` keeps the state of one growing series so that a
redraw smooths only the points added since the last one (the dashboard redraws 20 times a
second). Neither loops over points in Python: blocks of points are smoothed at once with
scaled cumulative sums (see `_smooth_finite_into`), ~10 ms for a million points. A NaN or
infinite point is drawn as it is and skipped by the average, as TensorBoard does.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

MAX_WEIGHT = 0.999
# weight^-k over a block stays below e^EXPONENT_LIMIT: no overflow, and the cumulative sum
# stays exact to float64 rounding relative to the (latest, largest) terms that dominate it
EXPONENT_LIMIT = 300.0


def _block_size(weight: float) -> int:
    return max(1, int(EXPONENT_LIMIT / -math.log(weight)))


class _Powers(NamedTuple):
    down: np.ndarray  # w^k over one block
    up: np.ndarray  # (1-w) w^-k over one block
    biased: int  # points after which w^count is below float64's resolution: no debiasing


@functools.lru_cache(maxsize=8)
def _powers(weight: float) -> _Powers:
    """Computed once per weight: a frame smooths a few new points of many series, and these
    would otherwise cost more than the smoothing."""
    k = np.arange(_block_size(weight), dtype=np.float64)
    return _Powers(np.power(weight, k), (1.0 - weight) * np.power(weight, -k),
                   math.ceil(math.log(1e-17) / math.log(weight)))


def _smooth_finite_into(out: np.ndarray, y: np.ndarray, weight: float, state: float,
                        count: int) -> float:
    """Write the debiased average of the finite `y` into `out` (same length), continuing from
    the biased accumulator `state` after `count` points; returns the new accumulator.

    The points are cut into blocks of m (a row each of an (blocks, m) matrix). Within a block,
    from the accumulator s before it: b_k = w^(k+1) s + (1-w) sum_j<=k w^(k-j) y_j
    = w^k (w s + cumsum((1-w) w^-j y_j)_k): the cumulative sums of every block at once, then
    the accumulators entering each block (a short loop over blocks), then their terms.
    Debiased: b_i / (1 - w^(count+i+1))."""
    n = len(y)
    if n == 0:
        return state
    down, up, biased = _powers(weight)
    if n <= len(down):  # one block (a frame's new points): the fewest numpy calls
        block = np.multiply(y, up[:n])
        np.cumsum(block, out=block)
        block += weight * state
        np.multiply(block, down[:n], out=out)
    else:
        m = len(down)
        rows = -(-n // m)
        # in place, a pass each: this runs over every point of every series on Open
        blocks = np.empty((rows, m), dtype=np.float64)
        flat = blocks.reshape(-1)
        flat[:n] = y
        flat[n:] = 0.0
        blocks *= up
        np.cumsum(blocks, axis=1, out=blocks)
        # the accumulators entering each block, from each block's end
        carry, last = weight * down[m - 1], down[m - 1]
        entering = np.empty(rows, dtype=np.float64)
        for row, end in enumerate(blocks[:, -1].tolist()):
            entering[row] = state
            state = carry * state + last * end
        blocks += (weight * entering)[:, None]
        blocks *= down
        out[:] = flat[:n]
    state = float(out[n - 1])  # the biased accumulator after the last point
    biased_points = min(n, biased - count)
    if biased_points > 0:
        out[:biased_points] /= 1.0 - weight ** (count + 1 + np.arange(biased_points))
    return state


def _smooth_into(out: np.ndarray, y: np.ndarray, weight: float, state: float,
                 count: int) -> tuple[float, int]:
    """`_smooth_finite_into`, where a NaN or infinite point is shown as it is and left out of
    the average (as TensorBoard does: one bad step does not blank the rest of the curve).
    Returns the accumulator and the count of finite points."""
    smoothed_state = _smooth_finite_into(out, y, weight, state, count)
    # A NaN or infinity reaches every later sum: a finite last accumulator means all were.
    if math.isfinite(smoothed_state):
        return smoothed_state, count + len(y)
    y = np.asarray(y, dtype=np.float64)
    finite = np.isfinite(y)
    good = y[finite]
    smoothed = np.empty(len(good), dtype=np.float64)
    state = _smooth_finite_into(smoothed, good, weight, state, count)
    out[:] = y
    out[finite] = smoothed
    return state, count + len(good)


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


def _same_point(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Equal, a NaN equal to a NaN (a NaN loss is still the same last point)."""
    return all(p == q or (p != p and q != q) for p, q in zip(a, b, strict=True))


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
        self._finite = 0  # finite points among the first _n (the debiasing counts them)
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
                and _same_point((float(x[self._n - 1]), float(y[self._n - 1])), self._last))
        if not grew:
            self._out = np.empty(max(n, 16), dtype=np.float64)  # views handed out stay intact
            self._n, self._state, self._finite = 0, 0.0, 0
        if n > len(self._out):
            grown = np.empty(max(n, 2 * len(self._out)), dtype=np.float64)
            grown[: self._n] = self._out[: self._n]
            self._out = grown
        if n > self._n:
            self._state, self._finite = _smooth_into(self._out[self._n:n], y[self._n:n],
                                                     self.weight, self._state, self._finite)
            self._n = n
        self._last = (float(x[n - 1]), float(y[n - 1])) if n else None
        return self._out[:n]
