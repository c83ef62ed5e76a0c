"""The dashboard's training-quality parts: smoothed loss with validation, the validation
metrics, the learning rate, and where the trained model was saved.

* `TrainingLossPanel`: the per-replica loss panel with TensorBoard's smoothing (an EMA slider,
  0 to 0.999, default 0.6; the raw points faint behind, or hidden), the validation loss as a
  thick dashed curve on the same step axis, and its best point marked (a star, and the value
  and step in the panel's second row). The EMA is computed incrementally in numpy
  (`dtgui.core.smoothing.Ema`) when a series is fed: a frame smooths only the new points of
  the series it feeds.
* `ValidationPanel`: one validation metric at a time (a picker), its best point marked.
* `LearningRatePanel`: the learning rate by step (from the `steps` events' `lr`).
* `ModelBar`: the saved model's path and an "Open folder" button.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QColor, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QWidget,
)

from dtgui.core.curve_values import best_index, lower_is_better, preferred_metric
from dtgui.core.smoothing import Ema
from dtgui.ui.plots.curves import XY, CurveSet, make_curve
from dtgui.ui.plots.panels import MAX_LEGEND_ENTRIES, LossPanel
from dtgui.ui.plots.plot_base import PlotPanel, PlotTheme, offer_names, series_colour, style_card

DEFAULT_SMOOTHING = 0.6
SLIDER_STEPS = 1000  # the slider's positions: weight = position / SLIDER_STEPS (up to 0.999)
RAW_ALPHA = 55  # the raw points behind a smoothed curve: faint
# Raw points are drawn behind the smoothed curves of at most this many replicas: each faint
# copy costs as much to feed and more to paint (alpha-blended) than its curve, and with 16
# replicas of 100k steps the frame would go over its 16 ms budget (18 ms of UI-thread CPU
# measured, against 8-10 ms without them or with 8 replicas).
RAW_MAX_SERIES = 8
RAW_TIP = "Show the unsmoothed points, faint, behind the curves"
BEST_COLOUR = "#f9ab00"
VALIDATION_KEY = "validation loss"


def validation_pen(theme: PlotTheme) -> Any:
    return pg.mkPen(QColor(theme.text), width=2.5, style=Qt.PenStyle.DashLine)


def validation_curve(theme: PlotTheme, name: str) -> pg.PlotDataItem:
    """A thick dashed curve with a dot per evaluation: few points, each a real measurement."""
    pen = validation_pen(theme)
    # drawn as they are: "peak" downsampling would turn a few points into vertical strokes
    return pg.PlotDataItem(name=name, pen=pen, symbol="o", symbolSize=5, symbolPen=pen,
                           symbolBrush=pg.mkBrush(QColor(theme.text)), antialias=False,
                           skipFiniteCheck=True, autoDownsample=False)


def best_marker() -> pg.PlotDataItem:
    item = pg.PlotDataItem([], [], pen=None, symbol="star", symbolSize=16,
                           symbolBrush=pg.mkBrush(BEST_COLOUR), symbolPen=pg.mkPen("#5f4100"))
    item.setZValue(20)
    return item


def best_text(metric: str, x: np.ndarray, y: np.ndarray) -> tuple[str, int | None]:
    """'best <b>0.123</b> at step 80' and the index of the best point."""
    i = best_index(y, metric)
    if i is None:
        return "", None
    return f"best <b>{float(y[i]):.4g}</b> at step {int(x[i]):,}", i


class TrainingLossPanel(LossPanel):
    """Per-replica loss, smoothed, with the validation loss and its best point."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__(theme, parent)
        self.title_label.setText("Loss")
        self.weight = DEFAULT_SMOOTHING
        self.show_raw = True
        self._emas: dict[object, Ema] = {}
        self._data: Mapping[int, XY] = {}
        self._val: XY | None = None
        # drawn behind the smoothed curves (z below), in the same colours, faint
        self.curves.transform = self._smooth
        self.raw_curves = self.add_curve_set(self._make_raw, layer_only=True)
        self.raw_curves.layer.setZValue(-5)
        self.val_curves: CurveSet[str] = self.add_curve_set(
            lambda _k, _i: validation_curve(theme, VALIDATION_KEY))
        self.marker = best_marker()
        self.plot.addItem(self.marker)

        row = QWidget()
        row.setFixedHeight(24)
        tools = QHBoxLayout(row)
        tools.setContentsMargins(0, 0, 0, 0)
        tools.setSpacing(8)
        label = QLabel("Smoothing")
        label.setObjectName("muted")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("lossSmoothing")
        self.slider.setRange(0, SLIDER_STEPS - 1)
        self.slider.setValue(round(DEFAULT_SMOOTHING * SLIDER_STEPS))
        self.slider.setFixedWidth(120)
        self.slider.setToolTip("Exponential moving average of the training curves, as "
                               "TensorBoard's (0: off, up to 0.999)")
        self.weight_label = QLabel(f"{DEFAULT_SMOOTHING:.3f}")
        self.weight_label.setMinimumWidth(36)
        self.raw_check = QCheckBox("raw")
        self.raw_check.setObjectName("lossShowRaw")
        self.raw_check.setToolTip(RAW_TIP)
        self.raw_check.setChecked(True)
        self.best_label = QLabel("")
        self.best_label.setObjectName("validationBest")
        self.best_label.setTextFormat(Qt.TextFormat.RichText)
        self.best_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.best_label.setWordWrap(True)  # on two lines where the card is narrow, not cut
        for widget in (label, self.slider, self.weight_label, self.raw_check):
            tools.addWidget(widget)
        tools.addSpacing(12)
        tools.addWidget(self.best_label, 1)
        layout = self.layout()
        assert isinstance(layout, QBoxLayout)  # a card's layout is a column
        layout.insertWidget(1, row)
        self.slider.valueChanged.connect(lambda v: self.set_smoothing(v / SLIDER_STEPS))
        self.raw_check.toggled.connect(self.set_show_raw)

    # -- smoothing ---------------------------------------------------------------------------
    def _make_raw(self, key: int, index: int) -> pg.PlotDataItem:
        colour = QColor(series_colour(key))
        colour.setAlpha(RAW_ALPHA)
        curve = make_curve(colour, f"replica {key} (raw)")
        curve.setZValue(-5)
        main = self.curves.curves.get(key)
        curve.setVisible(main is None or bool(main.isVisible()))
        return curve

    @property
    def raw_shown(self) -> bool:
        """Raw points are drawn behind: smoothing on, "raw" ticked, and at most
        RAW_MAX_SERIES replicas (see there)."""
        return self.weight > 0 and self.show_raw and len(self._data) <= RAW_MAX_SERIES

    def set_smoothing(self, weight: float) -> None:
        weight = min(max(float(weight), 0.0), (SLIDER_STEPS - 1) / SLIDER_STEPS)
        position = round(weight * SLIDER_STEPS)
        if self.slider.value() != position:
            self.slider.setValue(position)  # comes back here through valueChanged
            return
        self.weight_label.setText(f"{weight:.3f}")
        if weight == self.weight:
            return
        self.weight = weight
        for ema in self._emas.values():
            ema.set_weight(weight)
        self._redraw_all()

    def set_show_raw(self, on: bool) -> None:
        if self.raw_check.isChecked() != on:
            self.raw_check.setChecked(on)
            return
        self.show_raw = on
        self._redraw_all()

    def _redraw_all(self) -> None:
        if self.raw_shown:
            self.raw_curves.update(self._data)
        else:
            self.raw_curves.clear()
        self.curves.redo_all()
        self.settle(force=True)
        if self.curves.backlog:
            self.backlogged.emit()

    def _smooth(self, key: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The curves' transform: a series smoothed when it is fed."""
        if self.weight == 0:
            return y
        ema = self._emas.get(key)
        if ema is None:
            ema = self._emas[key] = Ema(self.weight)
        return ema.update(x, y)

    def update_data(self, data: Mapping[int, XY]) -> None:
        few = len(data) <= RAW_MAX_SERIES
        if few != (len(self._data) <= RAW_MAX_SERIES) or not self._data:
            self.raw_check.setEnabled(few)
            self.raw_check.setToolTip(RAW_TIP if few else
                                      f"{RAW_TIP} (up to {RAW_MAX_SERIES} replicas: more would "
                                      "slow the dashboard down)")
        self._data = data
        if self.raw_shown:
            self.raw_curves.update(data)
        super().update_data(data)

    def set_replica_visible(self, rid: int, visible: bool) -> None:
        raw = self.raw_curves.curves.get(rid)
        if raw is not None and raw.isVisible() != visible:
            raw.setVisible(visible)
            self.raw_curves.flush(rid)
        super().set_replica_visible(rid, visible)

    def show_readout(self) -> None:
        vals = [float(y[-1]) for k, (_x, y) in self._data.items()
                if len(y) and k in self.curves.curves and self.curves.curves[k].isVisible()]
        if vals:
            self.readout.setText(f"latest mean <b>{sum(vals) / len(vals):.4g}</b>")

    # -- validation ----------------------------------------------------------------------------
    def update_validation(self, series: XY | None) -> None:
        """The validation loss (steps, values); None or empty: none yet."""
        if series is None or not len(series[0]):
            return
        new = self.val_curves.update({VALIDATION_KEY: series})
        if new:
            self._rebuild_toggles()
        self._val = series
        x, y = series
        text, i = best_text("loss", x, y)
        if i is not None:
            self.marker.setData([float(x[i])], [float(y[i])])
            self.best_label.setText(f"validation loss {text} · latest {float(y[-1]):.4g}")

    @property
    def best_point(self) -> tuple[float, float] | None:
        x, y = self.marker.getOriginalDataset()
        return (float(x[0]), float(y[0])) if x is not None and len(x) else None

    def _rebuild_toggles(self) -> None:
        super()._rebuild_toggles()
        val = self.val_curves.curves.get(VALIDATION_KEY)
        if val is not None and len(self.replica_ids()) <= MAX_LEGEND_ENTRIES:
            self.legend.setVisible(True)
            self.legend.addItem(val, "validation")
            self.legend.setColumnCount(1 if len(self.legend.items) <= 4 else 2)

    def _legend_clicked(self, item: pg.PlotDataItem) -> None:
        val = self.val_curves.curves.get(VALIDATION_KEY)
        if val is not None and item is val:
            self.marker.setVisible(bool(val.isVisible()))
            self.val_curves.flush(VALIDATION_KEY)
            self.settle(force=True)
            return
        super()._legend_clicked(item)

    def clear(self) -> None:
        self._emas.clear()
        self._data = {}
        self._val = None
        self.raw_curves.clear()
        self.val_curves.clear()
        self.marker.setData([], [])
        self.marker.setVisible(True)
        self.best_label.setText("")
        super().clear()


class ValidationPanel(PlotPanel):
    """One validation metric at a time (picked in the header), its best point starred."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Validation", theme, "validation", parent=parent)
        self.plot.setDownsampling(auto=False)  # a few measured points: drawn as they are
        self.set_axis_label("bottom", "step")
        self.combo = QComboBox()
        self.combo.setObjectName("validationMetric")
        self.combo.setToolTip("The validation metrics the run reports")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.header.insertWidget(1, self.combo)
        self.curves: CurveSet[str] = self.add_curve_set(
            lambda k, _i: validation_curve(theme, k))
        self.marker = best_marker()
        self.plot.addItem(self.marker)
        self._data: Mapping[str, XY] = {}
        self._chosen = False
        self.combo.activated.connect(self._picked)
        self.combo.currentTextChanged.connect(self._show)

    @property
    def current_metric(self) -> str:
        return self.combo.currentText()

    def metrics(self) -> list[str]:
        return [self.combo.itemText(i) for i in range(self.combo.count())]

    def update_data(self, data: Mapping[str, XY]) -> None:
        """metric -> (steps, values), without the loss (the loss panel draws it)."""
        self._data = {k: v for k, v in data.items() if k != "loss" and len(v[0])}
        names = list(self._data)
        if names != self.metrics():
            current = self.current_metric
            pick = offer_names(self.combo, names, self._chosen, preferred_metric)
            if pick != current:
                self._show(pick)
                return
        self._feed()

    def set_metric(self, name: str) -> None:
        self._chosen = True
        self.combo.setCurrentText(name)

    def _picked(self, _index: int) -> None:
        self._chosen = True

    def _show(self, metric: str) -> None:
        self.curves.clear()
        self.reset_view()
        self.set_axis_label("left", metric)
        self._feed()
        self.settle(force=True)
        self.show_readout()

    def _feed(self) -> None:
        series = self._data.get(self.current_metric)
        if series is None:
            return
        self.curves.update({self.current_metric: series})
        x, y = series
        _text, i = best_text(self.current_metric, x, y)
        if i is not None:
            self.marker.setData([float(x[i])], [float(y[i])])

    def show_readout(self) -> None:
        series = self._data.get(self.current_metric)
        if series is None:
            self.readout.setText("")
            return
        x, y = series
        _text, i = best_text(self.current_metric, x, y)
        better = "lower" if lower_is_better(self.current_metric) else "higher"
        # the panel is narrow: "★ 0.93", the best value (the star marks its point on the plot),
        # its step and the latest value in the tooltip
        self.readout.setText(f"\u2605 <b>{float(y[i]):.4g}</b>" if i is not None else "")
        best = f"best {float(y[i]):.4g} at step {int(x[i]):,}; " if i is not None else ""
        self.readout.setToolTip(f"{self.current_metric}: {better} is better; {best}latest "
                                f"{float(y[-1]):.4g} at step {int(x[-1]):,}")

    def clear(self) -> None:
        self._data = {}
        self._chosen = False
        self.combo.clear()
        self.curves.clear()
        self.marker.setData([], [])
        self.reset_view()
        self.readout.setText("")


class LearningRatePanel(PlotPanel):
    """The learning rate by step (the schedule as the optimizer applied it)."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Learning rate", theme, "lr", parent=parent)
        # one point per training call: "peak" downsampling (the plot's, applied to every
        # curve it is given) drew the schedule as a staircase
        self.plot.setDownsampling(auto=False)
        self.set_axis_label("bottom", "step")
        self.y_mode = "zero"
        # the schedule's peak (a round number: the learning rate set) below the top, where
        # the short panel has room for its label: at the edge its label was left out and the
        # line read against the one tick below it
        self.y_pad = 0.3
        self.curves = self.add_curve_set(self._make)

    @staticmethod
    def _make(_key: str, _index: int) -> pg.PlotDataItem:
        return make_curve(QColor("#7b1fa2"), "learning rate")

    def update_data(self, series: XY | None) -> None:
        if series is not None and len(series[0]):
            self.curves.update({"lr": series})

    def show_readout(self) -> None:
        last = self.curves.last.get("lr")
        extent = self.curves.y_extent()
        peak = f" · max {extent[1]:.3g}" if extent is not None and extent[1] != last else ""
        self.readout.setText(f"now <b>{last:.3g}</b>{peak}" if last is not None else "")

    def clear(self) -> None:
        self.curves.clear()
        self.reset_view()
        self.readout.setText("")


def model_folder(output: Path | None, model: Mapping[str, Any]) -> Path | None:
    """The local folder of a saved model (`path` is relative to the bundle's output)."""
    rel = model.get("path")
    if output is None or not isinstance(rel, str) or not rel:
        return None
    return (output / rel).parent


def model_text(models: list[Mapping[str, Any]]) -> tuple[str, Mapping[str, Any] | None]:
    """What the bar says, and the model it opens: the final one, else the latest best."""
    final = [m for m in models if (m.get("role") or m.get("kind")) == "final"]
    best = [m for m in models if (m.get("role") or m.get("kind")) == "best"]
    shown = final[-1] if final else (best[-1] if best else (models[-1] if models else None))
    if shown is None:
        return "", None
    parts = [f"Model saved: <b>output/{shown.get('path', '')}</b>"
             f" (step {shown.get('step', '?')})"]
    if shown.get("savedmodel"):
        parts.append(f"SavedModel output/{shown['savedmodel']}")
    if best:
        b = best[-1]
        value = b.get("value")
        measured = f" {b.get('metric', 'val_loss')} {value:.4g}" if isinstance(
            value, (int, float)) else ""
        if b is not shown:
            parts.append(f"best{measured} at step {b.get('step', '?')}: output/{b.get('path', '')}")
        elif measured:
            parts[0] += f", best by{measured}"
    return " · ".join(parts), shown


class ModelBar(QFrame):
    """Where the trained model was saved, with a button that opens its folder."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        style_card(self, "model")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 4, 8, 4)
        self.label = QLabel("")
        self.label.setObjectName("modelSaved")
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.open_button = QPushButton("Open folder")
        self.open_button.setObjectName("openModelFolder")
        self.open_button.clicked.connect(self.open_folder)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.open_button)
        self.output: Path | None = None
        self.folder: Path | None = None
        self.opener: Callable[[QUrl], object] = QDesktopServices.openUrl
        self._models: list[Mapping[str, Any]] = []
        self.setVisible(False)

    def set_output(self, output: Path | None) -> None:
        """The run's local output folder (the bundle's `output/`)."""
        self.output = output
        self._models = []
        self.folder = None
        self.label.setText("")
        self.setVisible(False)

    def update_models(self, models: list[Mapping[str, Any]]) -> None:
        if models == self._models:
            return
        self._models = list(models)
        text, shown = model_text(self._models)
        self.folder = model_folder(self.output, shown) if shown is not None else None
        self.label.setText(text)
        self.label.setToolTip(str(self.folder) if self.folder else "")
        self.open_button.setEnabled(self.folder is not None)
        self.setVisible(bool(text))

    def open_folder(self) -> None:
        if self.folder is None:
            return
        if self.opener(QUrl.fromLocalFile(str(self.folder))) is False:
            # No file manager here (a server's desktop, a bare window manager): the path, to
            # paste into a terminal or a file dialog.
            QGuiApplication.clipboard().setText(str(self.folder))
            path = html.escape(str(self.folder))
            self.label.setText(f"No file manager opened the folder: <b>{path}</b> (its path "
                               "is copied to the clipboard)")
