"""The dashboard's three plot panels: per-replica loss, throughput, device use."""

from __future__ import annotations

from collections.abc import Mapping

import pyqtgraph as pg
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QGraphicsItem,
    QHBoxLayout,
    QMenu,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.ui.plots.curves import XY, LineSample, make_curve
from dtgui.ui.plots.plot_base import (
    ElapsedAxis,
    PlotPanel,
    PlotTheme,
    readout_summary,
    series_colour,
    swatch_html,
    swatch_icon,
)

MAX_INLINE_TOGGLES = 8  # more replicas than this: only the "Replicas" menu, no chip row
# More replicas than this: no legend (it would cover the plot, and pyqtgraph lays a legend
# out again for every entry added); the "Replicas" menu names and toggles them.
MAX_LEGEND_ENTRIES = 16


class LossPanel(PlotPanel):
    """Loss per global replica id, x = step; legend and chip toggles show/hide replicas."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Loss per replica", theme, "loss", parent=parent)
        self.set_axis_label("left", "loss")
        self.set_axis_label("bottom", "step")
        self.legend = pg.LegendItem(brush=pg.mkBrush(theme.legend_fill),
                                    pen=pg.mkPen(theme.legend_border),
                                    labelTextColor=theme.text, labelTextSize="8pt",
                                    verSpacing=-2, horSpacing=4, sampleType=LineSample)
        # beside the plot, not over it: over the view it would hide the newest steps' curves
        self.plot.layout.addItem(self.legend, 2, 3)
        self.plot.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignTop)
        self.legend.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.legend.setVisible(False)  # until it has a curve to name
        self.legend.sigSampleClicked.connect(self._legend_clicked)
        self.curves = self.add_curve_set(self._make, layer_only=True)
        self._chips: dict[int, QCheckBox] = {}
        self._chip_row = QHBoxLayout()
        self._chip_row.setSpacing(6)
        self.header.addLayout(self._chip_row)
        self.menu_button = QToolButton()
        self.menu_button.setObjectName("replicaMenuButton")
        self.menu_button.setText("Replicas \u25be")
        self.menu_button.setToolTip("Show or hide replicas")
        self.menu_button.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0; }")
        self.menu_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.menu_button.setMenu(QMenu(self.menu_button))
        self.menu_button.menu().aboutToShow.connect(self._fill_menu)
        self.menu_button.setVisible(False)
        self.header.addWidget(self.menu_button)
        self.log_check = QCheckBox("log scale")
        self.log_check.setObjectName("lossLogScale")
        self.log_check.toggled.connect(self._set_log_y)
        self.header.addWidget(self.log_check)

    def _set_log_y(self, on: bool) -> None:
        self.plot.setLogMode(y=on)
        if not on:
            self.plot.enableAutoRange(y=False)
        self.sync_envelopes()
        self.settle(force=True)

    def _make(self, key: int, index: int) -> pg.PlotDataItem:
        return make_curve(series_colour(key), f"replica {key}")

    def update_data(self, data: Mapping[int, XY]) -> None:
        new = self.curves.update(data)
        if new:
            self._rebuild_toggles()

    def show_readout(self) -> None:
        vals = [self.curves.last[k] for k, c in self.curves.curves.items()
                if c.isVisible() and k in self.curves.last]
        if vals:
            self.readout.setText(f"latest mean <b>{sum(vals) / len(vals):.4g}</b>")

    def clear(self) -> None:
        self.curves.clear()
        self.reset_view()
        self._rebuild_toggles()
        self.readout.setText("")

    def replica_ids(self) -> list[int]:
        return sorted(self.curves.curves)

    def is_replica_visible(self, rid: int) -> bool:
        return bool(self.curves.curves[rid].isVisible())

    def set_replica_visible(self, rid: int, visible: bool) -> None:
        curve = self.curves.curves[rid]
        if curve.isVisible() != visible:
            curve.setVisible(visible)
        self.curves.flush(rid)
        chip = self._chips.get(rid)
        if chip is not None and chip.isChecked() != visible:
            chip.blockSignals(True)
            chip.setChecked(visible)
            chip.blockSignals(False)
        for sample, _label in self.legend.items:
            if sample.item is curve:
                sample.update()
        self.settle(force=True)

    def set_all_visible(self, visible: bool, only: int | None = None) -> None:
        for rid in self.replica_ids():
            self.set_replica_visible(rid, visible if only is None else rid == only)

    def _legend_clicked(self, item: pg.PlotDataItem) -> None:
        # pyqtgraph 0.14's ItemSample has already toggled the curve: sync chips and data.
        for rid, curve in self.curves.curves.items():
            if curve is item:
                self.set_replica_visible(rid, bool(curve.isVisible()))

    def _rebuild_toggles(self) -> None:
        ids = self.replica_ids()
        self.legend.clear()
        self.legend.setVisible(0 < len(ids) <= MAX_LEGEND_ENTRIES)  # no empty box
        for rid in ids if len(ids) <= MAX_LEGEND_ENTRIES else ():
            self.legend.addItem(self.curves.curves[rid], f"replica {rid}")
        self.legend.setColumnCount(1 if len(ids) <= 4 else 2 if len(ids) <= 8 else 4)
        for sample, label in self.legend.items:  # repainted from pixmaps while unchanged
            for item in (sample, label, label.item):
                item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        while self._chip_row.count():
            item = self._chip_row.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self._chips.clear()
        inline = len(ids) <= MAX_INLINE_TOGGLES
        if inline:
            for rid in ids:
                chip = QCheckBox(str(rid))
                chip.setObjectName("replicaToggle")
                chip.setToolTip(f"Show or hide replica {rid}")
                chip.setIcon(swatch_icon(series_colour(rid)))
                chip.setChecked(self.is_replica_visible(rid))
                chip.toggled.connect(lambda on, r=rid: self.set_replica_visible(r, on))
                chip.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
                chip.customContextMenuRequested.connect(
                    lambda pos, r=rid, c=chip: self._chip_menu(r, c.mapToGlobal(pos)))
                self._chip_row.addWidget(chip)
                self._chips[rid] = chip
        self.menu_button.setVisible(len(ids) > 1)

    def _chip_menu(self, rid: int, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction(f"Show only replica {rid}", lambda: self.set_all_visible(True, rid))
        menu.addAction("Show all", lambda: self.set_all_visible(True))
        menu.addAction("Hide all", lambda: self.set_all_visible(False))
        menu.exec(pos)

    def _fill_menu(self) -> None:
        menu = self.menu_button.menu()
        menu.clear()
        menu.addAction("Show all", lambda: self.set_all_visible(True))
        menu.addAction("Hide all", lambda: self.set_all_visible(False))
        menu.addSeparator()
        for rid in self.replica_ids():
            act = menu.addAction(swatch_icon(series_colour(rid)), f"replica {rid}")
            act.setCheckable(True)
            act.setChecked(self.is_replica_visible(rid))
            act.toggled.connect(lambda on, r=rid: self.set_replica_visible(r, on))


class ThroughputPanel(PlotPanel):
    """Examples per second of each task, x = step; y always includes 0."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Throughput", theme, "throughput", parent=parent)
        self.set_axis_label("left", "examples/s", "ex/s")
        self.set_axis_label("bottom", "step")
        self.curves = self.add_curve_set(self._make, layer_only=True)
        self.y_mode = "zero"

    def _make(self, key: str, index: int) -> pg.PlotDataItem:
        return make_curve(series_colour(index), key)

    def clear(self) -> None:
        self.curves.clear()
        self.reset_view()
        self.set_readout("")

    def update_data(self, data: Mapping[str, XY]) -> None:
        self.curves.update(data)

    def show_readout(self) -> None:
        parts, tips = [], []
        many = len(self.curves.curves) > 2
        for index, key in enumerate(self.curves.curves):
            last = self.curves.last.get(key)
            rate = format_rate(last) if last is not None else "–"
            name = short_task(str(key)) if many else str(key)
            parts.append(swatch_html(series_colour(index), f"{name} <b>{rate}</b>"))
            tips.append(f"{key}: {last:,.1f} examples/s" if last is not None else f"{key}: –")
        rates = [v for v in (self.curves.last.get(k) for k in self.curves.curves) if v is not None]
        summary = readout_summary(f"{len(parts)} tasks", rates, format_rate) \
            if len(parts) > 1 else ""
        self.set_readout("&nbsp;&nbsp;".join(parts), summary, "\n".join(tips))


def short_task(task: str) -> str:
    """'worker:3' -> 'w3', 'chief:0' -> 'c0', 'ps:1' -> 'ps1'; a machine name stays as it is
    ('local' reads 'here')."""
    if ":" not in task:
        return "here" if task == LOCAL_MACHINE else task
    kind, _, index = task.partition(":")
    return f"{kind if kind == 'ps' else kind[:1]}{index}"


def format_rate(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.1f}k/s"
    return f"{value:,.0f}/s" if value >= 100 else f"{value:.3g}/s"


class DevicePanel(PlotPanel):
    """Utilisation % or memory MiB per device label over elapsed time (a toggle picks which;
    the readout always shows both latest values)."""

    def __init__(self, theme: PlotTheme, parent: QWidget | None = None) -> None:
        super().__init__("Device use", theme, "device", bottom_axis=ElapsedAxis("bottom"),
                         parent=parent)
        self.set_axis_label("bottom", "elapsed")
        self.util = self.add_curve_set(self._make_util, layer_only=True)
        self.mem = self.add_curve_set(self._make_mem, layer_only=True)
        self.y_mode = "zero"
        self._colours: dict[str, QColor] = {}
        self.device_kind = ""
        self.ended = False  # the run ended: the readout is its last sample while it trained
        self.mode = ""
        self.mode_buttons: dict[str, QToolButton] = {}
        group = QButtonGroup(self)
        for mode, text, tip in (("util", "%", "Show utilisation (%)"),
                                ("mem", "MiB", "Show memory used (MiB)")):
            button = QToolButton()
            button.setObjectName("deviceModeButton")
            button.setText(text)
            button.setToolTip(tip)
            button.setMinimumWidth(36)
            button.setCheckable(True)
            button.setAutoRaise(True)
            button.clicked.connect(lambda _=False, m=mode: self.set_mode(m))
            group.addButton(button)
            self.header.addWidget(button)
            self.mode_buttons[mode] = button
        self.set_mode("util")

    def _colour(self, label: str) -> QColor:
        if label not in self._colours:
            self._colours[label] = series_colour(len(self._colours))
        return self._colours[label]

    def _make_util(self, key: str, index: int) -> pg.PlotDataItem:
        curve = make_curve(self._colour(key), f"{key} utilisation", gaps=True)
        curve.setVisible(self.mode == "util")
        return curve

    def _make_mem(self, key: str, index: int) -> pg.PlotDataItem:
        curve = make_curve(self._colour(key), f"{key} memory", gaps=True)
        curve.setVisible(self.mode == "mem")
        return curve

    def set_mode(self, mode: str) -> None:
        """'util' (utilisation %, fixed 0-100) or 'mem' (memory MiB, from 0)."""
        if mode == self.mode:
            return
        self.mode = mode
        self.mode_buttons[mode].setChecked(True)
        for which, curves in (("util", self.util), ("mem", self.mem)):
            for key, curve in curves.curves.items():
                curve.setVisible(which == mode)
                curves.flush(key)
        self.show_readout()
        if mode == "util":
            self.set_axis_label("left", "utilisation (%)", "%")
            self.y_mode = "fixed"
            self.plot.setYRange(-6, 106, padding=0)
        else:
            self.set_axis_label("left", "memory (MiB)", "MiB")
            self.y_mode = "zero"
            self.settle(force=True)

    def clear(self) -> None:
        self.util.clear()
        self.mem.clear()
        self.reset_view()
        self._colours.clear()
        self.set_device_kind("")
        self.set_readout("")

    def set_device_kind(self, kind: str) -> None:
        """'gpu', 'cpu' or '' (not known yet); the title says which devices are shown."""
        if kind == self.device_kind:
            return
        self.device_kind = kind
        titles = {"gpu": "GPU use", "cpu": "CPU use (no GPU)"}
        self.title_label.setText(titles.get(kind, "Device use"))

    def update_data(self, util: Mapping[str, XY], mem: Mapping[str, XY]) -> None:
        labels = list(util) + [k for k in mem if k not in util]
        if labels:
            self.set_device_kind("gpu" if any(" gpu" in k for k in labels) else "cpu")
        self.util.update(util)
        self.mem.update(mem)

    def show_readout(self) -> None:
        labels = list(self._colours)  # in order of appearance
        # "worker:0 cpu0", or "h2 cpu0" in a multi-machine run (a machine's name may hold
        # spaces; the device part never does)
        tasks = {label.rpartition(" ")[0] for label in labels}
        parts, tips = [], []
        for label in labels:
            u, m = self.util.last.get(label), self.mem.last.get(label)
            util = f"{u:.0f}%" if u is not None else "–"
            mem = f"{m:,.0f} MiB" if m is not None else "–"
            tips.append(f"{label}: {util}, {mem}")
            task, _, dev = label.rpartition(" ")
            # the value the plot shows (% or MiB; both in the tooltip): a narrow card has
            # room for one
            value = util if self.mode == "util" else mem
            if len(tasks) == 1:
                name = dev
            else:
                name = short_task(task) if len(labels) == len(tasks) else f"{short_task(task)}/{dev}"
            parts.append(swatch_html(self._colour(label), f"{name} <b>{value}</b>"))
        values = [self.util.last.get(label) if self.mode == "util" else self.mem.last.get(label)
                  for label in labels]
        count = f"{len(labels)} tasks" if len(labels) == len(tasks) else \
            f"{len(labels)} devices"
        summary = readout_summary(count, [v for v in values if v is not None],
                                  (lambda v: f"{v:.0f}%") if self.mode == "util"
                                  else (lambda v: f"{v:,.0f} MiB"))
        if self.ended and parts:
            # after the run, its last sample while it trained (not the machine idle after it)
            parts.insert(0, "at the end:")
            summary = f"at the end: {summary}"
            tips.insert(0, "The last sample while the run trained (its memory peak is in the "
                           "Memory panel)")
        self.set_readout("&nbsp;&nbsp;".join(parts), summary if len(labels) > 1 else "",
                         "\n".join(tips))
