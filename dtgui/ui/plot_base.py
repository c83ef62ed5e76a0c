"""Building blocks of the dashboard's plots: theme, colours, cards, and fast curve feeding.

Every curve is created once and then fed with `setData` (never re-created per frame), with
automatic "peak" downsampling, clip-to-view, no finite check and no antialiasing. A curve
whose series did not grow since the last frame is not touched; a hidden curve is only fed when
it is shown again. While a plot follows the whole run (x auto-range), a long series is fed as
its min/max `Envelope`, which is kept up to date incrementally, so a frame costs the same at
100k steps as at 5k; once the user zooms in, the raw series is fed (pyqtgraph then clips it to
the view and downsamples only the visible part). While following, the x range grows in
steps (with headroom) rather than on every step, so axes are not re-laid out on every frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from pyqtgraph.graphicsItems.LegendItem import ItemSample
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

XY = tuple[np.ndarray, np.ndarray]

# Tableau 10 then its darker/lighter companions: distinct on light and dark backgrounds.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
    "#e6550d", "#31a354", "#756bb1", "#636363",
)
AUTO_DOWNSAMPLE_FACTOR = 2.0  # pyqtgraph's auto downsampling: ~2 "peak" buckets per pixel
ENVELOPE_MIN_POINTS = 4096  # longer series are fed as their min/max envelope when following
ENVELOPE_MAX_BLOCKS = 2048  # the envelope has 1024..2048 blocks (2 vertices each)
FOLLOW_HEADROOM = 0.08  # while following a run, the x range ends this fraction past the data


def series_colour(index: int) -> QColor:
    if index < len(PALETTE):
        return QColor(PALETTE[index])
    return pg.intColor(index, hues=17, values=2)


@dataclass(frozen=True)
class PlotTheme:
    background: str
    text: str
    axis: str
    legend_fill: str
    legend_border: str
    grid_alpha: float = 0.18


LIGHT = PlotTheme("#ffffff", "#3c4043", "#9aa0a6", "#ffffffd8", "#dadce0")
DARK = PlotTheme("#1b1d21", "#c9ccd1", "#6b7078", "#1b1d21d8", "#3c4047")


def swatch_icon(colour: QColor) -> QIcon:
    pix = QPixmap(14, 14)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    pen = QPen(colour, 3)
    painter.setPen(pen)
    painter.drawLine(1, 7, 13, 7)
    painter.end()
    return QIcon(pix)


def swatch_html(colour: QColor, text: str) -> str:
    return f'<span style="color:{colour.name()}">&#9632;</span>&nbsp;{text}'


class ElapsedAxis(pg.AxisItem):
    """Seconds since the start shown as m:ss (or h:mm:ss)."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [format_elapsed(v) if v >= 0 else "" for v in values]


def format_elapsed(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def make_curve(colour: QColor, name: str) -> pg.PlotDataItem:
    item = pg.PlotDataItem(name=name, pen=pg.mkPen(colour, width=1), antialias=False,
                           skipFiniteCheck=True)
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


def zigzag(bx: np.ndarray, top: np.ndarray, bottom: np.ndarray) -> XY:
    """Envelope blocks as the vertices pyqtgraph's "peak" downsampling draws:
    (x0, max0), (x0, min0), (x1, max1), ..."""
    vx = np.repeat(bx, 2)
    vy = np.empty(len(vx))
    vy[0::2] = top
    vy[1::2] = bottom
    return vx, vy


class Envelope:
    """Min and max of each block of an append-only (x, y) series, updated incrementally.

    `update(x, y)` returns `(bx, top, bottom)`: per block its first x, max and min, then the
    partial last block, then the exact last point (a block of its own). Complete blocks are
    computed once; only the partial block is recomputed per call. When there would be more
    than `max_blocks` blocks, neighbours are merged (the block size doubles).
    """

    def __init__(self, max_blocks: int = ENVELOPE_MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self.reset()

    def reset(self) -> None:
        self.block = 0
        self.done = 0  # complete blocks in bx/bmax/bmin
        self.bx = np.empty(0)
        self.bmax = np.empty(0)
        self.bmin = np.empty(0)

    def update(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(x)
        if n == 0:
            self.reset()
            return x, y, y
        if self.block == 0 or n < self.done * self.block:
            self.reset()
            self.block = 1 << max(0, int(np.ceil(np.log2(2 * n / self.max_blocks))))
        while n // self.block > self.max_blocks:
            self._merge()
        b = self.block
        full = n // b
        if full > self.done:
            seg = slice(self.done * b, full * b)
            blocks = y[seg].reshape(-1, b)
            self.bmax = np.concatenate([self.bmax[: self.done], blocks.max(axis=1)])
            self.bmin = np.concatenate([self.bmin[: self.done], blocks.min(axis=1)])
            self.bx = np.concatenate([self.bx[: self.done], x[seg][::b]])
            self.done = full
        tail = y[full * b:]
        extra_x, extra_top, extra_bottom = [float(x[-1])], [float(y[-1])], [float(y[-1])]
        if len(tail) > 1:
            extra_x.insert(0, float(x[full * b]))
            extra_top.insert(0, float(tail.max()))
            extra_bottom.insert(0, float(tail.min()))
        return (np.concatenate([self.bx, extra_x]), np.concatenate([self.bmax, extra_top]),
                np.concatenate([self.bmin, extra_bottom]))

    def _merge(self) -> None:
        pairs = self.done // 2
        self.bmax = np.maximum(self.bmax[0:2 * pairs:2], self.bmax[1:2 * pairs:2])
        self.bmin = np.minimum(self.bmin[0:2 * pairs:2], self.bmin[1:2 * pairs:2])
        self.bx = self.bx[0:2 * pairs:2].copy()
        self.done = pairs  # an odd last block becomes part of the partial tail again
        self.block *= 2


class CurveSet:
    """Curves keyed by series name, created on first sight, then fed with `setData`."""

    def __init__(self, target: pg.PlotItem | pg.ViewBox,
                 factory: Callable[[object, int], pg.PlotDataItem]) -> None:
        self._target = target
        self._factory = factory
        self.curves: dict[object, pg.PlotDataItem] = {}
        self.raw: dict[object, XY] = {}  # the latest full series of every curve
        self.last: dict[object, float] = {}  # latest y of every series, shown or not
        self._fed_len: dict[object, int] = {}
        self._pending: set[object] = set()
        self._envelopes: dict[object, Envelope] = {}
        self.use_envelope = True

    def update(self, data: Mapping[object, XY]) -> list[object]:
        """Feed every series that grew; returns the keys whose curve was created now."""
        new = []
        for key, (x, y) in data.items():
            curve = self.curves.get(key)
            if curve is None:
                curve = self._factory(key, len(self.curves))
                self.curves[key] = curve
                self._target.addItem(curve)
                new.append(key)
            if len(y):
                self.last[key] = float(y[-1])
            if self._fed_len.get(key) == len(x) and key in self.raw:
                continue
            self.raw[key] = (x, y)
            if curve.isVisible():
                self._feed(key)
            else:
                self._pending.add(key)
        return new

    def _feed(self, key: object) -> None:
        x, y = self.raw[key]
        self._fed_len[key] = len(x)
        self._pending.discard(key)
        if self.use_envelope and len(x) > ENVELOPE_MIN_POINTS:
            x, y = zigzag(*self._envelopes.setdefault(key, Envelope()).update(x, y))
        self.curves[key].setData(x, y)

    def flush(self, key: object) -> None:
        """Give a curve that was hidden the data it missed."""
        if key in self._pending and key in self.raw:
            self._feed(key)

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

    def clear(self) -> None:
        for curve in self.curves.values():
            self._target.removeItem(curve)
        self.curves.clear()
        self.raw.clear()
        self.last.clear()
        self._fed_len.clear()
        self._pending.clear()
        self._envelopes.clear()


class ZeroAnchor:
    """An invisible point at y=0 so that a view's auto-range always includes zero."""

    def __init__(self, target: pg.ViewBox) -> None:
        self.item = pg.PlotCurveItem(pen=pg.mkPen(None))
        target.addItem(self.item)
        self.placed = False

    def place(self, data: Mapping[object, XY]) -> None:
        if self.placed:
            return
        for x, _y in data.values():
            if len(x):
                self.item.setData([float(x[0])], [0.0])
                self.placed = True
                return

    def clear(self) -> None:
        self.item.setData([], [])
        self.placed = False


def make_card(panel: str, parent: QWidget | None = None) -> QFrame:
    """A white card (objectName "card", as in resources/style.qss); `panel` names it for QSS
    (`QFrame#card[panel="loss"]`). Without a style sheet it still fills with the Base colour."""
    card = QFrame(parent)
    card.setObjectName("card")
    card.setProperty("panel", panel)
    card.setFrameShape(QFrame.Shape.StyledPanel)
    card.setBackgroundRole(QPalette.ColorRole.Base)
    card.setAutoFillBackground(True)
    return card


def title_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("panelTitle")
    font = label.font()
    font.setBold(True)
    label.setFont(font)
    return label


class PlotPanel(QFrame):
    """A titled card: a header row (title, live readout, tools) above a pyqtgraph plot."""

    def __init__(self, title: str, theme: PlotTheme, panel: str,
                 bottom_axis: pg.AxisItem | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setProperty("panel", panel)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setBackgroundRole(QPalette.ColorRole.Base)
        self.setAutoFillBackground(True)
        self.theme = theme
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 8, 4)
        layout.setSpacing(2)
        header_row = QWidget()
        header_row.setFixedHeight(28)
        self.header = QHBoxLayout(header_row)
        self.header.setContentsMargins(0, 0, 0, 0)
        self.header.setSpacing(10)
        self.title_label = title_label(title)
        self.readout = QLabel("")
        self.readout.setObjectName("panelReadout")
        self.readout.setTextFormat(Qt.TextFormat.RichText)
        # The readout may be clipped in a narrow panel rather than widen it.
        self.readout.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.readout.setMinimumWidth(40)
        self.header.addWidget(self.title_label)
        self.header.addWidget(self.readout, 1)
        layout.addWidget(header_row)
        axes = {"bottom": bottom_axis} if bottom_axis is not None else None
        self.plot_widget = pg.PlotWidget(background=theme.background, axisItems=axes)
        self.plot_widget.setObjectName(panel + "Plot")
        self.plot_widget.setAntialiasing(False)
        self.plot_widget.setFrameShape(QFrame.Shape.NoFrame)
        layout.addWidget(self.plot_widget, 1)
        self.plot: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot.setDownsampling(auto=True, mode="peak")
        self.plot.setClipToView(True)
        self.plot.showGrid(x=True, y=True, alpha=theme.grid_alpha)
        self.plot.getViewBox().setDefaultPadding(0.03)
        self.plot.layout.setContentsMargins(0, 4, 6, 0)
        for name in ("left", "bottom", "right"):
            self.style_axis(self.plot.getAxis(name))
        self.curve_sets: list[CurveSet] = []
        self.following = True
        self._x_span: tuple[float, float] | None = None
        self._in_state_change = False
        view = self.plot.getViewBox()
        view.enableAutoRange(x=False, y=True)  # x is managed by settle() while following
        view.sigRangeChangedManually.connect(self._user_moved_view)
        view.sigStateChanged.connect(self._view_state_changed)

    def add_curve_set(self, factory: Callable[[object, int], pg.PlotDataItem]) -> CurveSet:
        curves = CurveSet(self.plot, factory)
        self.curve_sets.append(curves)
        return curves

    def set_following(self, on: bool) -> None:
        """Following: the x range shows the whole run and grows with it; off once the user
        zooms or pans; back on with pyqtgraph's "A" (auto-range) button."""
        if on == self.following:
            return
        self.following = on
        self._x_span = None
        for curves in self.curve_sets:
            curves.set_use_envelope(on)
        if on:
            self.settle()

    def reset_view(self) -> None:
        """For a new run: follow it from its start."""
        self._x_span = None
        self.set_following(True)

    def _user_moved_view(self, *_args: object) -> None:
        self.set_following(False)

    def _view_state_changed(self, *_args: object) -> None:
        view = self.plot.getViewBox()
        if self._in_state_change or not view.autoRangeEnabled()[0]:
            return
        self._in_state_change = True  # the "A" button or "View all": follow the run again
        try:
            view.enableAutoRange(x=False)
            self.following = False
            self.set_following(True)
        finally:
            self._in_state_change = False

    def style_axis(self, axis: pg.AxisItem) -> None:
        axis.setPen(pg.mkPen(self.theme.axis))
        axis.setTextPen(pg.mkPen(self.theme.text))
        axis.enableAutoSIPrefix(False)
        font = QFont(self.font())
        font.setPointSizeF(8.5)
        # Grid lines at major and first minor ticks only: the finest level doubles the cost of
        # painting a plot (alpha-blended lines across the whole view) for little information.
        axis.setStyle(tickFont=font, tickTextOffset=4, hideOverlappingLabels=False,
                      maxTickLevel=1)

    def set_axis_label(self, name: str, text: str) -> None:
        self.plot.setLabel(name, text, color=self.theme.text, **{"font-size": "9pt"})

    def settle(self) -> None:
        """After new data: while following, widen the x range when the data reaches its end
        (with headroom, so the axis does not change on every step), then apply the y
        auto-range now, before painting (a range change while painting repaints twice)."""
        view = self.plot.getViewBox()
        if self.following:
            lo, hi = self._x_extent()
            if lo is not None and hi is not None:
                lo = min(lo, 0.0)  # steps and elapsed seconds: show the axis from 0
                span = self._x_span
                if span is None or hi > span[1] or lo < span[0]:
                    end = hi + max(hi - lo, 1.0) * FOLLOW_HEADROOM
                    self._x_span = (lo, end)
                    view.setXRange(lo, end, padding=0)
        view.prepareForPaint()

    def _x_extent(self) -> tuple[float | None, float | None]:
        lo: float | None = None
        hi: float | None = None
        for curves in self.curve_sets:
            for x, _y in curves.raw.values():
                if len(x):
                    lo = float(x[0]) if lo is None else min(lo, float(x[0]))
                    hi = float(x[-1]) if hi is None else max(hi, float(x[-1]))
        return lo, hi
