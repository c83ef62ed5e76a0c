"""The main window's commands: its toolbar (Home, New run, Train demo, Dashboard, Cluster
doctor, Runs, Sweep, TensorBoard, MLflow, Preferences), its View menu and Quit. Made here once; the
window connects each to what it does."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QToolButton


class WindowActions:
    def __init__(self, window: QMainWindow) -> None:
        toolbar = window.addToolBar("Main")
        toolbar.setMovable(False)
        self.home = QAction("Home", window)
        self.new = QAction("New run…", window)
        self.demo = QAction("Train demo", window)
        self.dashboard = QAction("Dashboard", window)
        self.dashboard.setEnabled(False)  # until a run is shown
        for act in (self.home, self.new, self.demo, self.dashboard):
            toolbar.addAction(act)
        toolbar.addSeparator()
        self.doctor = QAction("Cluster doctor…", window)
        self.doctor.setToolTip("Check that the registered machines can train together")
        toolbar.addAction(self.doctor)
        self.runs = QAction("Runs", window)
        self.runs.setToolTip("Runs still training (reattach) and finished runs (open)")
        toolbar.addAction(self.runs)
        self.sweep = QAction("Sweep", window)
        self.sweep.setToolTip("Train the last run setup many times with settings varied, "
                              "or open a sweep's folder")
        sweep_menu = QMenu(window)
        self.new_sweep = sweep_menu.addAction("New sweep of the last run setup…")
        self.open_sweep = sweep_menu.addAction("Open a sweep…")
        self.sweep.setMenu(sweep_menu)
        toolbar.addAction(self.sweep)
        sweep_button = toolbar.widgetForAction(self.sweep)
        if isinstance(sweep_button, QToolButton):
            sweep_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.tensorboard = QAction("TensorBoard", window)
        self.tensorboard.setToolTip("Every run and sweep in TensorBoard (curves, HParams)")
        toolbar.addAction(self.tensorboard)
        self.mlflow = QAction("MLflow", window)
        self.mlflow.setToolTip("dtgui's runs in MLflow's UI (started on the store runs go to, "
                               "or the team's server)")
        toolbar.addAction(self.mlflow)
        self.preferences = QAction("Preferences…", window)
        self.preferences.setToolTip("MLflow: send runs there, and where")
        toolbar.addAction(self.preferences)
        self.quit = QAction("Quit", window)
        self.quit.setShortcut(QKeySequence("Ctrl+Q"))
        window.addAction(self.quit)
        # The left column beside Home only (the run's pages get the full width), or beside
        # every page: a menu action, so a hidden column always comes back.
        self.column = QAction("This machine and Machines beside every page", window)
        self.column.setCheckable(True)
        self.column.setShortcut(QKeySequence("Ctrl+M"))
        view = window.menuBar().addMenu("&View")
        view.addAction(self.home)
        view.addAction(self.dashboard)
        view.addAction(self.runs)
        view.addSeparator()
        view.addAction(self.column)
