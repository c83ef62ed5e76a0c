"""The calibration's runs: what `dtgui.worker.step_timing` compares a training call with
to split its time (input wait, compute, communication), made from the run's own model,
optimizer, data and strategy."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .distribute import BuiltStrategy
from .loop import Trainer, check_dataset, stop_pair, wishes
from .model_file import ModelSource
from .process_exit import keep
from .step_timing import CALIBRATION_REPEATS, RUN_SECONDS, Calibration


class CalibrationRuns:
    """The calibration's runs. ``measure(n, seconds, step)`` times, in seconds per step:
    training steps fed from one cached batch (forward, backward, all-reduce, update: no wait
    for the input pipeline), gradient all-reduces alone, and the plan's input pipeline alone
    producing a step's batches on the host, with as many steps (up to n) as fit in `seconds`.
    The model's and the optimizer's variables (weights, slots, random seeds, moving
    statistics) are put back afterwards, so training goes on exactly as without the
    calibration runs; the training iterator is not touched.

    Every run is the training call itself: given an iterator over the cached batch (its type
    is the training iterator's, so the call's trace is reused) for the steps, and no step but
    its probe's all-reduces for the all-reduce. Nothing is traced for them: a run of its own
    would take as long to trace as the training call's first (9 s of a 23 s run with 16
    replicas here). MultiWorkerMirrored tasks agree on the runs' steps through the call's
    `wishes`, as they agree on the call size: their collectives must match."""

    def __init__(self, info: BuiltStrategy, trainer: Trainer, model: keras.Model,
                 optimizer: Any, source: ModelSource, global_batch: int,
                 micro_batches: int) -> None:
        strategy = info.strategy
        self._variables = [*model.variables, *optimizer.variables]
        self._batch_source = (source, info, global_batch)
        self._cached: Any = None  # an iterator over one cached global batch, as training's
        self._inputs: Any = None  # the input pipeline alone (no shuffle, no prefetch)
        self._micro_batches = micro_batches
        self._batch_seconds = 0.0  # the input pipeline's first batch (an upper bound of one)
        self._last: Calibration | None = None
        # a single replica reduces nothing: its communication is none, not the runs' overhead
        self._reduced = int(strategy.num_replicas_in_sync) > 1
        training_call = trainer.run
        no_stop = stop_pair(0.0, 0.0)

        def call(cached: Any, steps: int, reduces: int, wished: float = 1.0) -> tuple[Any, float]:
            # every task calls it at once (its collectives, as training's, take them all)
            out = training_call(cached, tf.constant(steps), wishes(wished, False), no_stop,
                                tf.constant(reduces))
            return out[5].numpy(), float(out[2].numpy()[0])

        self._call = call

    def measure(self, most: int, seconds: float, step: float) -> Calibration:
        """Time the runs with n steps each (at most `most`, at least 1) so that they take
        about `seconds` with what making them took; `step`: the training step's seconds so
        far (an upper bound of a step on cached data, until a calibration measured one)."""
        began = time.perf_counter()
        setup = 0.0
        if self._cached is None:
            self._cached = cached_iterator(*self._batch_source)
            source, _, global_batch = self._batch_source
            self._inputs = iter(check_dataset(source.call("make_dataset")).repeat()
                                .batch(global_batch, drop_remainder=True))
            keep(self._inputs)
            first = time.perf_counter()
            next(self._inputs)  # the pipeline's start: not a measure
            self._batch_seconds = time.perf_counter() - first
        saved = [v.numpy() for v in self._variables]
        try:
            if self._last is None:
                # the first call over the cached batch fills it and warms the probe: not a
                # measure, but a bound of a step (with an all-reduce) beside the call's own cost
                first = time.perf_counter()
                self._call(self._cached, 1, int(self._reduced))
                step = min(step, time.perf_counter() - first) if step > 0 else \
                    time.perf_counter() - first
                setup = time.perf_counter() - began
                # the first call read the batch through the input pipeline: the next one is a
                # step on cached data alone, all an input-bound run's runs will cost a step
                first = time.perf_counter()
                self._call(self._cached, 1, int(self._reduced))
                step = min(step, time.perf_counter() - first)
            else:
                step = self._last.step + self._last.reduce
            left = seconds - (time.perf_counter() - began)
            wish = self._fitting(most, left, step)
            if self._last is None and self._smallest(step) > seconds:
                wish = 0  # even runs of one step would overrun the budget: put off
            n = self._agree(wish)
            if n == 0:
                return Calibration(step=step, reduce=0.0, setup=setup, n=0,
                                   input=self._micro_batches * self._batch_seconds)
            steps, reduces, inputs = [], [], []
            for _ in range(n * self._micro_batches):
                first = time.perf_counter()
                next(self._inputs)
                inputs.append(time.perf_counter() - first)
            for _ in range(CALIBRATION_REPEATS):
                steps.append(per_step(lambda m: self._call(self._cached, m, 0), n))
                if self._reduced:
                    reduces.append(per_step(lambda m: self._call(self._cached, 0, m), n))
        finally:
            for variable, value in zip(self._variables, saved, strict=True):
                variable.assign(value)
        # the median: as disturbed by other work as the training calls it is compared with
        self._last = Calibration(step=statistics.median(steps),
                                 reduce=statistics.median(reduces) if reduces else 0.0,
                                 input=statistics.median(inputs) * self._micro_batches,
                                 setup=setup, n=n)
        return self._last

    def _smallest(self, step: float) -> float:
        """Seconds the runs of one step take with steps of `step` seconds on cached data."""
        return 3 * CALIBRATION_REPEATS * 2 * step + self._micro_batches * self._batch_seconds

    def _fitting(self, most: int, seconds: float, step: float) -> int:
        """The runs' steps that fit in `seconds` (CALIBRATION_REPEATS runs of n then 2n steps,
        each a step and, counted as one, an all-reduce, and n steps' batches): `most`, or
        more for n steps to last RUN_SECONDS, fewer when they do not fit, at least one."""
        per_n = self._smallest(step)
        fit = int(seconds / per_n) if per_n > 0 else most
        wanted = max(most, math.ceil(RUN_SECONDS / step)) if step > 0 else most
        return max(1, min(wanted, fit))

    def _agree(self, n: int) -> int:
        """The steps every task runs: the mean of their wishes rounded down, through a call of
        no step (each task sizes its runs on its own timing; the mean is the same on all);
        0 (put off) when a task wished none and the others too few to lift the mean to one."""
        _, mean = self._call(self._cached, 0, 0, float(n))
        return int(mean + 1e-6)


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


def per_step(run: Any, n: int) -> float:
    """Seconds a step of `run(steps)` takes beyond the call's own overhead: the time of 2n
    steps minus that of n, over n (a call's fixed cost, a few milliseconds, would otherwise
    weigh on a run of few steps as it does not on a training call of many)."""
    began = time.perf_counter()
    run(n)
    once = time.perf_counter()
    run(2 * n)
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
