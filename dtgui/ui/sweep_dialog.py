"""The dialog that sets up a sweep of a run setup: the parameters to vary (one `NAME=SPACE` a
line, as `dtgui sweep --param` takes them), the search, the trials, how many at once, the
objective, the pruner and the sweep's folder (docs/sweeps.md). Every problem is shown as it
is typed (`dtgui.core.sweep.check`); OK is enabled once there is none.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.plan import Plan
from dtgui.core.sweep import (
    DEFAULT_OBJECTIVE,
    PRUNERS,
    SEARCHES,
    SWEEP_FILE,
    SweepError,
    SweepSpec,
    check,
    parse_param,
)

DEMO_PARAMS = "lr=loguniform:1e-4:1e-1\nbatch-size=choice:16,32,64\n"
SCRIPT_PARAMS = "lr=loguniform:1e-4:1e-1\n"
HELP = ("One parameter a line, NAME=SPACE. Spaces: choice:A,B,C  uniform:LOW:HIGH  "
        "loguniform:LOW:HIGH  int:LOW:HIGH  logint:LOW:HIGH. Names: lr, batch-size, optimizer, "
        "weight-decay, momentum, schedule, warmup, clip-norm, steps, seed ...; for your own "
        "script also --option (its argument) and env:NAME (its variable).")


class SweepDialog(QDialog):
    def __init__(self, plan: Plan, folder: Path | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Sweep of {plan.run_name}")
        self.base_plan = plan
        self.params_edit = QPlainTextEdit(SCRIPT_PARAMS if plan.script is not None
                                          else DEMO_PARAMS)
        self.params_edit.setMinimumHeight(110)
        help_label = QLabel(HELP)
        help_label.setWordWrap(True)
        self.search_box = QComboBox()
        self.search_box.addItems(list(SEARCHES))
        self.trials_spin = QSpinBox()
        self.trials_spin.setRange(1, 10_000)
        self.trials_spin.setValue(12)
        self.parallel_spin = QSpinBox()
        self.parallel_spin.setRange(1, 256)
        self.parallel_spin.setValue(2)
        self.objective_edit = QLineEdit(DEFAULT_OBJECTIVE)
        self.objective_edit.setToolTip("val_loss (best validation loss), val_METRIC, loss "
                                       "(final training loss) or a scalar your script reports")
        self.direction_box = QComboBox()
        self.direction_box.addItems(["the objective's own", "minimize", "maximize"])
        self.pruner_box = QComboBox()
        self.pruner_box.addItems(list(PRUNERS))
        self.storage_edit = QLineEdit()
        self.storage_edit.setPlaceholderText("SQLite in the folder (or postgresql://...)")
        self.folder_edit = QLineEdit(str(folder) if folder is not None else "")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        where = QHBoxLayout()
        where.addWidget(self.folder_edit, 1)
        where.addWidget(browse)
        form = QFormLayout()
        form.addRow("Search", self.search_box)
        form.addRow("Trials", self.trials_spin)
        form.addRow("At once", self.parallel_spin)
        form.addRow("Objective", self.objective_edit)
        form.addRow("Direction", self.direction_box)
        form.addRow("Pruner", self.pruner_box)
        form.addRow("Study storage", self.storage_edit)
        form.addRow("Folder", where)
        self.problems = QLabel("")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #b00020")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setText("Start sweep")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Parameters to vary"))
        layout.addWidget(self.params_edit)
        layout.addWidget(help_label)
        layout.addLayout(form)
        layout.addWidget(self.problems)
        layout.addWidget(self.buttons)
        self.resize(640, 560)
        for signal in (self.params_edit.textChanged, self.objective_edit.textChanged,
                       self.folder_edit.textChanged, self.storage_edit.textChanged):
            signal.connect(self._update)
        for box in (self.search_box, self.direction_box, self.pruner_box):
            box.currentIndexChanged.connect(self._update)
        self._update()

    # -- what was set up ---------------------------------------------------------------------
    def spec(self) -> SweepSpec:
        """The sweep as set up; SweepError with every problem of its parameters."""
        params, problems = [], []
        for line in self.params_edit.toPlainText().splitlines():
            if line.strip() and not line.strip().startswith("#"):
                try:
                    params.append(parse_param(line.strip()))
                except SweepError as exc:
                    problems += exc.problems
        if problems:
            raise SweepError(problems)
        direction = self.direction_box.currentText()
        return SweepSpec(params=tuple(params), trials=self.trials_spin.value(),
                         parallel=self.parallel_spin.value(),
                         search=self.search_box.currentText(),
                         objective=self.objective_edit.text().strip(),
                         direction=direction if direction in ("minimize", "maximize") else "",
                         pruner=self.pruner_box.currentText(),
                         storage=self.storage_edit.text().strip())

    def folder(self) -> Path | None:
        text = self.folder_edit.text().strip()
        return Path(text).expanduser() if text else None

    def problems_now(self) -> list[str]:
        try:
            spec = self.spec()
        except SweepError as exc:
            return exc.problems
        problems = check(spec, self.base_plan)
        folder = self.folder()
        if folder is None:
            problems.append("Choose the sweep's folder.")
        elif (folder / SWEEP_FILE).exists():
            problems.append(f"{folder} holds a sweep already: open it (Sweep… > Open) or "
                            "choose another folder.")
        return problems

    def _update(self) -> None:
        problems = self.problems_now()
        self.problems.setText("\n".join(problems))
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setEnabled(not problems)

    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "The sweep's folder", str(Path.home()))
        if chosen:
            self.folder_edit.setText(chosen)

    def accept(self) -> None:
        if not self.problems_now():
            super().accept()
