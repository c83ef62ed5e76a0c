"""Append-only (x, y) series and curves by step: what the reducer fills and the views read.

A `Series` grows geometrically in numpy arrays and hands out views of its filled part that are
never written afterwards, so a reader on another thread (the UI's snapshot) copies nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

K = TypeVar("K")


class Series:
    """An append-only (x, y) series backed by numpy arrays that grow geometrically.

    Views handed out (`view`) are never written under the holder: appends go past their end
    and a growth or a rewind (`keep_up_to`) moves to new arrays. float32 halves the memory
    of long loss curves (the training program computes them in float32).
    """

    def __init__(self, capacity: int = 1024, dtype: type = np.float64) -> None:
        self._x: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self._y: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self.size = 0

    def reserve(self, capacity: int) -> None:
        """Room for `capacity` points in all (untouched memory costs nothing until written)."""
        if capacity > len(self._x):
            self._grow(capacity)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * len(self._x))
        x = np.empty(capacity, dtype=self._x.dtype)
        y = np.empty(capacity, dtype=self._y.dtype)
        x[: self.size] = self._x[: self.size]
        y[: self.size] = self._y[: self.size]
        self._x, self._y = x, y

    def append(self, x: float, y: float) -> None:
        if self.size == len(self._x):
            self._grow(self.size + 1)
        self._x[self.size] = x
        self._y[self.size] = y
        self.size += 1

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        n = len(xs)
        if n == 0:
            return
        if self.size + n > len(self._x):
            self._grow(self.size + n)
        self._x[self.size: self.size + n] = xs
        self._y[self.size: self.size + n] = ys
        self.size += n

    def keep_up_to(self, x: float, *, inclusive: bool = True) -> None:
        """Drop the points after `x` (at and after it when not `inclusive`; x grows along
        the series), in new arrays so that the views already handed out keep their points."""
        keep = int(np.searchsorted(self._x[: self.size], x, side="right" if inclusive else "left"))
        if keep < self.size:
            self._x, self._y = self._x.copy(), self._y.copy()
            self.size = keep

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[: self.size], self._y[: self.size]

    @property
    def last(self) -> float | None:
        return float(self._y[self.size - 1]) if self.size else None

    @property
    def last_x(self) -> float | None:
        return float(self._x[self.size - 1]) if self.size else None


def series_of(series: dict[K, Series], key: K) -> Series:
    """series[key], made empty the first time (without building one each call)."""
    found = series.get(key)
    if found is None:
        found = series[key] = Series()
    return found


def no_values() -> np.ndarray:
    return np.empty(0, dtype=np.float64)


@dataclass
class Curve:
    """A curve by step, with the wall time of each point (seconds since the run's first
    event)."""

    steps: np.ndarray = field(default_factory=no_values)
    values: np.ndarray = field(default_factory=no_values)
    seconds: np.ndarray = field(default_factory=no_values)

    def __len__(self) -> int:
        return len(self.steps)
