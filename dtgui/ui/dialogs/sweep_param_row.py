"""One row of the sweep dialog: a varied parameter (which setting, its space: a list of
values or a range, uniform or log-uniform, of ints or floats), its problems under it as they
are typed. A row reads and writes the `NAME=SPACE` text `dtgui sweep --param` takes, so the
form and the command line share one parser (`dtgui.core.sweeps.sweep.parse_param`)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.sweeps.sweep import PLAN_FIELDS, Param, SpaceKind, SweepError, parse_param
from dtgui.ui.dialogs.sweep_words import ERROR_STYLE, in_words, sentence

# The settings a row may vary: (what the user reads, the parameter's name).
SETTINGS = (
    ("learning rate", "lr"), ("batch size (per replica)", "batch-size"),
    ("optimizer", "optimizer"), ("weight decay", "weight-decay"), ("momentum", "momentum"),
    ("learning-rate schedule", "schedule"), ("warm-up steps", "warmup"),
    ("clip norm", "clip-norm"), ("gradient accumulation", "grad-accumulation"),
    ("steps", "steps"), ("seed", "seed"),
)
DTGUI_VALUE, SCRIPT_ARG, SCRIPT_ENV = "dtgui", "arg", "env"  # rows that need a name typed
NAMED = (("a DTGUI_* value…", DTGUI_VALUE), ("a script argument…", SCRIPT_ARG),
         ("a script variable…", SCRIPT_ENV))
NAME_HINTS = {DTGUI_VALUE: "DTGUI_STEPS", SCRIPT_ARG: "--dropout", SCRIPT_ENV: "DROPOUT"}
NAME_WHAT = {DTGUI_VALUE: "the DTGUI_* value", SCRIPT_ARG: "your script's argument",
             SCRIPT_ENV: "your script's variable"}
# A first space for each setting, so that a new row is already a sensible one.
STARTING_SPACE = {
    "lr": "loguniform:1e-4:1e-1", "batch-size": "choice:16,32,64",
    "optimizer": "choice:adam,sgd", "weight-decay": "loguniform:1e-5:1e-2",
    "momentum": "uniform:0.8:0.99", "schedule": "choice:constant,cosine",
    "warmup": "int:0:100", "clip-norm": "uniform:0.5:5", "grad-accumulation": "choice:1,2,4",
    "steps": "choice:100,200", "seed": "int:0:9",
}
# What each setting's values are: "int", "float" or "str" (names: a list only).
SETTING_KINDS = {name: parse_param(f"{name}={space}").kind
                 for name, space in STARTING_SPACE.items()}
# What a list of values of each setting looks like (the placeholder of its values field).
LIST_EXAMPLES = {
    "lr": "0.0001, 0.001, 0.01", "batch-size": "16, 32, 64", "optimizer": "adam, sgd",
    "weight-decay": "0.00001, 0.0001, 0.001", "momentum": "0.8, 0.9, 0.99",
    "schedule": "constant, cosine", "warmup": "0, 50, 100", "clip-norm": "0.5, 1, 5",
    "grad-accumulation": "1, 2, 4", "steps": "100, 200", "seed": "1, 2, 3",
}
LIST, RANGE, LOG_RANGE = "list of values", "range (uniform)", "range (log-uniform)"
SPACES = (LIST, RANGE, LOG_RANGE)


def _space_kind(space: str, number: str) -> SpaceKind:
    if space == LIST:
        return SpaceKind.CHOICE
    if space == LOG_RANGE:
        return SpaceKind.LOGINT if number == "int" else SpaceKind.LOGUNIFORM
    return SpaceKind.INT if number == "int" else SpaceKind.UNIFORM


class ParamRow(QWidget):
    """One varied parameter: which setting, its space, its values; its problems below it."""

    changed = Signal()
    removed = Signal(object)  # ParamRow: this row, the user removed it

    def __init__(self, text: str = "lr=" + STARTING_SPACE["lr"],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setting = QComboBox()
        for label, name in SETTINGS + NAMED:
            self.setting.addItem(label, name)
        self.setting.setToolTip("The setting this row varies")
        self.name_edit = QLineEdit()
        self.name_edit.setToolTip("DTGUI_NAME (a value dtgui sets), --option (your script's "
                                  "argument) or NAME (your script's variable)")
        self.space = QComboBox()
        self.space.addItems(list(SPACES))
        self.number = QComboBox()
        self.number.addItems(["float", "int"])
        self.number.setToolTip("Whole numbers (int) or any number (float)")
        self.values = QLineEdit()
        self.values.setPlaceholderText("values, separated by commas")
        self.low = QLineEdit()
        self.low.setPlaceholderText("lowest")
        self.high = QLineEdit()
        self.high.setPlaceholderText("highest")
        self.remove = QToolButton()
        self.remove.setText("✕")
        self.remove.setToolTip("Do not vary this parameter")
        self.remove.clicked.connect(lambda: self.removed.emit(self))
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setStyleSheet(ERROR_STYLE)
        self.error.hide()
        line = QHBoxLayout()
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(self.setting)
        line.addWidget(self.name_edit)
        line.addWidget(self.space)
        line.addWidget(self.number)
        line.addWidget(self.values, 2)
        line.addWidget(self.low, 1)
        self._to_label = QLabel("to")
        self._to_label.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Preferred)
        line.addWidget(self._to_label)
        line.addWidget(self.high, 1)
        line.addWidget(self.remove)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.setSpacing(2)
        layout.addLayout(line)
        layout.addWidget(self.error)
        self.load(text)
        self.setting.currentIndexChanged.connect(self._setting_changed)
        self.space.currentIndexChanged.connect(self._shape)
        for signal in (self.setting.currentIndexChanged, self.space.currentIndexChanged,
                       self.number.currentIndexChanged, self.name_edit.textChanged,
                       self.values.textChanged, self.low.textChanged, self.high.textChanged):
            signal.connect(self.changed)

    # -- text <-> form ------------------------------------------------------------------------
    def load(self, text: str) -> None:
        """Show `NAME=SPACE` (as `--param` takes it) in the row's fields, unchecked."""
        name, _, spec = text.partition("=")
        kind, _, rest = spec.partition(":")
        setting, typed = _setting_of(name.strip())
        widgets = (self.setting, self.space, self.number, self.name_edit, self.values,
                   self.low, self.high)
        for widget in widgets:
            widget.blockSignals(True)
        self.setting.setCurrentIndex(max(0, self.setting.findData(setting)))
        self.name_edit.setText(typed)
        try:
            space = SpaceKind(kind.strip().lower())
        except ValueError:
            space = SpaceKind.CHOICE
        self.space.setCurrentText(LIST if space is SpaceKind.CHOICE else
                                  LOG_RANGE if space.is_log else RANGE)
        self.number.setCurrentText("int" if space.is_int else "float")
        if space is SpaceKind.CHOICE:
            self.values.setText(rest)
        else:
            low, _, high = rest.partition(":")
            self.low.setText(low)
            self.high.setText(high)
        for widget in widgets:
            widget.blockSignals(False)
        self._shape()

    def name(self) -> str:
        """The parameter's name as `--param` takes it ("" when a name is still to be typed)."""
        setting = str(self.setting.currentData())
        typed = self.name_edit.text().strip()
        if setting == DTGUI_VALUE:
            return typed
        if setting == SCRIPT_ARG:
            return typed if not typed or typed.startswith("-") else f"--{typed}"
        if setting == SCRIPT_ENV:
            return f"env:{typed}" if typed else ""
        return setting

    def text(self) -> str:
        """The row as `NAME=SPACE`."""
        kind = _space_kind(self.space.currentText(), self.number.currentText())
        if kind is SpaceKind.CHOICE:
            return f"{self.name()}=choice:{self.values.text().strip()}"
        return f"{self.name()}={kind.value}:{self.low.text().strip()}:{self.high.text().strip()}"

    def param_or_problems(self) -> tuple[Param | None, list[str]]:
        """The row's parameter, or None and what is wrong."""
        setting = str(self.setting.currentData())
        if not self.name():
            return None, [f"Type the name of {NAME_WHAT[setting]}, e.g. {NAME_HINTS[setting]}."]
        label = self.label()
        if self.space.currentText() == LIST:
            if not [v for v in self.values.text().split(",") if v.strip()]:
                return None, [sentence(f"{label}: type its values, separated by commas.")]
        elif not self.low.text().strip() or not self.high.text().strip():
            return None, [sentence(f"{label}: type the lowest and the highest value.")]
        try:
            return parse_param(self.text()), []
        except SweepError as exc:
            return None, [in_words(p, {self.name(): label}) for p in exc.problems]

    def label(self) -> str:
        """The parameter as the user reads it: "learning rate", or the name typed."""
        setting = str(self.setting.currentData())
        return dict((n, t) for t, n in SETTINGS).get(setting) or self.name()

    def show_problems(self, problems: list[str]) -> None:
        self.error.setText("\n".join(problems))
        self.error.setVisible(bool(problems))

    # -- shape ----------------------------------------------------------------------------
    def _setting_changed(self) -> None:
        setting = str(self.setting.currentData())
        if setting in STARTING_SPACE:
            self.load(f"{setting}={STARTING_SPACE[setting]}")
        else:
            self.name_edit.setPlaceholderText(NAME_HINTS[setting])
            self._shape()

    def _shape(self) -> None:
        """Only the fields the row's kind of setting and space use are shown; a setting
        whose values are whole numbers, numbers or names fixes what the row may choose."""
        setting = str(self.setting.currentData())
        kind = SETTING_KINDS.get(setting, "")
        if kind == "str" and self.space.currentText() != LIST:
            self.space.setCurrentText(LIST)  # names: a list (this calls _shape again)
            return
        if kind in ("int", "float") and self.number.currentText() != kind:
            self.number.setCurrentText(kind)
        self.space.setEnabled(kind != "str")
        self.number.setEnabled(not kind)
        self.name_edit.setVisible(setting in NAME_HINTS)
        example = LIST_EXAMPLES.get(setting, "1, 2, 3" if kind or self.number.currentText()
                                    == "int" else "0.1, 0.5")
        self.values.setPlaceholderText(f"values, separated by commas: {example}")
        if setting in NAME_HINTS:
            self.name_edit.setPlaceholderText(NAME_HINTS[setting])
        listed = self.space.currentText() == LIST
        self.values.setVisible(listed)
        for widget in (self.number, self.low, self.high, self._to_label):
            widget.setVisible(not listed)


def _setting_of(name: str) -> tuple[str, str]:
    """The row's setting for a parameter name, and the name typed in its own field."""
    names = {n for _, n in SETTINGS}
    if name in names:
        return name, ""
    field = PLAN_FIELDS.get(name) or PLAN_FIELDS.get(name.replace("_", "-"))
    if name.startswith("DTGUI_"):
        return DTGUI_VALUE, name
    if field is not None:  # another name of a setting a row offers
        for n in names:
            if PLAN_FIELDS.get(n) == field:
                return n, ""
    if name.startswith("env:"):
        return SCRIPT_ENV, name[4:]
    return SCRIPT_ARG, name.removeprefix("arg:")

