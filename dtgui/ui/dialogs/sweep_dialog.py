"""The dialog that sets up a sweep of a run setup (docs/sweeps.md): a row a varied parameter
(which setting, its space: a list of values or a range, uniform or log-uniform, of ints or
floats), then the search, the trials, how many at once, the objective and its direction, the
pruner, the machines its trials run on, the study's storage and the sweep's folder.

Every problem is shown as it is typed, beside the row it belongs to: a row's own (an empty or
inverted range: `dtgui.core.sweeps.sweep.parse_param`) and the run setup's (a setting the chosen model
or script cannot take, a value it refuses: `dtgui.core.sweeps.sweep.check`). Start sweep is enabled
once there is none. For a GPU run setup, the machines' last GPU figures (given by the machines
panel: nothing is asked here) say how many trials can run at once; more than that is said
(they will wait). A row reads and writes the `NAME=SPACE` text `dtgui sweep --param` takes,
so the form and the command line share one parser.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.sweeps.sweep import (
    DEFAULT_OBJECTIVE,
    PLAN_FIELDS,
    PRUNERS,
    SEARCHES,
    SWEEP_FILE,
    Param,
    SpaceKind,
    SweepError,
    SweepSpec,
    check,
    default_pruner,
    new_sweep_folder,
    parse_param,
)
from dtgui.core.target_job import TargetJob
from dtgui.launch.drivers import Refused, owner_of, trial_job
from dtgui.launch.gpus.free_slots import GpuReport, free_groups, per_trial_gpus

ERROR_STYLE = "color: #b00020"
JOB_ROLE = Qt.ItemDataRole.UserRole + 1  # a "Trials run on" item whose trials are jobs there
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
OBJECTIVES = (DEFAULT_OBJECTIVE, "val_accuracy", "loss")
DEMO_PARAMS = ("lr=loguniform:1e-4:1e-1", "batch-size=choice:16,32,64")
SCRIPT_PARAMS = ("lr=loguniform:1e-4:1e-1",)


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
                return None, [_sentence(f"{label}: type its values, separated by commas.")]
        elif not self.low.text().strip() or not self.high.text().strip():
            return None, [_sentence(f"{label}: type the lowest and the highest value.")]
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


# The command line's syntax in a problem, and what the form says instead.
_SYNTAX = (
    (re.compile(r"^--param "), ""),
    (re.compile(r" \(choice:[^)]*\)"), ""),
    (re.compile(r"use int:LOW:HIGH or logint:LOW:HIGH \(or a list\)"),
     "choose int, or a list of values"),
    (re.compile(r"for one value use choice:VALUE"), "for one value use a list of values"),
    (re.compile(r"LOW must be below HIGH"), "the lowest must be below the highest"),
    (re.compile(r"a range is \w+:LOW:HIGH"), "a range needs its lowest and highest value"),
    (re.compile(r" \((?:int|logint|uniform|loguniform):[^)]*\)"), ""),
    (re.compile(r" \(--param NAME=SPACE\)"), ""),
)


def in_words(problem: str, labels: dict[str, str]) -> str:
    """A problem of the sweep's checks (written for `dtgui sweep --param`) as the form says
    it: without the command line's syntax, each parameter by the name the form shows."""
    for pattern, words in _SYNTAX:
        problem = pattern.sub(words, problem)
    for name, label in labels.items():
        if name and label and name != label:
            problem = re.sub(rf"^{re.escape(name)}=", f"{label} ", problem)
            problem = re.sub(rf"^{re.escape(name)}(?=[: ])", label, problem)
            problem = re.sub(rf"(?<=for ){re.escape(name)}\b", label, problem)
    return _sentence(problem)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


class SweepDialog(QDialog):
    def __init__(self, plan: Plan, folder: Path | None = None,
                 parent: QWidget | None = None, machines: list[str] | None = None,
                 gpus: dict[str, list[GpuInfo]] | None = None,
                 job_machines: Sequence[Machine] = ()) -> None:
        """`machines`: the registered machines a trial may run on besides this one; `gpus`:
        machine ("local" = this one) -> its GPUs by its last probe; `job_machines`: the
        registered machines a kind owns (a Slurm cluster; checked alone: each trial is a job
        there, made by the kind's driver)."""
        super().__init__(parent)
        self.setWindowTitle(f"Sweep of {plan.run_name}")
        self.base_plan = plan
        self.gpus = dict(gpus or {})
        self.owners = {m.name: d for m in job_machines if (d := owner_of(m)) is not None}
        self.job_machines = {m.name: m for m in job_machines if m.name in self.owners}
        self.machines_list = QListWidget()
        self.machines_list.setToolTip(
            "Each trial runs whole on one of the checked machines (on a GPU run setup, a trial "
            "per free GPU, or group of GPUs, of each); more at once than free places wait. "
            "A cluster with a scheduler (Slurm), checked alone: each trial is a job of its own "
            "in its queue, placed by its scheduler, as many queued at once as asked")
        names = [LOCAL_MACHINE, *(n for n in machines or [] if n not in self.job_machines)]
        for name in [*names, *self.job_machines]:
            text = ("this machine" if name == LOCAL_MACHINE else name) + self._gpu_text(name)
            if name in self.job_machines:
                text = self.owners[name].trial_target_text(self.job_machines[name])
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setData(JOB_ROLE, name in self.job_machines)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name == LOCAL_MACHINE
                               else Qt.CheckState.Unchecked)
            self.machines_list.addItem(item)
        self.machines_list.setMaximumHeight(22 * min(4, self.machines_list.count()) + 8)
        placed = bool(plan.tasks) and any(not t.is_local for t in plan.tasks)
        self.machines_list.setEnabled(not placed)
        if placed:
            self.machines_list.setToolTip("This run setup places its tasks on registered "
                                          "machines: every trial runs there")
        self.param_rows: list[ParamRow] = []
        self._rows_box = QVBoxLayout()
        self._rows_box.setContentsMargins(0, 0, 0, 0)
        rows_widget = QWidget()
        rows_outer = QVBoxLayout(rows_widget)
        rows_outer.setContentsMargins(4, 4, 4, 4)
        rows_outer.addLayout(self._rows_box)
        rows_outer.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.StyledPanel)
        scroll.setWidget(rows_widget)
        scroll.setMinimumHeight(150)
        self.add_button = QPushButton("Add a parameter")
        self.add_button.clicked.connect(lambda: self.add_param())

        self.search_box = QComboBox()
        for search, label in zip(SEARCHES, ("Bayesian (TPE)", "random", "grid (every "
                                                                         "combination)"),
                                 strict=True):
            self.search_box.addItem(label, search)
        self.trials_spin = QSpinBox()
        self.trials_spin.setRange(1, 10_000)
        self.trials_spin.setValue(12)
        self._grid_size = 0  # the grid's combinations the trials were set to (0: no grid)
        self.parallel_spin = QSpinBox()
        self.parallel_spin.setRange(1, 256)
        self.parallel_spin.setValue(2)
        self.parallel_spin.setToolTip("Trials at once; more than free devices wait for one")
        self.objective_box = QComboBox()
        self.objective_box.setEditable(True)
        self.objective_box.addItems(list(OBJECTIVES))
        self.objective_box.setToolTip("val_loss (best validation loss), val_METRIC, loss "
                                      "(final training loss) or any scalar your script "
                                      "reports")
        self.direction_box = QComboBox()
        self.direction_box.addItem("the objective's own (losses down, accuracy up)", "")
        self.direction_box.addItem("minimize", "minimize")
        self.direction_box.addItem("maximize", "maximize")
        self.pruner_box = QComboBox()
        for pruner, label in zip(PRUNERS, ("median (stop trials worse than the median)",
                                           "successive halving", "none"), strict=True):
            self.pruner_box.addItem(label, pruner)
        self.pruner_box.setToolTip("Stops trials clearly worse than the others early. A grid "
                                   "search trains every value to the end unless you choose "
                                   "a pruner")
        self._pruner_chosen = False  # by the user: the search no longer sets it
        self.pruner_box.activated.connect(self._pruner_picked)
        self.search_box.currentIndexChanged.connect(self._search_changed)
        self.storage_edit = QLineEdit()
        self.storage_edit.setPlaceholderText("SQLite in the folder (or postgresql://...)")
        self.folder_edit = QLineEdit(str(folder if folder is not None
                                         else new_sweep_folder(plan.run_name)))
        self.folder_edit.setToolTip("A new folder: the sweep's study, its settings and each "
                                    "trial's run go there")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        where = QHBoxLayout()
        where.addWidget(self.folder_edit, 1)
        where.addWidget(browse)
        counts = QGridLayout()
        counts.addWidget(self.trials_spin, 0, 0)
        self.trials_label = QLabel("trials,")  # a grid's: how many combinations it has
        counts.addWidget(self.trials_label, 0, 1)
        counts.addWidget(self.parallel_spin, 0, 2)
        counts.addWidget(QLabel("at once"), 0, 3)
        counts.setColumnStretch(4, 1)
        form = QFormLayout()
        form.addRow("Search", self.search_box)
        form.addRow("Trials", counts)
        form.addRow("Objective", self.objective_box)
        form.addRow("Direction", self.direction_box)
        form.addRow("Pruner", self.pruner_box)
        form.addRow("Trials run on", self.machines_list)
        form.addRow("Study storage", self.storage_edit)
        form.addRow("Folder", where)
        self.capacity = QLabel("")  # how many trials the free GPUs take at once
        self.capacity.setWordWrap(True)
        self.capacity.setStyleSheet("color: #8a5a00")
        self.problems = QLabel("")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet(ERROR_STYLE)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setText("Start sweep")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        head = QHBoxLayout()
        head.addWidget(QLabel("<b>Parameters to vary</b>"), 1)
        head.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addWidget(scroll, 1)
        layout.addLayout(form)
        layout.addWidget(self.capacity)
        layout.addWidget(self.problems)
        layout.addWidget(self.buttons)
        self.resize(900, 600)
        for text in SCRIPT_PARAMS if plan.script is not None else DEMO_PARAMS:
            self.add_param(text, update=False)
        for signal in (self.objective_box.currentTextChanged, self.folder_edit.textChanged,
                       self.storage_edit.textChanged, self.trials_spin.valueChanged,
                       self.parallel_spin.valueChanged):
            signal.connect(self._update)
        for box in (self.search_box, self.direction_box, self.pruner_box):
            box.currentIndexChanged.connect(self._update)
        self.machines_list.itemChanged.connect(self._update)
        self._update()

    def _pruner_picked(self) -> None:
        self._pruner_chosen = True

    def _search_changed(self) -> None:
        """A search's own pruner (none for a grid) until the user chooses one."""
        if not self._pruner_chosen:
            pruner = default_pruner(str(self.search_box.currentData()))
            self.pruner_box.setCurrentIndex(max(0, self.pruner_box.findData(pruner)))

    # -- rows -----------------------------------------------------------------------------
    def add_param(self, text: str = "", update: bool = True) -> ParamRow:
        """A new row (`NAME=SPACE`; by default the first setting not varied yet)."""
        if not text:
            taken = {row.name() for row in self.param_rows}
            name = next((n for _, n in SETTINGS if n not in taken), "lr")
            text = f"{name}={STARTING_SPACE[name]}"
        row = ParamRow(text)
        row.changed.connect(self._update)
        row.removed.connect(self._remove)
        self.param_rows.append(row)
        self._rows_box.addWidget(row)
        if update:
            self._update()
        return row

    def set_params(self, texts: list[str]) -> None:
        """The rows, from `NAME=SPACE` texts (as `dtgui sweep --param` takes them)."""
        for row in list(self.param_rows):
            self._remove(row, update=False)
        for text in texts:
            self.add_param(text, update=False)
        self._update()

    def _remove(self, row: object, update: bool = True) -> None:
        if isinstance(row, ParamRow) and row in self.param_rows:
            self.param_rows.remove(row)
            row.setParent(None)
            row.deleteLater()
            if update:
                self._update()

    # -- what was set up ------------------------------------------------------------------
    def spec(self) -> SweepSpec:
        """The sweep as set up; SweepError with every problem of its parameters."""
        params, problems = [], []
        for row in self.param_rows:
            param, wrong = row.param_or_problems()
            problems += wrong
            if param is not None:
                params.append(param)
        if problems:
            raise SweepError(problems)
        return self._spec_of(params)

    def _spec_of(self, params: list[Param]) -> SweepSpec:
        job, _ = self.trial_job()
        return SweepSpec(params=tuple(params),
                         trials=self.trials_spin.value(),
                         parallel=self.parallel_spin.value(),
                         search=str(self.search_box.currentData()),
                         objective=self.objective_box.currentText().strip(),
                         direction=str(self.direction_box.currentData()),
                         pruner=str(self.pruner_box.currentData()),
                         storage=self.storage_edit.text().strip(),
                         trial_on=() if job is not None else tuple(self.trial_on()),
                         job=job)

    def _checked(self) -> list[str]:
        """The names checked (machines, and those whose trials are jobs)."""
        if not self.machines_list.isEnabled():
            return []
        return [str(item.data(Qt.ItemDataRole.UserRole))
                for item in (self.machines_list.item(i)
                             for i in range(self.machines_list.count()))
                if item is not None and item.checkState() == Qt.CheckState.Checked]

    def trial_on(self) -> list[str]:
        """The machines checked, when they are not just this one (then: [], the default)."""
        names = [n for n in self._checked() if n not in self.job_machines]
        return [] if names == [LOCAL_MACHINE] else names

    def trial_job(self) -> tuple[TargetJob | None, str]:
        """The job each trial is when a machine whose trials are jobs is checked (its
        driver's `trial_job`), else None; and why its defaults make no job ("" when they
        do)."""
        chosen = [n for n in self._checked() if n in self.job_machines]
        if not chosen:
            return None, ""
        try:
            return trial_job(self.base_plan, self.job_machines[chosen[0]]), ""
        except Refused as exc:
            return None, str(exc)

    def folder(self) -> Path | None:
        text = self.folder_edit.text().strip()
        return Path(text).expanduser() if text else None

    def problems_now(self) -> list[str]:
        """Every problem, each row's shown under it and the others below the form."""
        by_row: dict[int, list[str]] = {}
        parsed: dict[int, Param] = {}
        for i, row in enumerate(self.param_rows):
            param, by_row[i] = row.param_or_problems()
            if param is not None:
                parsed[i] = param
        others: list[str] = []
        # The run setup's checks, over the rows that read well (a row still being typed
        # does not hide another's problem); the sweep's own only once every row reads well.
        spec = self._spec_of(list(parsed.values()))
        rows_read = not any(by_row.values())
        for problem in check(spec, self.base_plan):
            index = next((i for i, p in parsed.items()
                          if problem.startswith((f"{p.name}:", f"{p.name}="))), None)
            labels = {p.name: self.param_rows[i].label() for i, p in parsed.items()}
            if index is not None:
                by_row[index].append(in_words(problem, labels))
            elif rows_read:
                others.append(in_words(problem, labels))
        if self.machines_list.isEnabled() and not any(
                item is not None and item.checkState() == Qt.CheckState.Checked
                for item in (self.machines_list.item(i)
                             for i in range(self.machines_list.count()))):
            others.append("Check at least one machine for the trials to run on.")
        checked = self._checked()
        jobs_on = [n for n in checked if n in self.job_machines]
        if jobs_on and len(checked) > 1:
            others.append(f"{jobs_on[0]} takes every trial (its scheduler places each "
                          "trial's job): check it alone.")
        others += [why for why in [self.trial_job()[1]] if why]
        folder = self.folder()
        if folder is None:
            others.append("Choose the sweep's folder.")
        elif (folder / SWEEP_FILE).exists():
            others.append(f"{folder} holds a sweep already: open it (Sweep > Open a sweep…) "
                          "or choose another folder.")
        for i, row in enumerate(self.param_rows):
            row.show_problems(by_row[i])
        self.problems.setText("\n".join(others))
        return [p for i in sorted(by_row) for p in by_row[i]] + others

    def _gpu_text(self, name: str) -> str:
        """" — 3 of 4 GPUs free" for a GPU run setup, by the machine's last figures."""
        if not self.base_plan.on_gpu or name not in self.gpus:
            return ""
        gpus = self.gpus[name]
        return f" — {len(GpuReport(gpus).idle())} of {len(gpus)} GPU(s) free" if gpus \
            else " — no GPU found"

    def capacity_text(self) -> str:
        """For a GPU run setup: how many trials the checked machines' free GPUs take at once,
        when fewer than asked ("" otherwise, or when their GPUs are not known yet)."""
        plan = self.base_plan
        names = self.trial_on() or [LOCAL_MACHINE]
        if self.trial_job()[0] is not None:  # its scheduler places the trials' jobs
            return ""
        if not plan.on_gpu or not self.machines_list.isEnabled() \
                or any(n not in self.gpus for n in names):
            return ""
        per_trial = per_trial_gpus(plan)
        groups = len(free_groups({n: GpuReport(self.gpus[n]) for n in names}, per_trial))
        asked = self.parallel_spin.value()
        if groups >= asked:
            return ""
        return (f"{asked} trials at once were asked, but the machines checked have {groups} "
                f"group(s) of {per_trial} free GPU(s) by their last figures: the other trials "
                "will wait for one.")

    def _update(self) -> None:
        self._fit_trials_to_grid()
        self.capacity.setText(self.capacity_text())
        self.capacity.setVisible(bool(self.capacity.text()))
        problems = self.problems_now()
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setEnabled(not problems)

    def _fit_trials_to_grid(self) -> None:
        """A grid search runs each combination once: the trials follow the grid's size when
        it changes (the user may still type fewer), and the label says it."""
        size = 0
        if self.search_box.currentData() == "grid":
            params = [p for p in (row.param_or_problems()[0] for row in self.param_rows)
                      if p is not None]
            size = self._spec_of(params).grid_size() if params else 0
        self.trials_label.setText(f"trials (the grid has {size} combination"
                                  f"{'s' if size != 1 else ''}),"
                                  if size else "trials,")
        if size and size != self._grid_size:
            self._grid_size = size
            self.trials_spin.setValue(size)  # its valueChanged: _update again, nothing new
        self._grid_size = size

    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "The sweep's folder", str(Path.home()))
        if chosen:
            self.folder_edit.setText(chosen)

    def accept(self) -> None:
        if not self.problems_now():
            super().accept()
