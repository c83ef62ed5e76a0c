"""Feeding series to pyqtgraph fast: curves created once, long series drawn as envelopes.

Every series has one `PlotDataItem`, created on first sight and then fed with `setData`, with
automatic "peak" downsampling, clip-to-view, no finite check and no antialiasing. A series
that did not grow since the last frame is not touched; a hidden one is fed when shown again.

While its plot follows the whole run, a long series (more than ENVELOPE_MIN_POINTS points) is
drawn instead as its min/max `Envelope`: one vertical min..max stroke per block of steps,
which is what "peak" downsampling draws, but kept up to date incrementally (only the last
block is recomputed per frame), and the envelopes of all the long series of a plot are drawn
by a single `EnvelopeLayer` item (one bounds update and one paint call per frame rather than
one per series). A frame therefore costs about the same at 100k steps as at 5k. Once the user
zooms in, the raw series go back to their PlotDataItems (pyqtgraph then clips them to the
view and downsamples only the visible part).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Generic

import numpy as np
import pyqtgraph as pg
from pyqtgraph.graphicsItems.LegendItem import ItemSample
from PySide6.QtGui import QColor, QPainter

from dtgui.ui.plots.envelope_layer import EnvelopeLayer, K, band, zigzag

XY = tuple[np.ndarray, np.ndarray]
AUTO_DOWNSAMPLE_FACTOR = 2.0  # pyqtgraph's auto downsampling: ~2 "peak" buckets per pixel
ENVELOPE_MIN_POINTS = 4096  # longer series are drawn as their envelope while following
# A plot with more series than this draws every series through its envelope layer while
# following, short ones too: one graphics item instead of one per series (pyqtgraph's
# per-item work on every data and view change adds up to tens of ms a frame at 100+).
MANY_SERIES = 16
# An envelope has between BLOCKS_PER_PIXEL/2 and BLOCKS_PER_PIXEL blocks per pixel of the
# plot's width: blocks at most 1.6 px apart (further apart, the strokes show gaps), and no
# more vertices than that (painting time grows with them).
BLOCKS_PER_PIXEL = 1.25
DEFAULT_WIDTH_PX = 1200
# A frame feeds grown series for at most this long per plot; the rest are fed first at the
# next tick (a run with 100+ replicas refreshes its curves over a few ticks, and every tick
# stays short enough for a 60 Hz paint and a responsive window).
FEED_BUDGET_SECONDS = 0.004
_EMPTY = np.empty(0)


def make_curve(colour: QColor, name: str, gaps: bool = False) -> pg.PlotDataItem:
    """`gaps`: its series may hold NaN points where nothing was measured, drawn as gaps."""
    item = pg.PlotDataItem(name=name, pen=pg.mkPen(colour, width=1), antialias=False,
                           skipFiniteCheck=not gaps, connect="finite" if gaps else "all")
    item.setDownsampling(auto=True, method="peak")
    item.setClipToView(True)
    # pyqtgraph's default (5 buckets per pixel, 10 vertices per pixel column) costs 2.5x more
    # to compute and to draw for no visible difference with "peak".
    item.opts["autoDownsampleFactor"] = AUTO_DOWNSAMPLE_FACTOR
    return item


class LineSample(ItemSample):
    """Legend sample: a 2 px line in the series' colour (pyqtgraph's crossed-out eye when
    hidden); a click shows/hides the series."""

    def paint(self, p: QPainter, *args: object) -> None:
        if not self.item.isVisible():
            super().paint(p, *args)
            return
        p.setPen(pg.mkPen(self.item.opts["pen"].color(), width=2))
        p.drawLine(2, 11, 18, 11)


def _fingerprint(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    return (len(x), float(x[-1]), float(y[-1])) if len(x) else (0,)


class Envelope:
    """Min and max of each block of an append-only (x, y) series, updated incrementally.

    `update(x, y)` returns `(bx, top, bottom)`: per block its first x, max and min, then the
    partial last block, then the exact last point (a block of its own). Complete blocks are
    computed once; only the partial block is recomputed per call. There are between
    `max_blocks / 2` and `max_blocks` blocks: when there would be more, neighbours are merged
    (the block size doubles). The arrays returned are views of buffers the next update
    writes: read them (or copy them) before.
    """

    def __init__(self, max_blocks: int = int(DEFAULT_WIDTH_PX * BLOCKS_PER_PIXEL)) -> None:
        self.max_blocks = max_blocks
        # complete blocks, then the partial one and the last point
        self._buffers = np.empty((3, max_blocks + 2))
        self.reset()

    def reset(self) -> None:
        self.block = 0
        self.done = 0  # complete blocks at the start of the buffers

    @property
    def bx(self) -> np.ndarray:
        return self._buffers[0, : self.done]

    @property
    def bmax(self) -> np.ndarray:
        return self._buffers[1, : self.done]

    @property
    def bmin(self) -> np.ndarray:
        return self._buffers[2, : self.done]

    def update(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(x)
        if n == 0:
            self.reset()
            return x, y, y
        if self.block == 0 or n < self.done * self.block:
            self.reset()
            self.block = 1 << max(0, int(np.ceil(np.log2(n / self.max_blocks))))
        while n // self.block > self.max_blocks:
            self._merge()
        b = self.block
        full = n // b
        bx, top, bottom = self._buffers
        if full > self.done:
            seg = slice(self.done * b, full * b)
            blocks = y[seg].reshape(-1, b)
            blocks.max(axis=1, out=top[self.done: full])
            blocks.min(axis=1, out=bottom[self.done: full])
            bx[self.done: full] = x[seg][::b]
            self.done = full
        end = full
        if n - full * b > 1:  # the partial block
            tail = y[full * b:]
            bx[end], top[end], bottom[end] = x[full * b], tail.max(), tail.min()
            end += 1
        bx[end] = x[-1]
        top[end] = bottom[end] = y[-1]
        return bx[: end + 1], top[: end + 1], bottom[: end + 1]

    def _merge(self) -> None:
        pairs = self.done // 2
        bx, top, bottom = self._buffers
        np.maximum(top[0:2 * pairs:2], top[1:2 * pairs:2], out=top[:pairs])
        np.minimum(bottom[0:2 * pairs:2], bottom[1:2 * pairs:2], out=bottom[:pairs])
        bx[:pairs] = bx[0:2 * pairs:2]
        self.done = pairs  # an odd last block becomes part of the partial tail again
        self.block *= 2


class CurveSet(Generic[K]):
    """The curves of one plot, keyed by series name.

    With `layer_only`, every series is drawn by the envelope layer while following, short
    ones too (as a line through its points): a PlotDataItem's setData costs ~0.5 ms of
    pyqtgraph's own work, and the dashboard's plain curves change on every frame. Curves with
    symbols or dashes (validation) are PlotDataItems."""

    def __init__(self, target: pg.PlotItem,
                 factory: Callable[[K, int], pg.PlotDataItem],
                 layer_only: bool = False) -> None:
        self._target = target
        self._factory = factory
        self.layer_only = layer_only
        self.curves: dict[K, pg.PlotDataItem] = {}
        self.raw: dict[K, XY] = {}  # the latest full series of every curve
        # Applied to a series when it is fed (the loss panel's smoothing): only the series a
        # frame feeds are transformed, within its budget.
        self.transform: Callable[[K, np.ndarray, np.ndarray], np.ndarray] | None = None
        self.drawn: dict[K, XY] = {}  # what was last fed: the series, transformed
        self.last: dict[K, float] = {}  # latest y of every series, shown or not
        self.layer = EnvelopeLayer[K](self.curves)
        target.getViewBox().addItem(self.layer)
        # length and last point fed: a series rewound (a restart from a checkpoint) and grown
        # back to the same length between two frames still differs in its last point
        self._fed_len: dict[K, tuple[float, ...]] = {}
        self._pending: set[K] = set()  # hidden: fed when shown again
        self._in_plot: set[K] = set()  # curves drawing their series themselves
        self._due: dict[K, None] = {}  # grown and visible, not fed yet (oldest first)
        self._envelopes: dict[K, Envelope] = {}
        self._extent: dict[K, tuple[int, float, float]] = {}  # seen length, min, max
        self._layer_dirty = False
        self._max_blocks = int(DEFAULT_WIDTH_PX * BLOCKS_PER_PIXEL)
        self._filled = False  # envelopes drawn as filled bands (blocks a few pixels apart)
        self.use_envelope = True

    def update(self, data: Mapping[K, XY]) -> list[K]:
        """Feed the series that grew (within FEED_BUDGET_SECONDS: see `backlog`); returns
        the keys whose curve was created now."""
        new = []
        for key, (x, y) in data.items():
            curve = self.curves.get(key)
            if curve is None:
                # in the plot only while it draws its series itself (see `_feed`)
                curve = self._factory(key, len(self.curves))
                self.curves[key] = curve
                new.append(key)
            if len(y):
                self.last[key] = float(y[-1])
            if key in self.raw and self._fed_len.get(key) == _fingerprint(x, y):
                continue
            self.raw[key] = (x, y)
            if curve.isVisible():
                self._due.setdefault(key, None)
            else:
                self._pending.add(key)
        began = time.perf_counter()  # the budget is for feeding (creating curves is once)
        if self._fit_blocks_to_width():  # the width, or the number of series, changed
            for key, curve in self.curves.items():
                if key in self.layer.paths and key in self.raw:
                    if curve.isVisible():
                        self._due.setdefault(key, None)
                    else:
                        self._pending.add(key)
        self.feed_due(began)
        return new

    @property
    def backlog(self) -> bool:
        """Series that grew but were not fed yet (the last frame's budget ran out)."""
        return bool(self._due)

    def feed_due(self, began: float | None = None) -> None:
        """Feed the series due, oldest first, until the frame's budget is spent (at least
        one, so every frame makes progress)."""
        began = time.perf_counter() if began is None else began
        for key in list(self._due):
            del self._due[key]
            if key not in self.raw:
                continue
            if not self.curves[key].isVisible():
                self._pending.add(key)  # hidden meanwhile: fed when shown again
                continue
            self._feed(key)
            if time.perf_counter() - began > FEED_BUDGET_SECONDS:
                break
        if not self._due:  # the layer is painted once all its series are fed
            self._commit()

    def _fit_blocks_to_width(self) -> bool:
        """Size the envelopes for the plot's width; True if that changed them. Painting
        costs by the vertex: past MANY_SERIES series, each gets fewer blocks, so that all of
        them together have as many vertices as MANY_SERIES would (a block every few pixels,
        drawn as a filled band: the envelope still shows every spike)."""
        width = self._target.getViewBox().width()
        share = min(1.0, MANY_SERIES / max(1, len(self.curves)))
        self._filled = share < 1.0
        wanted = int(max(width if width > 50 else DEFAULT_WIDTH_PX, 200) * BLOCKS_PER_PIXEL
                     * share)
        if abs(wanted - self._max_blocks) <= self._max_blocks // 4:
            return False
        self._max_blocks = wanted
        self._envelopes.clear()
        return True

    def redo_all(self) -> None:
        """After the transform changed: every series is fed again (within the budget)."""
        self._envelopes.clear()
        self._extent.clear()
        self._fed_len.clear()
        for key, curve in self.curves.items():
            if key in self.raw:
                if curve.isVisible():
                    self._due.setdefault(key, None)
                else:
                    self._pending.add(key)
        self.feed_due()

    def refit(self) -> None:
        """After the plot was resized: envelopes with as many blocks as it now has pixels."""
        if self._fit_blocks_to_width():
            for key, curve in self.curves.items():
                if key in self.layer.paths:
                    if curve.isVisible():
                        self._feed(key)
                    else:
                        self._pending.add(key)
            self._commit()

    def shown_data(self, key: K) -> XY:
        """What is drawn for a series now: its envelope's vertices, or the curve's data."""
        if key in self.layer.paths:
            envelope = self._envelopes[key]
            blocks = envelope.update(*self.drawn[key])
            if envelope.block == 1:  # a line through the points themselves
                return self.drawn[key]
            return (band if key in self.layer.filled else zigzag)(*blocks)
        x, y = self.curves[key].getOriginalDataset()
        return (x, y) if x is not None and y is not None else (_EMPTY, _EMPTY)

    def _grow_extent(self, key: K, y: np.ndarray) -> None:
        seen, lo, hi = self._extent.get(key, (0, np.inf, -np.inf))
        if len(y) < seen:  # a new series under the same name
            seen, lo, hi = 0, np.inf, -np.inf
        if len(y) > seen:
            new = y[seen:]
            new = new[np.isfinite(new)]  # a gap's NaN
            if len(new):
                lo, hi = min(lo, float(new.min())), max(hi, float(new.max()))
            self._extent[key] = (len(y), lo, hi)

    def y_extent(self) -> tuple[float, float] | None:
        """Min and max y of the visible series (all their points)."""
        spans = [self._extent[k] for k, c in self.curves.items()
                 if k in self._extent and c.isVisible()]
        if not spans:
            return None
        return min(s[1] for s in spans), max(s[2] for s in spans)

    def _feed(self, key: K) -> None:
        x, y = self.raw[key]
        self._fed_len[key] = _fingerprint(x, y)
        if self.transform is not None:
            y = self.transform(key, x, y)
        self.drawn[key] = (x, y)
        if len(y):
            self._grow_extent(key, y)
        self._pending.discard(key)
        self._due.pop(key, None)
        curve = self.curves[key]
        if self.use_envelope and (self.layer_only or len(x) > ENVELOPE_MIN_POINTS
                                  or len(self.curves) > MANY_SERIES):
            envelope = self._envelopes.get(key)
            if envelope is None:
                envelope = self._envelopes[key] = Envelope(self._max_blocks)
            blocks = envelope.update(x, y)
            if key in self._in_plot:
                # The layer draws this series now; its curve leaves the plot, keeping only its
                # pen, name and visibility: three Python graphics items (the curve, its line
                # and its scatter) that the view would otherwise call back on every range
                # change and paint, for each of 100+ series.
                self._in_plot.discard(key)
                curve.setData(_EMPTY, _EMPTY)
                self._target.removeItem(curve)
            extent = self._extent.get(key)
            self.layer.set_series(key, *blocks, extent[1:] if extent is not None else None,
                                  filled=self._filled)
            self._layer_dirty = True
        else:
            if key in self.layer.paths:
                self.layer.remove(key)
                self._layer_dirty = True
            if key not in self._in_plot:
                self._in_plot.add(key)
                self._target.addItem(curve)
            curve.setData(x, y)

    def _commit(self) -> None:
        if self._layer_dirty:
            self._layer_dirty = False
            self.layer.commit()

    def flush(self, key: K) -> None:
        """After a curve was shown or hidden: give it the data it missed; redraw the layer."""
        if key in self._pending and key in self.raw:
            self._feed(key)
        if key in self.layer.paths:
            self._layer_dirty = True
        self._commit()

    def set_use_envelope(self, on: bool) -> None:
        """Envelopes while following the whole run; raw data once the user zooms in."""
        if on == self.use_envelope:
            return
        self.use_envelope = on
        for key, curve in self.curves.items():
            if key not in self.raw:
                continue
            if curve.isVisible():
                self._feed(key)
            else:
                self._pending.add(key)
        self._commit()

    def clear(self) -> None:
        for key in self._in_plot:
            self._target.removeItem(self.curves[key])
        self._in_plot.clear()
        for key in list(self.layer.paths):
            self.layer.remove(key)
        self.layer.commit()
        self.curves.clear()
        self.raw.clear()
        self.drawn.clear()
        self.last.clear()
        self._fed_len.clear()
        self._pending.clear()
        self._due.clear()
        self._envelopes.clear()
        self._extent.clear()
