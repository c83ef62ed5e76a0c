"""The calibration's runs: what `dtgui.worker.step_timing` compares a training call with
to split its time (input wait, compute, communication), made from the run's own model,
optimizer, data and strategy."""

from __future__ import annotations

import statistics
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .distribute import BuiltStrategy
from .loop import Trainer, check_dataset, wishes
from .model_file import ModelSource
from .process_exit import keep
from .step_timing import CALIBRATION_REPEATS, Calibration


class CalibrationRuns:
    """The calibration's runs. ``measure(n)`` times, in seconds per step: n training steps
    fed from one cached batch (forward, backward, all-reduce, update: no wait for the input
    pipeline), n gradient all-reduces alone, and the plan's input pipeline alone producing n
    steps' batches on the host. The model's and the optimizer's variables (weights, slots,
    random seeds, moving statistics) are put back afterwards, so training goes on exactly
    as without the calibration runs; the training iterator is not touched.

    The training steps are the training call itself, given an iterator over the cached
    batch: its type is the training iterator's, so the call's trace is reused. A run of its
    own would be traced again, which takes as long as the training call's first trace (9 s
    of a 23 s run with 16 replicas here)."""

    def __init__(self, info: BuiltStrategy, trainer: Trainer, model: keras.Model,
                 optimizer: Any, source: ModelSource, global_batch: int,
                 micro_batches: int, wire_dtype: Any = None) -> None:
        strategy = info.strategy
        self._variables = [*model.variables, *optimizer.variables]
        self._batch_source = (source, info, global_batch)
        self._cached: Any = None  # an iterator over one cached global batch, as training's
        self._inputs: Any = None  # the input pipeline alone (no shuffle, no prefetch)
        self._micro_batches = micro_batches
        self._traced = False
        # a single replica reduces nothing: its communication is none, not the runs' overhead
        self._reduced = int(strategy.num_replicas_in_sync) > 1
        weights = list(model.trainable_variables)
        wire = wire_dtype or tf.float32  # the dtype training's gradients cross the network in
        training_call = trainer.run

        def steps(cached: Any, n: Any) -> Any:
            # every task calls it at once (its collectives, as training's, take them all)
            return training_call(cached, n, wishes(1.0, False), tf.constant(0.0, tf.float32))[1]

        def flat_weights() -> Any:
            # gradient-shaped: the weights read in the replica's context, in one vector as
            # the optimizer packs its gradients (constants could be folded away)
            return tf.concat([tf.reshape(tf.cast(w, wire), [-1]) for w in weights], 0)

        @tf.function
        def reduces(n: Any) -> Any:
            total = tf.constant(0.0)
            for _ in tf.range(n):
                values = strategy.run(flat_weights)
                summed = strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)[0]
                total += tf.cast(summed, tf.float32)
            return total

        self._steps, self._reduces = steps, reduces

    def measure(self, n: int) -> Calibration:
        source, _, global_batch = self._batch_source
        micro_batches = self._micro_batches
        began = time.perf_counter()
        if self._cached is None:
            self._cached = cached_iterator(*self._batch_source)
            self._inputs = iter(check_dataset(source.call("make_dataset")).repeat()
                                .batch(global_batch, drop_remainder=True))
            keep(self._inputs)
            next(self._inputs)  # the pipeline's start: not a measure
        saved = [v.numpy() for v in self._variables]
        try:
            if not self._traced:  # the first run warms up (the all-reduce's trace): not a measure
                self._steps(self._cached, tf.constant(1)).numpy()
                if self._reduced:
                    self._reduces(tf.constant(1)).numpy()
                self._traced = True
            setup = time.perf_counter() - began
            steps, reduces, inputs = [], [], []
            for _ in range(n * micro_batches):
                began = time.perf_counter()
                next(self._inputs)
                inputs.append(time.perf_counter() - began)
            for _ in range(CALIBRATION_REPEATS):
                steps.append(per_step(self._steps, self._cached, n=n))
                if self._reduced:
                    reduces.append(per_step(self._reduces, n=n))
        finally:
            for variable, value in zip(self._variables, saved, strict=True):
                variable.assign(value)
        # the median: as disturbed by other work as the training calls it is compared with
        return Calibration(step=statistics.median(steps),
                           reduce=statistics.median(reduces) if reduces else 0.0,
                           input=statistics.median(inputs) * micro_batches, setup=setup)


class RoundTripRuns:
    """The ParameterServer calibration's run, scheduled on the workers like a training
    call: n round trips to the parameter servers, each reading every trainable variable from
    its server to the worker and sending a tensor of the same size back (what a step moves:
    the variables in, the gradients out), timed on the worker. Nothing is written: the run
    runs between training calls without touching the training."""

    def __init__(self, info: BuiltStrategy, model: keras.Model) -> None:
        self._coordinator = info.coordinator
        self._traced = False
        self.calls: list[Any] = []  # the runs scheduled and not fetched yet
        self._n = 1
        self._setup = 0.0
        weights = [(w, _variable_device(w)) for w in model.trainable_variables]

        @tf.function
        def round_trips(n: Any) -> Any:
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            began = tf.timestamp()
            total = tf.constant(0.0)
            with tf.control_dependencies([began]):
                for i in tf.range(n):
                    # a factor of the iteration keeps each read in the loop (not hoisted)
                    factor = tf.cast(i + 1, tf.float32)
                    back = []
                    for weight, device in weights:
                        here = tf.cast(weight, tf.float32) * factor  # on the worker
                        with tf.device(device):  # back to the variable's server
                            back.append(tf.reduce_sum(here))
                    total += tf.add_n(back)
            with tf.control_dependencies([total]):
                seconds = tf.timestamp() - began
            return tf.stack([tf.cast(worker, tf.float64), seconds])

        self._round_trips = round_trips

    def schedule(self, n: int, count: int) -> list[Any]:
        """`count` runs of n round trips on whichever workers are free (the coordinator
        gives each closure to the next free worker); their results are fetched later."""
        return [self._coordinator.schedule(self._round_trips, args=(tf.constant(n),))
                for _ in range(count)]

    def start(self, n: int, count: int) -> None:
        """Make the run (once) and schedule `count` runs of n round trips behind the calls
        in flight; `collect` fetches them."""
        self._setup = self.trace()
        self.calls = self.schedule(n, count)
        self._n = n

    def collect(self) -> tuple[dict[int, float], dict[int, float], float]:
        """Fetch the scheduled runs: per worker, the seconds of a round trip and of its runs
        in all, and the seconds making the run took."""
        calls, self.calls = self.calls, []
        by_worker: dict[int, list[float]] = {}
        for worker, seconds in (np.asarray(f, dtype=np.float64)
                                for f in self._coordinator.fetch(calls)):
            by_worker.setdefault(int(worker), []).append(float(seconds))
        setup, self._setup = self._setup, 0.0
        return ({w: statistics.median(t) / self._n for w, t in by_worker.items()},
                {w: sum(t) for w, t in by_worker.items()}, setup)

    def trace(self) -> float:
        """Make the run (trace it) once, before the first use: seconds it took."""
        if self._traced:
            return 0.0
        began = time.perf_counter()
        self._round_trips.get_concrete_function(tf.TensorSpec([], tf.int32))
        self._traced = True
        return time.perf_counter() - began


def _variable_device(variable: Any) -> str:
    """The device a (Keras or TensorFlow) variable lives on: its parameter server."""
    inner = getattr(variable, "value", variable)  # a Keras 3 variable holds a tf.Variable
    return str(getattr(inner, "device", "") or getattr(variable, "device", ""))


def per_step(run: Any, *args: Any, n: int) -> float:
    """Seconds a step of `run` takes beyond the call's own overhead: the time of 2n steps
    minus that of n, over n (a call's fixed cost, a few milliseconds, would otherwise weigh
    on a run of few steps as it does not on a training call of many)."""
    began = time.perf_counter()
    run(*args, tf.constant(n)).numpy()
    once = time.perf_counter()
    run(*args, tf.constant(2 * n)).numpy()
    return max(0.0, (time.perf_counter() - once) - (once - began)) / n


def cached_iterator(source: ModelSource, info: BuiltStrategy, global_batch: int) -> Any:
    """An endless iterator over one global batch of the plan's data, distributed over the
    replicas as training's batches are (same structure, shapes and iterator type). Taken from
    a pipeline of its own: the training iterator's batches stay untouched."""
    ds = check_dataset(source.call("make_dataset")).repeat()
    ds = ds.batch(global_batch, drop_remainder=True).take(1).cache().repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    iterator = iter(info.strategy.experimental_distribute_dataset(
        ds.prefetch(tf.data.AUTOTUNE).with_options(options)))
    keep(iterator)  # released, tf.data's threads would wind down while training waits
    return iterator
