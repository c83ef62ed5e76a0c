"""The dialog that sets up a sweep of a run setup (docs/sweeps.md): a row a varied parameter
(`sweep_param_row.ParamRow`), then the search, the trials, how many at once, the objective
and its direction, the pruner, the machines its trials run on (`sweep_machines`), the
study's storage and the sweep's folder.

Every problem is shown as it is typed, beside the row it belongs to: a row's own (an empty or
inverted range: `dtgui.core.sweeps.sweep.parse_param`) and the run setup's (a setting the
chosen model or script cannot take, a value it refuses: `dtgui.core.sweeps.sweep.check`), in
the form's words (`sweep_words`). Start sweep is enabled once there is none. For a GPU run
setup, the machines' last GPU figures say how many trials can run at once; more than that is
said (they will wait).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import Plan
from dtgui.core.sweeps.sweep import (
    DEFAULT_OBJECTIVE,
    PRUNERS,
    SEARCHES,
    SWEEP_FILE,
    Param,
    SweepError,
    SweepSpec,
    check,
    default_pruner,
    new_sweep_folder,
)
from dtgui.ui.dialogs.sweep_machines import TrialMachines
from dtgui.ui.dialogs.sweep_param_row import SETTINGS, STARTING_SPACE, ParamRow
from dtgui.ui.dialogs.sweep_words import ERROR_STYLE, in_words

OBJECTIVES = (DEFAULT_OBJECTIVE, "val_accuracy", "loss")
DEMO_PARAMS = ("lr=loguniform:1e-4:1e-1", "batch-size=choice:16,32,64")
SCRIPT_PARAMS = ("lr=loguniform:1e-4:1e-1",)


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
        self.machines_list = TrialMachines(plan, machines, gpus, job_machines)
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
        job, _ = self.machines_list.trial_job()
        return SweepSpec(params=tuple(params),
                         trials=self.trials_spin.value(),
                         parallel=self.parallel_spin.value(),
                         search=str(self.search_box.currentData()),
                         objective=self.objective_box.currentText().strip(),
                         direction=str(self.direction_box.currentData()),
                         pruner=str(self.pruner_box.currentData()),
                         storage=self.storage_edit.text().strip(),
                         trial_on=() if job is not None else tuple(
                             self.machines_list.trial_on()),
                         job=job)

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
        others += self.machines_list.problems()
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

    def _update(self) -> None:
        self._fit_trials_to_grid()
        self.capacity.setText(self.machines_list.capacity_text(self.parallel_spin.value()))
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
