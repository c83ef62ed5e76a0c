"""Page 3: the built-in demo, or the user's model file checked in a TensorFlow subprocess."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import shiboken6
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from dtgui.core.bundles.ignore import human_size, list_project
from dtgui.core.plans.plan import DemoModel, ModelFile, Plan, ScriptModel
from dtgui.launch.checks.model_check import ModelCheck, check_model_file
from dtgui.ui.workers import error_details, error_message, run_in_thread

from .common import WizardContext, card, label, monospace, muted
from .optimizer_box import OPTIMIZER_TEXT
from .script_box import ScriptBox

DEMO_TEXT = ("MLP on the digits data set: 1797 real 8×8 images (1500 to train, 297 held out to "
             "validate), 10 classes, bundled, "
             "works offline.")
DEMO_NETWORK = ("64 pixels → Dense 128 (relu) → Dense 64 (relu) → 10 logits; sparse categorical "
                "cross-entropy, {optimizer} (Training options).")


def demo_network(plan: Plan) -> str:
    """The demo's network, with the optimizer the plan has (Training options)."""
    return DEMO_NETWORK.format(optimizer=OPTIMIZER_TEXT.get(plan.optimizer, plan.optimizer))
CONTRACT = """\
def build_model():    # -> keras.Model, built inside strategy.scope(); outputs logits
def make_dataset():   # -> tf.data.Dataset of unbatched (features, label) pairs
# optional: make_validation_dataset(), make_loss() (reduction="none"),
#           make_optimizer(), make_metrics() (mean metrics or fn(y_true, y_pred))
# the file's folder is copied into the bundle: its modules and data files come along"""


def with_folder(result: ModelCheck, folder: Path) -> ModelCheck:
    """The check's summary, and what of the file's folder goes into the bundle."""
    if not result.ok:
        return result
    listing = list_project(folder)
    count = len(listing.files)
    note = (f"; its folder {folder} goes into the bundle ({count} file{'s' * (count != 1)}, "
            f"{human_size(listing.total_bytes)})")
    return replace(result, summary=result.summary + note)



class FittingScrollArea(QScrollArea):
    """Asks for its whole content's height (so it is shown whole where there is room) and
    scrolls where there is not."""

    def sizeHint(self) -> QSize:
        widget = self.widget()
        if widget is None:
            return super().sizeHint()
        hint = widget.sizeHint()
        return QSize(hint.width(), hint.height() + 2 * self.frameWidth())

    def minimumSizeHint(self) -> QSize:
        return QSize(200, 160)

class ModelPage(QWizardPage):
    def __init__(self, ctx: WizardContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.setTitle("Model and data")
        self.setSubTitle("Train the bundled demo, your own model from a Python file (checked "
                         "in a separate TensorFlow process), or run your own training script "
                         "as it is.")
        self._generation = 0  # ignores results of checks that were superseded
        self._checking = ""
        self._result_path = ""
        self._result: ModelCheck | None = None

        self.demo_radio = QRadioButton("Built-in demo")
        self.file_radio = QRadioButton("My own Python file")
        self.script_radio = QRadioButton("My own training script (model.fit or a custom loop, "
                                         "run as it is)")
        group = QButtonGroup(self)
        group.addButton(self.demo_radio)
        group.addButton(self.file_radio)
        group.addButton(self.script_radio)
        self.script_box = ScriptBox()
        self.demo_radio.setChecked(True)
        demo_text = label(DEMO_TEXT)
        demo_text.setContentsMargins(26, 0, 0, 0)
        self.demo_net = demo_net = muted(demo_network(Plan()))
        demo_net.setContentsMargins(26, 0, 0, 8)

        self.path_edit = QLineEdit()
        self.path_edit.setPlaceholderText("/path/to/my_model.py")
        self.browse_button = QPushButton("Browse…")
        path_row = QHBoxLayout()
        path_row.setContentsMargins(26, 0, 0, 0)
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(self.browse_button)

        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setTextVisible(False)
        self.busy.setFixedWidth(120)
        self.busy.setFixedHeight(14)
        self.status_label = label(name="checkStatus", selectable=True)
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_button.setArrowType(Qt.ArrowType.RightArrow)
        self.details_view = QPlainTextEdit()
        self.details_view.setReadOnly(True)
        self.details_view.setFont(monospace())
        self.details_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.details_view.setVisible(False)
        status_row = QHBoxLayout()
        status_row.setContentsMargins(26, 4, 0, 0)
        status_row.addWidget(self.busy)
        status_row.addWidget(self.status_label, 1)
        status_row.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignTop)

        source = QGroupBox("Model")
        box = QVBoxLayout(source)
        box.addWidget(self.demo_radio)
        box.addWidget(demo_text)
        box.addWidget(demo_net)
        box.addWidget(self.file_radio)
        box.addLayout(path_row)
        box.addLayout(status_row)
        details_row = QHBoxLayout()
        details_row.setContentsMargins(26, 0, 0, 0)
        details_row.addWidget(self.details_view)
        box.addLayout(details_row, 1)
        self._source_box, self._details_row = box, details_row
        box.addWidget(self.script_radio)
        # The script's fields scroll rather than squeeze in a small window.
        self.script_scroll = FittingScrollArea()
        self.script_scroll.setWidget(self.script_box)
        self.script_scroll.setWidgetResizable(True)
        self.script_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.script_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        viewport = self.script_scroll.viewport()
        viewport.setObjectName("scriptViewport")  # the group box's white shows through
        viewport.setStyleSheet("#scriptViewport { background: transparent; }")
        self.script_box.setObjectName("scriptBox")
        self.script_box.setStyleSheet("#scriptBox { background: transparent; }")
        box.addWidget(self.script_scroll, 1)

        contract = card()
        cbox = QVBoxLayout(contract)
        cbox.setContentsMargins(14, 10, 14, 10)
        heading = label("What your file must define")
        heading.setStyleSheet("font-weight: bold;")
        code = label(CONTRACT, wrap=False, selectable=True)
        code.setFont(monospace())
        cbox.addWidget(heading)
        cbox.addWidget(code)
        cbox.addWidget(muted("dtgui shuffles (seeded), repeats, batches and distributes the data "
                             "set itself. The check imports the file and runs one batch through "
                             "the model; nothing is launched if it fails."))

        self._layout = QVBoxLayout(self)
        self._layout.setSpacing(12)
        self._layout.addWidget(source)
        self._layout.addWidget(contract)
        self.contract = contract
        self._layout.addStretch(1)

        self._project = ("", "")  # (a loaded plan's model file, its project folder)

        self.demo_radio.toggled.connect(self._on_kind)
        self.script_radio.toggled.connect(self._on_kind)
        self.script_box.changed.connect(self.completeChanged.emit)
        self.browse_button.clicked.connect(self._browse)
        self.path_edit.editingFinished.connect(self._path_edited)
        self.path_edit.textChanged.connect(lambda *_: self._show_state())
        self.details_button.toggled.connect(self._toggle_details)
        self._show_state()

    # -- the plan ----------------------------------------------------------------------
    def load(self, plan: Plan) -> None:
        """Pre-fill from a plan: its model file, or its script and arguments, or the demo."""
        model = plan.model
        if isinstance(model, ModelFile):
            self.file_radio.setChecked(True)
            self.path_edit.setText(model.path)
            self._project = (model.path, model.project)  # its folder, while the file is kept
        elif isinstance(model, ScriptModel):
            self.script_radio.setChecked(True)
            self.script_box.load(model)
        else:
            self.demo_radio.setChecked(True)

    def path(self) -> str:
        text = self.path_edit.text().strip()
        return str(Path(text).expanduser().absolute()) if text else ""

    def apply(self, plan: Plan) -> Plan:
        if self.demo_radio.isChecked():
            return plan.with_changes(model=DemoModel())
        if self.script_radio.isChecked():
            return plan.with_changes(model=self.script_box.model())
        path = self.path()
        kept, project = self._project
        return plan.with_changes(model=ModelFile(path, project if path == kept else ""))

    def check_passed(self) -> bool:
        return (self._result is not None and self._result.ok and not self._checking
                and self._result_path == self.path())

    def isComplete(self) -> bool:
        if self.script_radio.isChecked():
            return self.script_box.ready()
        return self.demo_radio.isChecked() or self.check_passed()

    def initializePage(self) -> None:
        self.demo_net.setText(demo_network(self.ctx.draft()))  # as Training options set it
        if self.script_radio.isChecked():  # the look at a script depends on the strategy
            self.script_box.set_plan(self.ctx.draft())
        # A remembered file is checked when the page is first shown (not at start-up).
        if self.file_radio.isChecked() and self.path() and self._needs_check():
            self.start_check()

    # -- the check -------------------------------------------------------------------------
    def _needs_check(self) -> bool:
        return self.path() not in (self._checking, self._result_path)

    def start_check(self) -> None:
        path = self.path()
        if not path:
            return
        self._generation += 1
        generation = self._generation
        self._checking = path
        self._result = None
        self._result_path = ""
        self._show_state()
        run_in_thread(lambda: with_folder(check_model_file(Path(path)), Path(path).parent),
                      lambda result: self._on_result(generation, path, result),
                      lambda exc: self._on_result(generation, path, ModelCheck(
                          False, "The check could not run: " + error_message(exc),
                          error_details(exc))))
        # No `context`: a relay deleted with the page while the check runs would make the
        # worker thread emit on a dead object; the result is dropped in _on_result instead.

    def _on_result(self, generation: int, path: str, result: ModelCheck) -> None:
        if not shiboken6.isValid(self) or generation != self._generation:
            return  # the user chose another file meanwhile
        self._checking = ""
        self._result_path = path
        self._result = result
        self.ctx.model_check = (path, result)
        self._show_state()

    # -- reacting to the user ----------------------------------------------------------
    def _browse(self) -> None:
        start = self.path() or str(Path.home())
        chosen, _ = QFileDialog.getOpenFileName(self, "Choose your model file", start,
                                                "Python files (*.py);;All files (*)")
        if chosen:
            self.file_radio.setChecked(True)
            self.path_edit.setText(chosen)
            self.start_check()

    def _path_edited(self) -> None:
        if self.isVisible() and self.file_radio.isChecked() and self.path() and self._needs_check():
            self.start_check()

    def _on_kind(self) -> None:
        if self.file_radio.isChecked() and self.path() and self._needs_check():
            self.start_check()
        self._show_state()
        if self.file_radio.isChecked() and not self.path():
            self.path_edit.setFocus()
        if self.script_radio.isChecked():
            self.script_box.set_plan(self.ctx.draft())

    def _toggle_details(self, shown: bool) -> None:
        self.details_view.setVisible(shown)
        self.details_button.setArrowType(
            Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self._fit()

    def _fit(self) -> None:
        """The model box fills the page when it shows the check's details or the script's
        fields (which then take its room), else it keeps its own height."""
        use_script = self.script_radio.isChecked()
        fill = use_script or self.details_button.isChecked()
        self._layout.setStretch(0, 1 if fill else 0)
        self._layout.setStretch(2, 0 if fill else 1)
        self._source_box.setStretchFactor(self._details_row, 0 if use_script else 1)

    def _show_state(self) -> None:
        use_file = self.file_radio.isChecked()
        use_script = self.script_radio.isChecked()
        self.script_box.setVisible(use_script)
        self.script_scroll.setVisible(use_script)
        self._fit()
        self.contract.setVisible(not use_script)
        self.path_edit.setEnabled(use_file)
        checking = bool(self._checking) and self._checking == self.path()
        self.busy.setVisible(use_file and checking)
        result = self._result if self._result_path == self.path() else None
        has_details = bool(use_file and result and not result.ok and result.details)
        self.details_button.setVisible(has_details)
        if not has_details:
            self.details_button.setChecked(False)
        self.details_view.setPlainText(result.details if has_details and result else "")
        if not use_file:
            text, color = "", ""
        elif checking:
            text, color = (f"Checking {Path(self._checking).name} in a TensorFlow subprocess… "
                           "(a few seconds)"), "#374151"
        elif result is not None and result.ok:
            text, color = f"✓ The file works: {result.summary}", "#15803d"
        elif result is not None:
            text, color = f"✗ {result.error}", "#b91c1c"
        elif not self.path():
            text, color = "Choose your model file: Browse… or type its path.", "#6b7280"
        else:
            text, color = "Press Enter or Browse… to check this file.", "#6b7280"
        self.status_label.setText(text)
        self.status_label.setStyleSheet(f"color: {color};" if color else "")
        self.status_label.setVisible(bool(text))
        self.completeChanged.emit()
