"""Checks that run TensorFlow in a subprocess, so the calling process never imports it.

A model file is checked by dtgui.worker.check_model; its command and its answer (`ModelCheck`)
are dtgui.worker.model_check_result, which this module runs and reads. Both functions block for seconds: call them from a background thread, never the UI thread.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.machines.hardware import TfView
from dtgui.core.plans.placement import placed_tf_config_json
from dtgui.core.plans.plan import ModelFile
from dtgui.core.time_limits import start_limit
from dtgui.worker.model_check_result import ModelCheck as ModelCheck
from dtgui.worker.model_check_result import check_command, read_result

if TYPE_CHECKING:  # the bundle writer (pathspec) is not needed to probe TensorFlow at start
    from dtgui.core.bundles.bundle import Bundle

MODEL_CHECK_TIMEOUT = start_limit(120.0)
TF_PROBE_TIMEOUT = start_limit(90.0)

_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def _run_cancellable(cmd: list[str], timeout: float,
                     env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """subprocess.run that `cancel_all()` can end early (on application exit)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **env} if env else None)
    with _running_lock:
        _running.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def cancel_all() -> None:
    """Kill every check still running (the caller is quitting)."""
    if "dtgui.remote.commands" in sys.modules:  # never imported: none of its commands runs
        sys.modules["dtgui.remote.commands"].cancel_local_commands()
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def check_model_file(path: Path, python: str | None = None,
                     timeout: float = MODEL_CHECK_TIMEOUT,
                     project: Path | None = None,
                     env: dict[str, str] | None = None) -> ModelCheck:
    """Import a user's model file in a TensorFlow subprocess and try one batch through it
    (`project`: the folder its imports resolve in; `env`: variables the file may read)."""
    path = Path(path).expanduser()
    if not path.is_file():
        return ModelCheck(False, f"{path} does not exist: choose your model file again.")
    cmd = check_command(python or sys.executable, str(path.resolve()),
                        str(project) if project is not None else "")
    try:
        proc = _run_cancellable(cmd, timeout, env)
    except subprocess.TimeoutExpired:
        return ModelCheck(False, f"Checking {path.name} took longer than {timeout:.0f} s: does "
                                 "make_dataset() or build_model() wait on something?")
    return read_result(proc.stdout, proc.stderr, path.name)


def check_bundled_model(bundle: Bundle, python: str | None = None) -> str:
    """Check the bundle's own copy of a model file, as the run will import it (its folder's
    modules and data files are there, or are missing there; TF_CONFIG is the first task's);
    "" when it passes or the plan has no model file, else why it fails."""
    model = bundle.plan.model
    if not isinstance(model, ModelFile):
        return ""
    project = bundle.path / model.project if model.project else None
    config = placed_tf_config_json(bundle.plan, bundle.plan.tasks[0]) if bundle.plan.tasks else ""
    result = check_model_file(bundle.path / model.path, python, project=project,
                              env={"TF_CONFIG": config} if config else None)
    return "" if result.ok else f"The model file fails in the run's bundle: {result.error}"


def probe_tensorflow(python: str | None = None, timeout: float = TF_PROBE_TIMEOUT) -> TfView:
    """What TensorFlow can use on this machine, asked in a subprocess (the machine probe)."""
    from dtgui.remote.commands import LocalRunner
    from dtgui.remote.probe import tensorflow_view

    return tensorflow_view(LocalRunner(), python or sys.executable, timeout)
