"""Loading the user's model file, and one-line errors a person can act on. No TF import here.

The model-file contract (docs/model-file.md): ``build_model()`` -> keras.Model
(logits), ``make_dataset()`` -> tf.data.Dataset of unbatched (features, label) pairs,
optional ``make_validation_dataset()`` (the same, for validation), ``make_loss()`` -> keras
loss with reduction="none", ``make_optimizer()`` -> keras optimizer, ``make_metrics()`` ->
list of metrics (keras mean metrics or functions of (y_true, y_pred)), ``NUM_CLASSES``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

REQUIRED = ("build_model", "make_dataset")
OPTIONAL = ("make_validation_dataset", "make_loss", "make_optimizer", "make_metrics")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TF_DETECTED = re.compile(r"Detected at node .*? defined at \(most recent call last\):\n"
                          r"(?:\s*File .*\n|\s*\n)*")
_TF_NODE = re.compile(r"\[\[\{\{node [^}]*\}\}\]\]|\[Op:[^\]]*\]")
_REMOTE_TASK = re.compile(r"remote target /job:(\w+)/replica:\d+/task:(\d+)")
# TensorFlow's collective refusing a peer's all-reduce of another dtype (its DataType
# numbers: 1 float32, 19 float16, 14 bfloat16)
_DTYPE_MISMATCH = re.compile(r"expected type \d+ and data_type (\d+) but got type \d+ and "
                             r"data_type (\d+)")
_DTYPE_NAMES = {1: "float32", 19: "float16", 14: "bfloat16"}


class UserError(Exception):
    """An error with a one-line, actionable message and the traceback that explains it."""

    def __init__(self, message: str, tb: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tb = tb


def _strip_tf_noise(text: str) -> str:
    """Drop TensorFlow's "Detected at node ... defined at" stacks and node/op tags."""
    text = text.replace("Graph execution error:", "")
    text = _TF_DETECTED.sub("", text)
    text = _TF_NODE.sub("", text)
    return text


def exc_text(exc: BaseException) -> str:
    """The exception's message on one line (whitespace squeezed, at most 300 chars)."""
    text = " ".join(_strip_tf_noise(_ANSI.sub("", str(exc))).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return text or "(no message)"


def one_line(exc: BaseException) -> str:
    """``ExcType: message`` on one line."""
    return f"{type(exc).__name__}: {exc_text(exc)}"


def describe_failure(exc: BaseException) -> str:
    """``Type: message``, saying so when a peer task of the cluster was lost, or when the
    workers' all-reduces carry different dtypes."""
    text = one_line(exc)
    mismatch = _DTYPE_MISMATCH.search(str(exc))
    if mismatch:
        ours, theirs = (_DTYPE_NAMES.get(int(n), f"type {n}") for n in mismatch.groups())
        return (f"The workers all-reduce their gradients in different dtypes ({ours} and "
                f"{theirs}): every worker must run the same bundle (one written by an older "
                "dtgui, or from another plan, does not compress them): start them all from "
                "this run's bundle, or set grad_compression to none")
    if type(exc).__name__ in ("UnavailableError", "AbortedError", "DeadlineExceededError"):
        match = _REMOTE_TASK.search(str(exc))
        peer = f"{match.group(1)}:{match.group(2)}" if match else "another task"
        return f"Lost contact with {peer}: it stopped, crashed or cannot be reached ({text})"
    return text


def raised_in(exc: BaseException, where: str) -> str:
    """``Your model file raised ValueError in build_model(): message``."""
    return f"Your model file raised {type(exc).__name__} {where}: {exc_text(exc)}"


def _user_frames_tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


@dataclass
class ModelSource:
    """Where the model and data come from: the demo, or a user's file."""

    kind: str  # "demo" or "file"
    path: str  # the file (absolute), or "" for the demo
    build_model: Callable[[], Any]
    make_dataset: Callable[[], Any]
    make_loss: Callable[[], Any] | None = None
    num_classes: int | None = None
    make_validation_dataset: Callable[[], Any] | None = None
    make_optimizer: Callable[[], Any] | None = None
    make_metrics: Callable[[], Any] | None = None

    def call(self, name: str, *args: Any) -> Any:
        """Call one of the model functions; an exception becomes a UserError naming it."""
        fn = {"build_model": self.build_model, "make_dataset": self.make_dataset,
              "make_loss": self.make_loss, "make_optimizer": self.make_optimizer,
              "make_metrics": self.make_metrics,
              "make_validation_dataset": self.make_validation_dataset}[name]
        if fn is None:
            raise UserError(f"No {name}() defined")
        try:
            return fn(*args)
        except UserError:
            raise
        except Exception as exc:
            if self.kind == "file":
                msg = raised_in(exc, f"in {name}()")
            else:
                msg = f"The demo {name}() failed: {one_line(exc)}"
            raise UserError(msg, _user_frames_tb(exc)) from exc


def import_model_file(path: str) -> ModuleType:
    """Import a user's model file by path; each failure is a UserError with a clear line."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise UserError(f"Model file not found: {path}")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # let the file import its own helper modules
    mod_name = "dtgui_user_model_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"Cannot import {path}: it is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(mod_name, None)
        where = f"line {exc.lineno}" if exc.lineno else "an unknown line"
        raise UserError(f"Your model file has a syntax error at {where}: {exc.msg}",
                        _user_frames_tb(exc)) from exc
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise UserError(raised_in(exc, "while being imported"), _user_frames_tb(exc)) from exc
    return module


def load_model_file(path: str) -> ModelSource:
    """Import the file and check it defines callable build_model and make_dataset."""
    module = import_model_file(path)
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        names = " and ".join(f"{n}()" for n in missing)
        raise UserError(f"Your model file does not define {names} "
                        f"(it must define build_model() and make_dataset())")
    for name in (*REQUIRED, *OPTIONAL):
        if hasattr(module, name) and not callable(getattr(module, name)):
            raise UserError(f"In your model file, {name} is not a function "
                            f"(it is a {type(getattr(module, name)).__name__})")
    num_classes = getattr(module, "NUM_CLASSES", None)
    return ModelSource(kind="file", path=os.path.abspath(path), build_model=module.build_model,
                       make_dataset=module.make_dataset,
                       make_loss=getattr(module, "make_loss", None),
                       num_classes=num_classes if isinstance(num_classes, int) else None,
                       make_validation_dataset=getattr(module, "make_validation_dataset", None),
                       make_optimizer=getattr(module, "make_optimizer", None),
                       make_metrics=getattr(module, "make_metrics", None))
