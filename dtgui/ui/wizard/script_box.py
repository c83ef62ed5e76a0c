"""The model page's "My own training script" fields: project folder, entry script, arguments,
variables, data on each machine, legacy Keras, metrics from printed lines (printed_box.py);
and, from a background thread, what the bundle will copy (files, size, what is left out) and
what a look at the code finds (the Keras 3 model.fit refusal, Keras 2-only calls the script
would reach under Keras 3, which Keras this machine gives the script, modules it lacks)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import shiboken6
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.plans.plan import Plan
from dtgui.core.scripts.script import (
    ScriptModel,
    entry_problem,
    env_lines,
    parse_env_lines,
    quoted_args,
    split_args,
)
from dtgui.ui.workers import error_message, run_in_thread

from .common import error_label, label, monospace, muted, show_errors
from .printed_box import PrintedMetricsBox

HINTED = ("DTGUI_STEPS, DTGUI_PER_REPLICA_BATCH / DTGUI_GLOBAL_BATCH, DTGUI_LEARNING_RATE, "
          "DTGUI_PRECISION, DTGUI_XLA and DTGUI_SEED")


@dataclass
class ProjectLook:
    """What the background look at the project found."""

    summary: str = ""
    problems: list[str] = field(default_factory=list)  # the script cannot run: Next stays off
    advice: list[str] = field(default_factory=list)  # it may fail wherever it runs, with the fix
    warnings: list[str] = field(default_factory=list)  # this machine lacks something
    notes: list[str] = field(default_factory=list)


def look_at_project(plan: Plan) -> ProjectLook:
    """List the files the bundle copies, look at the code, check this machine's Python. Disk
    and a subprocess: runs in a background thread."""
    from dtgui.core.bundles.ignore import list_project
    from dtgui.core.scripts.script_bundle import project_summary
    from dtgui.launch.checks.script_check import check_local, study

    script = plan.script
    assert script is not None, "a plan of a script"
    look = ProjectLook()
    try:
        look.summary = project_summary(list_project(Path(script.project)))
    except (OSError, ValueError) as exc:
        look.problems.append(str(exc))
        return look
    # The Keras 3 fit refusal holds wherever the tasks run; what this machine lacks matters
    # only if tasks run here, and every machine is checked at launch: a warning here.
    found = study(plan)
    refusal = found.refusal if found is not None else ""
    look.problems += [refusal] if refusal else []
    look.advice += found.warnings if found is not None else []
    problems, notes = check_local(plan, sys.executable)
    look.warnings += [p for p in problems if p != refusal]
    look.notes += notes
    return look


class ScriptBox(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.project_edit = QLineEdit()
        self.project_edit.setPlaceholderText("/path/to/my_project")
        self.project_button = QPushButton("Browse…")
        self.entry_edit = QLineEdit()
        self.entry_edit.setPlaceholderText("train.py (inside the project folder)")
        self.entry_button = QPushButton("Browse…")
        self.args_edit = QLineEdit()
        self.args_edit.setPlaceholderText("--epochs 3 --logdir $DTGUI_TENSORBOARD_DIR")
        self.env_edit = QPlainTextEdit()
        self.env_edit.setPlaceholderText("KEY=VALUE, one a line")
        self.env_edit.setFont(monospace())
        self.env_edit.setFixedHeight(54)
        self.data_edit = QLineEdit()
        self.data_edit.setPlaceholderText("optional: /data/set, already on every machine "
                                          "(DTGUI_DATASET_DIR)")
        self.legacy_check = QCheckBox("Legacy Keras (tf_keras): TF_USE_LEGACY_KERAS=1, which "
                                      "multi-worker model.fit needs")
        self.legacy_check.setToolTip(
            "Keras 3's model.fit fails under MultiWorkerMirrored and ParameterServer; tf.keras "
            "is tf_keras (Keras 2) when TF_USE_LEGACY_KERAS=1 is set before TensorFlow is "
            "imported. `import keras` stays Keras 3.")
        self.printed_box = PrintedMetricsBox()
        self.size_label = muted()
        self.size_label.setObjectName("projectSize")
        self.look_label = label(name="scriptLook", selectable=True)
        self.errors = error_label()
        self.hint_label = muted()

        outer = QVBoxLayout(self)
        outer.setContentsMargins(26, 0, 0, 0)
        outer.setSpacing(6)
        form = QFormLayout()
        form.setVerticalSpacing(6)
        outer.addLayout(form)
        form.addRow("Project folder:", _row(self.project_edit, self.project_button))
        form.addRow("Entry script:", _row(self.entry_edit, self.entry_button))
        form.addRow("Arguments:", self.args_edit)
        form.addRow("Environment:", self.env_edit)
        form.addRow("Data on each machine:", self.data_edit)
        form.addRow("", self.legacy_check)
        form.addRow("Metrics:", self.printed_box)
        for widget in (self.size_label, self.look_label, self.errors, self.hint_label):
            outer.addWidget(widget)
        outer.addStretch(1)

        self._plan = Plan()
        self._generation = 0
        self._look: ProjectLook | None = None
        self._look_key: str = ""
        self._looking = ""
        self.project_button.clicked.connect(self._browse_project)
        self.entry_button.clicked.connect(self._browse_entry)
        for edit in (self.project_edit, self.entry_edit, self.data_edit):
            edit.editingFinished.connect(self.start_look)
        self.args_edit.textChanged.connect(lambda *_: self._show())
        self.env_edit.textChanged.connect(self._show)
        self.legacy_check.toggled.connect(lambda *_: self.start_look())
        self.printed_box.changed.connect(self._show)

    # -- the plan ----------------------------------------------------------------------
    def load(self, script: ScriptModel) -> None:
        self.project_edit.setText(script.project)
        self.entry_edit.setText(script.entry)
        self.args_edit.setText(quoted_args(script.args))
        self.env_edit.setPlainText(env_lines(script.env))
        self.data_edit.setText(script.data_dir)
        self.legacy_check.setChecked(script.legacy_keras)
        self.printed_box.load(script)

    def model(self) -> ScriptModel:
        args, _ = split_args(self.args_edit.text())
        env, _ = parse_env_lines(self.env_edit.toPlainText())
        project = self.project_edit.text().strip()
        project = str(Path(project).expanduser().absolute()) if project else ""
        printed, patterns, tasks = self.printed_box.values()
        return ScriptModel(project, self.entry_edit.text().strip(), tuple(args), env,
                           self.legacy_check.isChecked(), self.data_edit.text().strip(),
                           printed_metrics=printed, patterns=patterns,
                           metrics_tasks=tasks)

    def problems(self) -> list[str]:
        """What must change before going on (typing errors; the look's findings)."""
        out = []
        model = self.model()
        problem = entry_problem(model.project, model.entry, must_exist=False)
        if problem:
            out.append(problem)
        out += [p for p in [split_args(self.args_edit.text())[1]] if p]
        out += parse_env_lines(self.env_edit.toPlainText())[1]
        out += self.printed_box.problems()
        data = model.data_dir
        if data and not data.startswith(("/", "~")):
            out.append("The data folder on each machine must be an absolute path.")
        if self._look is not None and self._look_key == self._key():
            out += self._look.problems
        return out

    def ready(self) -> bool:
        return (not self.problems() and self._look is not None and not self._looking
                and self._look_key == self._key())

    def set_plan(self, plan: Plan) -> None:
        """The plan of the earlier pages (strategy, options): the look depends on it."""
        self._plan = plan
        self.hint_label.setText(
            f"dtgui cannot impose steps ({plan.steps}), batch ({plan.per_replica_batch} per "
            f"replica), learning rate ({plan.learning_rate:g}), precision ({plan.precision}), "
            f"XLA ({'on' if plan.xla else 'off'}) or the optimizer on your script: they reach "
            f"it as {HINTED}. Its TensorBoard scalars, report() calls and the numbers it "
            "prints are plotted live.")
        self.start_look()

    # -- the background look -------------------------------------------------------------
    def _key(self) -> str:
        model = self.model()
        return repr((model.project, model.entry, model.legacy_keras,
                     self._plan.strategy))

    def start_look(self) -> None:
        if not self.isVisibleTo(self.window()) and not self.project_edit.text():
            return
        model = self.model()
        if entry_problem(model.project, model.entry):
            self._look = None
            self._show()
            return
        key = self._key()
        if key in (self._looking, self._look_key if self._look is not None else None):
            self._show()
            return
        self._generation += 1
        generation = self._generation
        self._looking = key
        plan = self._plan.with_changes(model=model)
        run_in_thread(lambda: look_at_project(plan),
                      lambda look: self._on_look(generation, key, look),
                      lambda exc: self._on_look(generation, key, ProjectLook(
                          problems=["Looking at the project failed: " + error_message(exc)])))
        self._show()

    def _on_look(self, generation: int, key: str, look: ProjectLook) -> None:
        if not shiboken6.isValid(self) or generation != self._generation:
            return
        self._looking = ""
        self._look, self._look_key = look, key
        self._show()

    # -- reacting ------------------------------------------------------------------------
    def _browse_project(self) -> None:
        start = self.project_edit.text() or str(Path.home())
        chosen = QFileDialog.getExistingDirectory(self, "Choose the project folder", start)
        if chosen:
            self.project_edit.setText(chosen)
            self.start_look()

    def _browse_entry(self) -> None:
        root = self.project_edit.text().strip() or str(Path.home())
        chosen, _ = QFileDialog.getOpenFileName(self, "Choose the entry script", root,
                                                "Python files (*.py);;All files (*)")
        if not chosen:
            return
        path = Path(chosen)
        if not self.project_edit.text().strip():
            self.project_edit.setText(str(path.parent))
        try:
            self.entry_edit.setText(path.relative_to(Path(self.project_edit.text())).as_posix())
        except ValueError:
            self.entry_edit.setText(path.name)
            self.project_edit.setText(str(path.parent))
        self.start_look()

    def _show(self) -> None:
        fresh = self._look is not None and self._look_key == self._key()
        if self._looking:
            self.size_label.setText("Looking at the project (files, size, imports)…")
        elif fresh and self._look is not None:
            self.size_label.setText(f"The bundle copies {self._look.summary}."
                                    if self._look.summary else "")
        else:
            self.size_label.setText("")
        look = self._look if fresh and self._look is not None else ProjectLook()
        self.printed_box.entry = self.entry_edit.text().strip()
        self.printed_box.project = self.project_edit.text().strip()
        lines = [f"⚠ {a}" for a in look.advice]
        lines += [f"⚠ {w} (every machine is checked again at launch)" for w in look.warnings]
        lines += [f"• {n}" for n in look.notes]
        self.look_label.setText("\n".join(lines))
        self.look_label.setStyleSheet("color: #b45309;" if look.warnings or look.advice
                                      else "")
        self.look_label.setVisible(bool(lines))
        show_errors(self.errors, self.problems())
        self.changed.emit()


def _row(edit: QLineEdit, button: QPushButton) -> QWidget:
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(edit, 1)
    row.addWidget(button)
    return box


def script_title(script: ScriptModel) -> str:
    """A script model in a few words (the review's summary)."""
    return script.entry + (" · tf_keras" if script.legacy_keras else "")


def script_tooltip(script: ScriptModel) -> str:
    lines = [f"cd {script.project} && python {quoted_args([script.entry, *script.args])}"]
    lines += [f"{k}={v}" for k, v in script.env.items()]
    if script.legacy_keras:
        lines.append("TF_USE_LEGACY_KERAS=1")
    if script.data_dir:
        lines.append(f"DTGUI_DATASET_DIR={script.data_dir}")
    return "\n".join(lines)
