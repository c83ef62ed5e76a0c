"""Validation: the loss and metrics over every example of the validation data, exactly once.

Every replica evaluates its share of each batch and returns sums (of the per-example loss
and of each metric's per-example values) and its example count; the sums are added over
every replica of every worker, so the means are exact and the same on every worker. That is
why a metric must be a mean of per-example values: a Keras `MeanMetricWrapper` (accuracy,
top-k, MAE, MSE, crossentropies...) or a function `(y_true, y_pred) -> per-example values`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from .distribute import BuiltStrategy
from .loop import check_dataset, per_example_loss, sparse_accuracy
from .model_file import ModelSource, UserError

MetricFn = Callable[[Any, Any], Any]


def metric_functions(source: ModelSource, classification: bool) -> list[tuple[str, MetricFn]]:
    """(name, per-example function) of the model file's make_metrics(), else accuracy for a
    classifier and nothing for other tasks (an argmax "accuracy" means nothing there)."""
    if source.make_metrics is None:
        return [("accuracy", sparse_accuracy)] if classification else []
    found = source.call("make_metrics")
    if not isinstance(found, (list, tuple)):
        found = [found]
    out: list[tuple[str, MetricFn]] = []
    for item in found:
        if item in ("accuracy", "acc"):  # as Keras' compile reads it: the class with the top
            out.append(("accuracy", sparse_accuracy))  # logit is the label
            continue
        metric = keras.metrics.get(item) if isinstance(item, str) else item
        if isinstance(metric, keras.metrics.MeanMetricWrapper):
            fn, kwargs = metric._fn, dict(metric._fn_kwargs)  # its definition
            out.append((metric.name, _bound(fn, kwargs)))
        elif isinstance(metric, keras.metrics.Metric):
            raise UserError(
                f"make_metrics(): {metric.name} ({type(metric).__name__}) is not a mean of "
                f"per-example values, so dtgui cannot add it up exactly across replicas and "
                f"machines: use a mean metric (accuracy, top-k, MAE, ...) or a function "
                f"(y_true, y_pred) -> per-example values")
        elif callable(metric):
            out.append((getattr(metric, "__name__", "metric"), metric))
        else:
            raise UserError(f"make_metrics() must return keras metrics or functions, not "
                            f"{type(metric).__name__}")
    names = [name for name, _ in out]
    if len(set(names)) != len(names) or "loss" in names:
        raise UserError(f"make_metrics(): metric names must be distinct and not 'loss' "
                        f"(got {', '.join(names)})")
    return out


def _bound(fn: MetricFn, kwargs: dict[str, Any]) -> MetricFn:
    return lambda y_true, y_pred: fn(y_true, y_pred, **kwargs)


class Validator:
    """Evaluates the model on the model file's validation data (see the module's docstring)."""

    def __init__(self, info: BuiltStrategy, model: keras.Model, loss_obj: Any,
                 metrics: list[tuple[str, MetricFn]], source: ModelSource,
                 global_batch: int) -> None:
        self.names = ["loss", *(name for name, _ in metrics)]
        strategy = info.strategy
        data = check_dataset(source.call("make_validation_dataset")).batch(global_batch)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        options.deterministic = True
        data = data.with_options(options)

        def sums(batch: Any) -> Any:
            features, labels = batch
            outputs = model(features, training=False)
            values = [per_example_loss(loss_obj, labels, outputs)]
            values += [tf.reshape(tf.cast(fn(labels, outputs), tf.float32), [-1])
                       for _, fn in metrics]
            count = tf.cast(tf.shape(values[0])[0], tf.float32)
            return tf.stack([tf.reduce_sum(v) for v in values] + [count])

        width = len(self.names) + 1
        if info.coordinator is not None:
            # parameter_server: the chief evaluates by itself, reading the variables from
            # the parameter servers (its replica context would schedule on the workers)
            @tf.function
            def evaluate() -> Any:
                total = tf.zeros([width])
                for batch in data:
                    total += sums(batch)
                return total
        else:
            distributed = strategy.experimental_distribute_dataset(data)

            @tf.function
            def evaluate() -> Any:
                total = tf.zeros([width])
                for batch in distributed:
                    total += strategy.reduce(tf.distribute.ReduceOp.SUM,
                                             strategy.run(sums, args=(batch,)), axis=None)
                return total
        self._evaluate = evaluate

    def run(self) -> tuple[dict[str, float], int]:
        """{"loss": mean, metric: mean, ...} and the number of examples."""
        total = self._evaluate().numpy()
        count = float(total[-1])
        if count <= 0:
            raise UserError("make_validation_dataset() yielded no examples")
        return {name: float(total[i]) / count for i, name in enumerate(self.names)}, int(count)
