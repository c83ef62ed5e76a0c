"""The dashboard's panel of a user's script's own scalars (`scalar` events, dtgui.core.scalars):
one tag at a time (picked in the header; a training loss first), one curve per task."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QSizePolicy, QWidget

from dtgui.core.scalars import is_loss_tag, is_step_tag
from dtgui.ui.plots.curves import XY, make_curve
from dtgui.ui.plots.panels import short_task
from dtgui.ui.plots.plot_base import PlotPanel, PlotTheme, offer_names, series_colour, swatch_html

ScalarData = Mapping[str, Mapping[str, XY]]  # tag -> task -> (steps, values)
AXIS_LABELS = {"step": "step", "epoch": "epoch", "line": "printed line"}  # ScalarStore.axes()


def preferred_tag(tags: list[str]) -> str:
    """The tag to show first: a per-step training loss, else any loss, else the first."""
    for wanted in (lambda t: is_loss_tag(t) and is_step_tag(t), is_loss_tag, lambda t: True):
        for tag in tags:
            if wanted(tag):
                return tag
    return ""


class ScalarPanel(PlotPanel):
    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Scalars", theme, "scalars", parent=parent)
        self.set_axis_label("bottom", "step")
        self.tag_combo = QComboBox()
        self.tag_combo.setObjectName("scalarTag")
        self.tag_combo.setToolTip("Every scalar your script logs (TensorBoard files, report(), "
                                  "the numbers it prints)")
        # Long tags must not push the latest values out of a narrow panel.
        self.tag_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.tag_combo.setMinimumContentsLength(14)
        self.tag_combo.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.header.insertWidget(1, self.tag_combo)
        self.curves = self.add_curve_set(self._make, layer_only=True)
        self._data: ScalarData = {}
        self._axes: Mapping[str, str] = {}  # tag -> what its x counts
        self._chosen = False  # the user picked a tag: keep it
        self.tag_combo.activated.connect(self._picked)
        self.tag_combo.currentTextChanged.connect(self._show_tag)

    def _make(self, key: str, index: int) -> pg.PlotDataItem:
        return make_curve(series_colour(index), key)

    @property
    def tag(self) -> str:
        return self.tag_combo.currentText()

    def tags(self) -> list[str]:
        return [self.tag_combo.itemText(i) for i in range(self.tag_combo.count())]

    def update_data(self, data: ScalarData, axes: Mapping[str, str] | None = None) -> None:
        """The scalars by tag and task; `axes`: what each tag's x counts (default: steps)."""
        self._data = data
        if axes is not None and axes.get(self.tag) != self._axes.get(self.tag):
            self.set_axis_label("bottom", AXIS_LABELS.get(axes.get(self.tag, ""), "step"))
        self._axes = axes if axes is not None else self._axes
        known = self.tags()
        if list(data) != known:
            current = self.tag
            best = offer_names(self.tag_combo, list(data), self._chosen, preferred_tag)
            if best != current:
                self._show_tag(best)
                return
        self.curves.update(dict(data.get(self.tag, {})))

    def _picked(self, _index: int) -> None:
        self._chosen = True

    def _show_tag(self, tag: str) -> None:
        self.curves.clear()
        self.reset_view()
        self.set_axis_label("left", tag)
        self.set_axis_label("bottom", AXIS_LABELS.get(self._axes.get(tag, ""), "step"))
        self.curves.update(dict(self._data.get(tag, {})))
        self.settle(force=True)
        self.show_readout()

    def clear(self) -> None:
        self._data = {}
        self._axes = {}
        self._chosen = False
        self.tag_combo.clear()
        self.curves.clear()
        self.reset_view()
        self.readout.setText("")

    def show_readout(self) -> None:
        parts = []
        for index, key in enumerate(self.curves.curves):
            last = self.curves.last.get(key)
            text = f"{last:.4g}" if last is not None and np.isfinite(last) else "–"
            parts.append(swatch_html(series_colour(index), f"{short_task(str(key))} <b>{text}</b>"))
        self.readout.setText("&nbsp;&nbsp;".join(parts))
