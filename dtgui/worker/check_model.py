"""Check a user's model file: ``python -m dtgui.worker.check_model FILE [--batch 4]``.

Imports the file, builds the model, takes one batch of its data set, runs the model and the
loss on it. Prints ONE JSON line on stdout (model_check_result.py: the command, the line and
its reading): ``{"ok": true, "num_examples", "input_shape", "output_shape", ...}`` (exit 0) or
``{"ok": false, "error": "<one line>", "traceback"}`` (exit 1). Anything the file prints goes
to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from typing import Any

from .model_check_result import failed_line, passed_line
from .model_file import ModelSource, UserError, load_model_file, one_line


def _shape(x: Any) -> list[int | None] | None:
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    try:
        return [None if d is None else int(d) for d in shape]
    except TypeError:
        return None


def _step(what: str, fn: Any, *args: Any) -> Any:
    """Run a check step; an exception becomes a UserError saying which step failed."""
    try:
        return fn(*args)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{what}: {one_line(exc)}", traceback.format_exc()) from exc


def check_labels(labels: Any, logits: Any, custom_loss: bool) -> None:
    """With the default loss, labels must be class indices 0..C-1 for C output logits."""
    import numpy as np

    out = _shape(logits)
    classes = out[-1] if out else None
    if custom_loss or not out or classes is None:  # None: an output size unknown until run
        return
    lab = np.asarray(labels)
    if lab.ndim == len(out) and lab.ndim > 1 and lab.shape[-1] == classes and classes != 1:
        raise UserError(f"Your labels look one-hot (shape {list(lab.shape)}) but the default "
                        f"loss wants class indices: define make_loss() returning "
                        f"keras.losses.CategoricalCrossentropy(from_logits=True, "
                        f'reduction="none")')
    if lab.dtype.kind not in "iub" and not (lab.dtype.kind == "f"
                                            and np.all(np.mod(lab, 1) == 0)):
        raise UserError(f"Your labels are {lab.dtype} values, not class indices: the default "
                        f"loss (sparse categorical cross-entropy) needs integer labels "
                        f"0..{classes - 1}, or define make_loss()")
    if lab.size and (lab.min() < 0 or lab.max() >= classes):
        raise UserError(f"The labels do not fit the model output: labels range "
                        f"{int(lab.min())}..{int(lab.max())} but the model outputs {classes} "
                        f"logits (classes 0..{classes - 1})")


def try_model_file(path: str, batch: int) -> dict[str, Any]:
    source: ModelSource = load_model_file(path)
    import keras
    import numpy as np
    import tensorflow as tf

    from .data import make_loss
    from .loop import check_dataset

    model = source.call("build_model")
    if not isinstance(model, keras.Model):
        raise UserError(f"build_model() must return a keras.Model, it returned a "
                        f"{type(model).__name__}")
    ds = check_dataset(source.call("make_dataset"))
    card = int(ds.cardinality().numpy())
    first = _step("Reading the first batch of your data set failed",
                  lambda: list(ds.batch(batch).take(1)))
    if not first:
        raise UserError("make_dataset() returned an empty data set")
    features, labels = first[0]
    logits = _step("Your model failed on a batch of your data (does the model's input fit the "
                   "data set's features?)", lambda: model(features, training=False))
    check_labels(labels, logits, custom_loss=source.make_loss is not None)
    loss_obj = make_loss(source)
    per_example = _step("The loss failed on your labels and the model's output",
                        lambda: loss_obj(labels, logits))
    loss = float(np.mean(np.asarray(tf.cast(per_example, tf.float32))))
    if not np.isfinite(loss):
        raise UserError(f"The loss on the first batch is {loss}: check the data (NaN or "
                        f"infinite values?) and the model output")
    check_optional(source, model, loss_obj, batch)
    step_seconds = _gradient_seconds(model, loss_obj, features, labels)
    element = ds.element_spec
    output_shape = _shape(logits)
    return {"num_examples": card if card >= 0 else None,
            "input_shape": _shape(element[0]), "label_shape": _shape(element[1]),
            "output_shape": output_shape[1:] if output_shape else None,
            "num_classes": source.num_classes, "params": int(model.count_params()),
            "loss": loss, "custom_loss": source.make_loss is not None,
            # what a step's all-reduce moves (float32), and a batch's forward and backward
            # here: the review page's forecast of a step on the machines' measured links
            "gradient_bytes": sum(int(np.prod(w.shape)) * 4 for w in model.trainable_weights),
            "step_seconds": step_seconds,
            "versions": {"tensorflow": tf.__version__, "keras": keras.__version__}}


def _gradient_seconds(model: Any, loss_obj: Any, features: Any, labels: Any) -> float:
    """A batch's forward and backward pass on this machine, traced once then timed (the
    median of three); 0.0 when it cannot be timed (the forecast then leaves compute out)."""
    import statistics
    import time

    import tensorflow as tf

    def compute() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.cast(loss_obj(labels, model(features, training=True)),
                                          tf.float32))
        return tape.gradient(loss, model.trainable_weights)

    gradients = tf.function(compute)

    try:
        tf.nest.map_structure(lambda g: g is not None and g.numpy(), gradients())
        times = []
        for _ in range(3):
            began = time.perf_counter()
            tf.nest.map_structure(lambda g: g is not None and g.numpy(), gradients())
            times.append(time.perf_counter() - began)
    except Exception:  # noqa: BLE001 - the timing is a forecast's input only; the check passed
        return 0.0
    return round(statistics.median(times), 6)


def check_optional(source: ModelSource, model: Any, loss_obj: Any, batch: int) -> None:
    """The optional functions: a validation batch through the model, the loss and every
    metric; an optimizer that is one."""
    from .loop import check_dataset
    from .optim import make_optimizer
    from .plan import Plan
    from .run import is_classification
    from .validation import metric_functions

    if source.make_optimizer is not None:
        make_optimizer(Plan(), source)
    metrics = metric_functions(source, is_classification(loss_obj))
    if source.make_validation_dataset is None:
        return
    data = check_dataset(source.call("make_validation_dataset"))
    first = _step("Reading the first batch of your validation data set failed",
                  lambda: list(data.batch(batch).take(1)))
    if not first:
        raise UserError("make_validation_dataset() returned an empty data set")
    features, labels = first[0]
    outputs = _step("Your model failed on a batch of your validation data",
                    lambda: model(features, training=False))
    _step("The loss failed on your validation labels", lambda: loss_obj(labels, outputs))
    for name, fn in metrics:
        _step(f"The metric {name} failed on a validation batch", lambda f=fn: f(labels, outputs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dtgui.worker.check_model", description=__doc__)
    parser.add_argument("file", help="the model file (defines build_model and make_dataset)")
    parser.add_argument("--batch", type=int, default=4, help="examples to try (default 4)")
    parser.add_argument("--project", default="",
                        help="the project folder the file's imports resolve in")
    args = parser.parse_args(argv)
    if args.project:
        sys.path.insert(0, os.path.abspath(args.project))
    real_stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            line = passed_line(try_model_file(args.file, max(1, args.batch)))
        code = 0
    except UserError as exc:
        line = failed_line(exc.message, exc.tb)
        code = 1
    except Exception as exc:  # noqa: BLE001 - a user's model file may raise anything; the GUI needs an answer
        line = failed_line(f"Checking the model file failed: {one_line(exc)}",
                           traceback.format_exc())
        code = 1
    real_stdout.write(line + "\n")
    real_stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
