"""Checking a user's model file, as a protocol: the command, the one JSON line it prints, and
that line read back as a `ModelCheck`.

`check_model.py` does the check (under TensorFlow, in a subprocess of its own) and prints
with `result_line`; the app (dtgui.launch.checks.model_check) starts `check_command` and reads its
output with `read_result`. No TensorFlow: the GUI process and every bundle share this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MODULE = "check_model"  # the checking module, beside this one


@dataclass(frozen=True)
class ModelCheck:
    """What checking a model file found."""

    ok: bool
    error: str = ""  # why it fails, one line
    details: str = ""  # the traceback behind `error`
    summary: str = ""  # what passed: examples, input and output shapes
    gradient_bytes: int = 0  # what a step's all-reduce moves in float32 (0: not known)
    step_seconds: float = 0.0  # a batch's forward and backward on the checking machine


def check_command(python: str, path: str, project: str = "", batch: int = 0) -> list[str]:
    """The command that checks the model file at `path` (`project`: the folder its imports
    resolve in; `batch`: the examples to try, 0 for the default)."""
    cmd = [python, "-m", f"{__package__}.{MODULE}", path]
    if project:
        cmd += ["--project", project]
    if batch:
        cmd += ["--batch", str(batch)]
    return cmd


def passed_line(facts: dict[str, Any]) -> str:
    """The line of a check that passed, with what it found (num_examples, input_shape,
    output_shape, ...)."""
    return json.dumps({"ok": True, **facts})


def failed_line(error: str, traceback: str) -> str:
    return json.dumps({"ok": False, "error": error, "traceback": traceback})


def read_result(stdout: str, stderr: str, name: str) -> ModelCheck:
    """The check's answer from its output (the last JSON line); a crash without one is a
    failure that quotes the end of the output (`name`: the file's name)."""
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return ModelCheck(False, f"Checking {name} crashed: " + " | ".join(tail))
    if not isinstance(result, dict):
        return ModelCheck(False, f"Checking {name} answered {lines[-1][:80]!r}")
    if result.get("ok"):
        grad_bytes, seconds = result.get("gradient_bytes"), result.get("step_seconds")
        return ModelCheck(True, summary=f"{result.get('num_examples', '?')} examples, input "
                                        f"{result.get('input_shape')}, output "
                                        f"{result.get('output_shape')}",
                          gradient_bytes=grad_bytes if isinstance(grad_bytes, int) else 0,
                          step_seconds=float(seconds)
                          if isinstance(seconds, (int, float)) else 0.0)
    return ModelCheck(False, str(result.get("error", "the model file failed")),
                      str(result.get("traceback", "")))
