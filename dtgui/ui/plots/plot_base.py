"""Building blocks of the dashboard's plots: theme, colours, cards, and `PlotPanel`.

A panel "follows" the run until the user zooms or pans (pyqtgraph's "A" button follows again):
its ranges are then set from the series' running min/max - no per-frame auto-range pass over
every curve - and the x range grows in steps (with headroom), so that the axes are not laid
out again on every frame. How the curves are fed is in `dtgui.ui.plots.curves`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QIcon,
    QPainter,
    QPalette,
    QPen,
    QPixmap,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from dtgui.ui.plots.curves import CurveSet
from dtgui.ui.plots.envelope_layer import K

# Tableau 10 then its darker/lighter companions: distinct on light and dark backgrounds.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
    "#e6550d", "#31a354", "#756bb1", "#636363",
)
FOLLOW_HEADROOM = 0.08  # while following a run, the x range ends this fraction past the data
Y_PAD = 0.05  # while following, the y range is the data's and this fraction of it each side
Y_REFIT_FILL = 0.7  # ... and fitted again once the data fills less of it than this


def series_colour(index: int) -> QColor:
    if index < len(PALETTE):
        return QColor(PALETTE[index])
    colour: QColor = pg.intColor(index, hues=17, values=2)
    return colour


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
    """Seconds since the start shown as m:ss (or h:mm:ss), ticks at least a second apart (a
    run's first second would otherwise read "0:00 0:00 0:01 0:01")."""

    def tickSpacing(self, minVal: float, maxVal: float,
                    size: float) -> list[tuple[float, float]]:
        levels = [(spacing, offset) for spacing, offset in
                  super().tickSpacing(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [format_elapsed(v) if v >= 0 else "" for v in values]


class SpacedAxis(pg.AxisItem):
    """A value axis whose labelled ticks are at least MIN_GAP_PX apart: in a short panel (the
    learning rate's) pyqtgraph's own choice put five labels in 35 px, over each other."""

    MIN_GAP_PX = 16.0

    def tickSpacing(self, minVal: float, maxVal: float,
                    size: float) -> list[tuple[float, float]]:
        levels: list[tuple[float, float]] = super().tickSpacing(minVal, maxVal, size)
        if not maxVal > minVal or size <= 0:
            return levels
        need = self.MIN_GAP_PX * (maxVal - minVal) / size  # data units between two labels
        kept = [(spacing, offset) for spacing, offset in levels if spacing >= need]
        if kept:
            return kept
        power = 10.0 ** math.floor(math.log10(need))
        return [(next(m * power for m in (1, 2, 5, 10) if m * power >= need), 0.0)]

    def tickValues(self, minVal: float, maxVal: float,
                   size: float) -> list[tuple[float, list[float]]]:
        """pyqtgraph's ticks; in a short plot where none of them is far enough from both
        ends for its label to be drawn (pyqtgraph leaves out a label that crosses an end),
        one round value near the middle instead: a plot is never without a y label."""
        levels: list[tuple[float, list[float]]] = super().tickValues(minVal, maxVal, size)
        if not maxVal > minVal or size <= 0:
            return levels
        font = self.style.get("tickFont")
        label = QFontMetricsF(font if font is not None else self.font()).height()
        margin = label * 0.6 * (maxVal - minVal) / size  # half a label, and a little more
        lo, hi = minVal + margin, maxVal - margin
        if lo >= hi or any(lo <= v <= hi for _spacing, values in levels for v in values):
            return levels
        step, value = round_inside(lo, hi)
        return [(step, [value])]


def round_inside(lo: float, hi: float) -> tuple[float, float]:
    """The roundest value in [lo, hi] (a multiple of the largest 1, 2 or 5 times a power of
    ten that has one there, the one nearest the middle), with that step."""
    unit = 10.0 ** math.ceil(math.log10(hi - lo))
    while True:
        for step in (unit, unit / 2, unit / 5):
            first = math.ceil(lo / step) * step
            if first <= hi:
                middle = round((lo + hi) / 2 / step) * step
                return step, middle if lo <= middle <= hi else first
        unit /= 10


PLOT_MIN_HEIGHT = 52


def format_elapsed(seconds: float) -> str:
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def make_card(panel: str, parent: QWidget | None = None) -> QFrame:
    """A white card (objectName "card", as in resources/style.qss); `panel` names it for QSS
    (`QFrame#card[panel="loss"]`). Without a style sheet it still fills with the Base colour."""
    return style_card(QFrame(parent), panel)


def style_card(card: QFrame, panel: str) -> QFrame:
    """`card` drawn as make_card's (a QFrame subclass that is a card calls it on itself)."""
    card.setObjectName("card")
    card.setProperty("panel", panel)
    card.setFrameShape(QFrame.Shape.StyledPanel)
    card.setBackgroundRole(QPalette.ColorRole.Base)
    card.setAutoFillBackground(True)
    return card


def card_rows(card: QFrame, panel: str, margins: tuple[int, int, int, int],
              spacing: int) -> QVBoxLayout:
    """`card` drawn as a card (`style_card`) holding rows, one under the other: its layout,
    with these margins (left, top, right, bottom) and this spacing between its rows."""
    style_card(card, panel)
    rows = QVBoxLayout(card)
    rows.setContentsMargins(*margins)
    rows.setSpacing(spacing)
    return rows


def offer_names(combo: QComboBox, names: list[str], chosen: bool,
                preferred: Callable[[list[str]], str]) -> str:
    """Offer `names` in `combo` (without its signals); keep the shown name when the person
    chose it and it is still offered, else show `preferred(names)`; the name now shown."""
    combo.blockSignals(True)
    current = combo.currentText()
    combo.clear()
    combo.addItems(names)
    pick = current if chosen and current in names else preferred(names)
    combo.setCurrentText(pick)
    combo.blockSignals(False)
    return pick


def title_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("panelTitle")
    font = label.font()
    font.setBold(True)
    label.setFont(font)
    return label


def readout_summary(count: str, values: list[float], text: Callable[[float], str]) -> str:
    """Several series' latest values as their range: "4 tasks <b>82%–100%</b>" (`count`:
    "4 tasks"; `text`: a value's words)."""
    if not values:
        return count
    low, high = text(min(values)), text(max(values))
    return f"{count} <b>{low if low == high else f'{low}–{high}'}</b>"


class PlotPanel(QFrame):
    """A titled card: a header row (title, live readout, tools) above a pyqtgraph plot."""

    # A change made here (not new data) left series to feed at the next frames: the
    # dashboard's timer must run, even for an ended run.
    backlogged = Signal()

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
        # the readout with every series, and its summary for a card too narrow for it
        self._readouts = ("", "")
        self.readout.installEventFilter(self)  # a new width: the one that fits
        self.header.addWidget(self.title_label)
        self.header.addWidget(self.readout, 1)
        layout.addWidget(header_row)
        axes: dict[str, pg.AxisItem] = {"left": SpacedAxis("left")}
        if bottom_axis is not None:
            axes["bottom"] = bottom_axis
        self.plot_widget = pg.PlotWidget(background=theme.background, axisItems=axes)
        self.plot_widget.setObjectName(panel + "Plot")
        self.plot_widget.setAntialiasing(False)
        self.plot_widget.setFrameShape(QFrame.Shape.NoFrame)
        # Below pyqtgraph's 68 px: two rows of plots, the header and the tables fit 768 px.
        self.plot_widget.setMinimumHeight(PLOT_MIN_HEIGHT)
        # Until its first point the panel says what it waits for instead of drawing axes
        # whose ranges mean nothing (set_waiting_text).
        self.waiting_label = QLabel("")
        self.waiting_label.setObjectName("plotWaiting")
        self.waiting_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.waiting_label.setWordWrap(True)
        self.waiting_label.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.waiting_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                         QSizePolicy.Policy.Ignored)
        self.plot_stack = QStackedWidget()
        self.plot_stack.addWidget(self.plot_widget)
        self.plot_stack.addWidget(self.waiting_label)
        layout.addWidget(self.plot_stack, 1)
        self.plot: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot.setDownsampling(auto=True, mode="peak")
        self.plot.setClipToView(True)
        self.plot.showGrid(x=True, y=True, alpha=theme.grid_alpha)
        self.plot.getViewBox().setDefaultPadding(0.03)
        self.plot.layout.setContentsMargins(0, 4, 6, 0)
        for name in ("left", "bottom", "right"):
            axis = self.plot.getAxis(name)
            self.style_axis(axis)
            # An axis (with its grid lines across the view) is replayed from a pixmap until
            # its range changes, instead of re-drawing text and lines on every frame.
            axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.curve_sets: list[CurveSet[Any]] = []  # keyed each by its own kind of name
        self.following = True
        self.y_mode = "data"  # while following: "data" (fit), "zero" (fit, from 0), "fixed"
        self.y_pad = Y_PAD  # room beyond the data each side, a fraction of its range
        self._x_span: tuple[float, float] | None = None
        self._y_span: tuple[float, float] | None = None
        self._in_state_change = False
        self._waiting = True  # no point yet (reset_view): the waiting text, if any, shows
        self._axis_titles: dict[str, tuple[str, str]] = {}  # axis -> (its title, short)
        self._axis_shown: dict[str, str] = {}  # axis -> the title it shows ("": none)
        view = self.plot.getViewBox()
        # While following, settle() sets both ranges from what it knows of the data, which
        # costs nothing per frame (pyqtgraph's auto-range re-measures every curve every time).
        view.enableAutoRange(x=False, y=False)
        view.sigRangeChangedManually.connect(self._user_moved_view)
        view.sigStateChanged.connect(self._view_state_changed)
        view.sigResized.connect(self._view_resized)

    def add_curve_set(self, factory: Callable[[K, int], pg.PlotDataItem],
                      layer_only: bool = False) -> CurveSet[K]:
        curves = CurveSet(self.plot, factory, layer_only)
        self.curve_sets.append(curves)
        return curves

    def set_following(self, on: bool) -> None:
        """Following: the x range shows the whole run and grows with it; off once the user
        zooms or pans; back on with pyqtgraph's "A" (auto-range) button."""
        if on == self.following:
            return
        self.following = on
        self._x_span = self._y_span = None
        self.sync_envelopes()
        if on:
            self.settle()

    def sync_envelopes(self) -> None:
        """Envelopes while following the whole run on a linear y axis; else raw curves."""
        use = self.following and not self._log_y()
        for curves in self.curve_sets:
            curves.set_use_envelope(use)

    def set_readout(self, full: str, summary: str = "", tip: str = "") -> None:
        """The readout: `full` (rich text) where the card has room for it, else `summary`
        ("": `full` clipped); `tip` on hover, every value."""
        self._readouts = (full, summary)
        self.readout.setToolTip(tip)
        if summary:
            self._fit_readout()
        elif full != self.readout.text():
            self.readout.setText(full)

    def _fit_readout(self) -> None:
        """The readout set with a summary: whichever fits the card's width now."""
        full, summary = self._readouts
        if not summary:
            return  # a readout set as it is (setText): nothing to choose
        text = full
        if self.readout.width() > 0:
            doc = QTextDocument()
            doc.setDefaultFont(self.readout.font())
            doc.setDocumentMargin(0)
            doc.setHtml(full)
            if doc.idealWidth() > self.readout.width():
                text = summary
        if text != self.readout.text():
            self.readout.setText(text)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.readout and event.type() == QEvent.Type.Resize:
            self._fit_readout()
        return super().eventFilter(watched, event)

    def reset_view(self) -> None:
        """For a new run: follow it from its start (until its first points, empty axes rather
        than the last run's)."""
        self._x_span = self._y_span = None
        view = self.plot.getViewBox()
        view.setXRange(0.0, 1.0, padding=0)
        if self.y_mode != "fixed":  # a fixed range (utilisation, 0-100 %) is the panel's own
            view.setYRange(0.0, 1.0, padding=0)
        self.set_following(True)
        self._waiting = True
        self._show_plot_or_waiting()

    def set_waiting_text(self, text: str) -> None:
        """What the panel says while it has no point (what the run does meanwhile); "": its
        empty axes."""
        if text != self.waiting_label.text():
            self.waiting_label.setText(text)
        self._show_plot_or_waiting()

    @property
    def waiting(self) -> bool:
        """The panel shows its waiting text, not its plot."""
        return self.plot_stack.currentWidget() is self.waiting_label

    def has_points(self) -> bool:
        return any(len(x) for curves in self.curve_sets for x, _y in curves.raw.values())

    def _show_plot_or_waiting(self) -> None:
        if self._waiting and self.has_points():
            self._waiting = False
        wait = self._waiting and bool(self.waiting_label.text())
        shown = self.waiting_label if wait else self.plot_widget
        if self.plot_stack.currentWidget() is not shown:
            self.plot_stack.setCurrentWidget(shown)

    def _view_resized(self, *_args: object) -> None:
        for curves in self.curve_sets:
            curves.refit()
        for name in self._axis_titles:
            self._fit_axis_title(name)

    def _user_moved_view(self, *_args: object) -> None:
        self.set_following(False)

    def _view_state_changed(self, *_args: object) -> None:
        view = self.plot.getViewBox()
        if self._in_state_change or not view.autoRangeEnabled()[0]:
            return
        self._in_state_change = True  # the "A" button or "View all": follow the run again
        try:
            view.enableAutoRange(x=False, y=self._log_y())
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

    def set_axis_label(self, name: str, text: str, short: str = "") -> None:
        """The axis's title: `text` where the axis is long enough to show it whole, else
        `short` (units: "%"), else none (the panel's title names what is plotted): a title
        is never drawn cut."""
        self._axis_titles[name] = (text, short)
        self._fit_axis_title(name)

    def _fit_axis_title(self, name: str) -> None:
        text, short = self._axis_titles[name]
        axis = self.plot.getAxis(name)
        size = self.plot.getViewBox().size()
        room = size.height() if axis.orientation in ("left", "right") else size.width()
        chosen = ""
        for candidate in (text, short):
            if candidate and (room <= 0 or self._title_width(candidate) <= room):
                chosen = candidate  # before the first layout (room 0): the full title
                break
        if chosen == self._axis_shown.get(name):
            return  # as it is: no new layout of the plot
        self._axis_shown[name] = chosen
        if chosen:
            self.plot.setLabel(name, chosen, color=self.theme.text, **{"font-size": "9pt"})
        axis.showLabel(bool(chosen))

    def _title_width(self, text: str) -> float:
        font = QFont(self.font())
        font.setPointSizeF(9)
        return float(QFontMetricsF(font).horizontalAdvance(text)) + 4

    def _log_y(self) -> bool:
        return bool(self.plot.ctrl.logYCheck.isChecked())

    def feed_backlog(self) -> bool:
        """Feed the series a frame's budget left for later; True if there were any."""
        due = [curves for curves in self.curve_sets if curves.backlog]
        for curves in due:
            curves.feed_due()
        if due:
            self.settle()
        return bool(due)

    def settle(self, force: bool = False) -> None:
        """After new data: while following, widen the ranges when the data leaves them (x
        with headroom, so that the axes do not change on every step), before painting."""
        view = self.plot.getViewBox()
        if self._waiting:
            self._show_plot_or_waiting()
        if self.following:
            if force:
                self._x_span = self._y_span = None
            lo, hi = self._x_extent()
            if lo is not None and hi is not None:
                lo = min(lo, 0.0)  # steps and elapsed seconds: show the axis from 0
                span = self._x_span
                if span is None or hi > span[1] or lo < span[0]:
                    end = hi + max(hi - lo, 1.0) * FOLLOW_HEADROOM
                    self._x_span = (lo, end)
                    view.setXRange(lo, end, padding=0)
            if self._log_y():
                view.enableAutoRange(y=True)  # pyqtgraph fits log10 of the data
            elif self.y_mode != "fixed":
                self._fit_y(view)
        view.prepareForPaint()

    def _fit_y(self, view: pg.ViewBox) -> None:
        spans = [e for e in (c.y_extent() for c in self.curve_sets) if e is not None]
        if not spans:
            return
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        if self.y_mode == "zero":
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if self._y_span is not None:
            # Kept while the data stays inside and fills most of it: a new range re-lays out
            # the axis and makes every item of the plot recompute (several ms a frame).
            shown_lo, shown_hi = self._y_span
            if shown_lo <= lo and hi <= shown_hi \
                    and hi - lo >= Y_REFIT_FILL * (shown_hi - shown_lo):
                return
        pad = (hi - lo) * self.y_pad or max(abs(hi) * self.y_pad, 1e-6)
        self._y_span = (lo - (0 if self.y_mode == "zero" and lo == 0 else pad), hi + pad)
        view.setYRange(*self._y_span, padding=0)

    def _x_extent(self) -> tuple[float | None, float | None]:
        lo: float | None = None
        hi: float | None = None
        for curves in self.curve_sets:
            for x, _y in curves.raw.values():
                if len(x):
                    lo = float(x[0]) if lo is None else min(lo, float(x[0]))
                    hi = float(x[-1]) if hi is None else max(hi, float(x[-1]))
        return lo, hi
