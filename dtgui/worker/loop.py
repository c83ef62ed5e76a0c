"""Dataset pipeline and the distributed training call: k steps per call in one graph loop
(a custom loop; works under every strategy)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from .distribute import BuiltStrategy
from .model_file import ModelSource, UserError
from .process_exit import keep
from .step_timing import PROBE_REPEATS, Calibration

SHUFFLE_BUFFER = 4096
SHUFFLE_BYTES = 256 * 1024 * 1024


def check_dataset(ds: Any) -> tf.data.Dataset:
    if not isinstance(ds, tf.data.Dataset):
        raise UserError(f"make_dataset() must return a tf.data.Dataset, it returned a "
                        f"{type(ds).__name__}")
    spec = ds.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise UserError("make_dataset() must yield unbatched (features, label) pairs; its "
                        f"elements are {spec}")
    return ds


def shuffle_buffer(spec: Any, cardinality: int) -> int:
    """The whole data set when small, else up to SHUFFLE_BUFFER elements within ~256 MiB."""
    size = 0
    for leaf in tf.nest.flatten(spec):
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is None or dtype is None or not shape.is_fully_defined():
            size = 0
            break
        size += shape.num_elements() * max(1, dtype.size)
    limit = SHUFFLE_BUFFER if size == 0 else max(64, min(SHUFFLE_BUFFER,
                                                         SHUFFLE_BYTES // size))
    return cardinality if 0 < cardinality <= limit else limit


def batched(ds: tf.data.Dataset, seed: Any, batch: int, skip_batches: int) -> tf.data.Dataset:
    """shuffle(seeded) -> repeat -> batch(drop_remainder) [-> skip the batches already done]."""
    card = int(ds.cardinality().numpy()) if tf.executing_eagerly() else -1
    buffer = shuffle_buffer(ds.element_spec, card)
    ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch, drop_remainder=True)
    if skip_batches > 0:
        ds = ds.skip(skip_batches)  # resume where the checkpointed run stopped
    return ds.prefetch(tf.data.AUTOTUNE)


def distributed_dataset(source: ModelSource, info: BuiltStrategy, seed: int, global_batch: int,
                        skip_batches: int) -> Any:
    """The plan's data, distributed over the strategy's replicas (an iterable)."""
    strategy = info.strategy
    if info.coordinator is not None:  # parameter_server: every worker builds its own pipeline
        # dataset_fn is traced once on the chief and run as is on every worker: with a fixed
        # seed every worker would train on the same batches. A counter variable (on a ps)
        # gives each worker's pipeline its own seed, without breaking op determinism.
        with strategy.scope():
            pipelines = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_pipelines")

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            ds = check_dataset(source.call("make_dataset"))
            per_worker = context.get_per_replica_batch_size(global_batch)
            worker_seed = pipelines.assign_add(1, read_value=True) + seed * 1000
            return batched(ds, worker_seed, per_worker, 0)

        def per_worker_dataset_fn() -> Any:
            return strategy.distribute_datasets_from_function(dataset_fn)

        return info.coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    ds = check_dataset(source.call("make_dataset"))
    ds = batched(ds, seed, global_batch, skip_batches)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return strategy.experimental_distribute_dataset(ds.with_options(options))


@dataclass
class Trainer:
    """The compiled training call and the replica's forward+backward pass.

    ``run(iterator, k, proposal)`` trains ``k`` steps on the device in one call (k a scalar
    int32 tensor, so another k reuses the same trace) and returns ``(per_task, totals,
    agreed)``: ``per_task`` is (k, local replicas, 2) - each local replica's mean loss and
    correct count per step -, ``totals`` is (k, 2), their sums over every replica in sync, and
    ``agreed`` the size of the next call every task agrees on (the mean of the tasks'
    float32 ``proposal``). Nothing in a call copies to the host; the caller fetches all three
    once per call. Under parameter_server ``run(iterator, k)`` is the closure the
    coordinator schedules on a worker: it returns (k, 2) for that worker's single replica,
    and (worker index, the call's seconds, its input wait) as timed on the worker.
    """

    run: Any  # a tf.function (called, and traced by xla_functions); TensorFlow has no types
    compute: Callable[..., Any]
    replica_step: Callable[..., Any] | None = None  # one update, in a replica's context


def loss_scale(optimizer: Any) -> Any:
    """The factor a LossScaleOptimizer's `scale_loss` multiplies the loss by now."""
    return optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale


def applied_learning_rate(optimizer: Any) -> Any:
    """In the graph: the learning rate of the optimizer's last update (its schedule at the
    number of updates applied, minus one). Fetched with the call's other results: read
    eagerly after each call it would cost ~0.5 ms, a quarter of what reporting may cost."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    schedule = inner._learning_rate  # the schedule itself, not its value now
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return tf.cast(schedule(tf.maximum(inner.iterations - 1, 0)), tf.float32)
    return tf.cast(tf.convert_to_tensor(schedule), tf.float32)


def make_trainer(info: BuiltStrategy, model: keras.Model, optimizer: Any, loss_obj: Any,
                 global_batch: int, xla: bool, float16: bool, micro_batches: int = 1,
                 clip_norm: float = 0.0, timed: bool = True) -> Trainer:
    """Build the distributed training call; with ``xla`` the replica's forward+backward is
    XLA-compiled.

    One step is one optimizer update over ``micro_batches`` consecutive batches (gradient
    accumulation): their gradients are summed, each averaged over all of them, so the update
    is the one of a batch ``micro_batches`` times as large. With ``clip_norm`` the summed
    gradient of every replica is all-reduced and clipped to that global norm before the
    update (Keras would clip each replica's part; under mixed_float16, the scaled gradient),
    and the optimizer's own all-reduce of the (then identical) gradients is kept, so each
    replica hands it 1/replicas of the total.

    The gradient all-reduce and the optimizer update stay outside the XLA cluster: they make
    cross-replica merge calls, which XLA cannot compile. The k steps of a call run in one
    graph loop (as Keras' ``steps_per_execution``): the loop body is the same graph whatever
    k is, so the losses do not depend on how the steps are split into calls.

    Under parameter_server each call times itself unless `timed` is False (deterministic
    ops forbid reading the clock in a graph: `tf.timestamp` raises).
    """
    strategy = info.strategy

    def compute(features: Any, labels: Any) -> tuple[Any, Any, Any]:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example = per_example_loss(loss_obj, labels, logits)
            loss = tf.nn.compute_average_loss(per_example,
                                              global_batch_size=global_batch * micro_batches)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(
                    tf.add_n([tf.cast(x, tf.float32) for x in model.losses])) / micro_batches
            scaled = optimizer.scale_loss(loss) if float16 else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        replica_loss = tf.reduce_mean(per_example)
        correct = _correct_count(labels, logits)
        return grads, replica_loss, correct

    compute_fn = tf.function(compute, jit_compile=True) if xla else compute

    def replica_step(batches: Any) -> Any:
        total: Any = None
        losses, correct = [], []
        for features, labels in batches:  # the micro-batches of one update (unrolled)
            grads, replica_loss, right = compute_fn(features, labels)
            total = grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]
            losses.append(replica_loss)
            correct.append(right)
        if clip_norm > 0:
            context = tf.distribute.get_replica_context()
            summed = context.all_reduce(tf.distribute.ReduceOp.SUM, total)
            # Under mixed_float16 the gradient is of the scaled loss (the optimizer unscales
            # it): clipping it to clip_norm x scale is clipping the true gradient to
            # clip_norm. A non-finite gradient stays non-finite (the optimizer skips it).
            limit = clip_norm * loss_scale(optimizer) if float16 else clip_norm
            clipped, _ = tf.clip_by_global_norm(summed, limit)
            total = [g / context.num_replicas_in_sync for g in clipped]
        optimizer.apply_gradients(zip(total, model.trainable_variables, strict=True))
        return tf.stack([tf.add_n(losses) / len(losses), tf.add_n(correct)])

    def next_batches(iterator: Any) -> tuple[Any, ...]:
        return tuple(next(iterator) for _ in range(micro_batches))

    if info.coordinator is not None:
        @tf.function
        def ps_steps(iterator: Any, k: Any) -> Any:
            # The call times itself on its worker (the coordinator sees only when results
            # arrive, several calls in flight): its seconds, its input wait, and which worker
            # ran it. An iteration starts once the previous one's updates are done (a loop
            # body's outputs wait for its stateful ops), so the first timestamp of each
            # iteration is its start; the input wait ends when the batches are there.
            rows = tf.TensorArray(tf.float32, size=k, element_shape=[2])
            if not timed:
                for i in tf.range(k):
                    rows = rows.write(i, strategy.run(replica_step,
                                                      args=(next_batches(iterator),)))
                return rows.stack(), tf.constant([-1.0, 0.0, 0.0], tf.float64)
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            began = tf.timestamp()
            waited = tf.constant(0.0, tf.float64)
            for i in tf.range(k):
                before = tf.timestamp()
                with tf.control_dependencies([before]):
                    batches = next_batches(iterator)
                with tf.control_dependencies(tf.nest.flatten(batches)):
                    waited += tf.timestamp() - before
                rows = rows.write(i, strategy.run(replica_step, args=(batches,)))
            stacked = rows.stack()
            with tf.control_dependencies([stacked]):
                seconds = tf.timestamp() - began
            return stacked, tf.stack([tf.cast(worker, tf.float64), seconds, waited])

        return Trainer(ps_steps, compute_fn, replica_step)

    local = info.local_replicas
    first_id = info.replica_ids[0] if info.replica_ids else 0
    across_workers = info.name.collective_across_workers

    def sums_and_size(per_task: Any, proposal: Any) -> tuple[Any, Any]:
        if not across_workers:
            return tf.reduce_sum(per_task, axis=1), proposal
        # One collective per call (not per step): every local replica contributes its own
        # column, and the sum runs over every worker's replicas. The proposed size of the
        # next call rides along: every worker must train the same number of steps per call
        # (or their collectives would not match), so they all take the mean proposal.
        extra = tf.reshape(tf.stack([proposal, 0.0]), [1, 1, 2])
        table = tf.concat([per_task, tf.repeat(extra, local, axis=1)], axis=0)
        columns = strategy.experimental_distribute_values_from_function(
            lambda ctx: table[:, ctx.replica_id_in_sync_group - first_id, :])
        summed = strategy.reduce(tf.distribute.ReduceOp.SUM, columns, axis=None)
        in_sync = tf.cast(strategy.num_replicas_in_sync, tf.float32)
        return summed[:-1], summed[-1, 0] / in_sync

    @tf.function
    def run_steps(iterator: Any, k: Any, proposal: Any) -> Any:
        rows = tf.TensorArray(tf.float32, size=k, element_shape=[local, 2])
        for i in tf.range(k):
            values = strategy.run(replica_step, args=(next_batches(iterator),))
            rows = rows.write(i, tf.stack(strategy.experimental_local_results(values)))
        per_task = rows.stack()
        totals, agreed = sums_and_size(per_task, proposal)
        return per_task, totals, agreed, applied_learning_rate(optimizer)

    return Trainer(run_steps, compute_fn, replica_step)


class Probes:
    """The calibration's probes. ``measure(n)`` times, in seconds per step: n training steps
    on a batch already on the devices (forward, backward, all-reduce, update: no input
    wait), n gradient all-reduces alone, and the plan's input pipeline alone producing n
    steps' batches on the host. The model's and the optimizer's variables (weights, slots,
    random seeds, moving statistics) are put back afterwards, so training goes on exactly
    as without the probes; the training iterator is not touched."""

    def __init__(self, info: BuiltStrategy, trainer: Trainer, model: keras.Model,
                 optimizer: Any, source: ModelSource, global_batch: int,
                 micro_batches: int) -> None:
        strategy = info.strategy
        replica_step = trainer.replica_step
        assert replica_step is not None
        self._variables = [*model.variables, *optimizer.variables]
        self._batch_source = (source, info, global_batch, micro_batches)
        self._batches: Any = None
        self._inputs: Any = None  # the input pipeline alone (no shuffle, no prefetch)
        self._traced = False
        # a single replica reduces nothing: its communication is none, not a probe's overhead
        self._reduced = int(strategy.num_replicas_in_sync) > 1
        weights = list(model.trainable_variables)

        @tf.function
        def steps(batches: Any, n: Any) -> Any:
            total = tf.constant(0.0)
            for _ in tf.range(n):
                values = strategy.run(replica_step, args=(batches,))
                total += tf.add_n([v[0] for v in strategy.experimental_local_results(values)])
            return total

        def flat_weights() -> Any:
            # gradient-shaped: the weights read in the replica's context, in one vector as
            # the optimizer packs its gradients (constants could be folded away)
            return tf.concat([tf.reshape(tf.cast(w, tf.float32), [-1]) for w in weights], 0)

        @tf.function
        def reduces(n: Any) -> Any:
            total = tf.constant(0.0)
            for _ in tf.range(n):
                values = strategy.run(flat_weights)
                total += strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)[0]
            return total

        self._steps, self._reduces = steps, reduces

    def measure(self, n: int) -> Calibration:
        source, _, global_batch, micro_batches = self._batch_source
        began = time.perf_counter()
        if self._batches is None:
            self._batches = cached_batches(*self._batch_source)
            self._inputs = iter(check_dataset(source.call("make_dataset")).repeat()
                                .batch(global_batch, drop_remainder=True))
            keep(self._inputs)
            next(self._inputs)  # the pipeline's start: not a measure
        saved = [v.numpy() for v in self._variables]
        try:
            if not self._traced:  # the first run traces: not a measure
                self._steps(self._batches, tf.constant(1)).numpy()
                if self._reduced:
                    self._reduces(tf.constant(1)).numpy()
                self._traced = True
            setup = time.perf_counter() - began
            steps, reduces, inputs = [], [], []
            for _ in range(n * micro_batches):
                began = time.perf_counter()
                next(self._inputs)
                inputs.append(time.perf_counter() - began)
            for _ in range(PROBE_REPEATS):
                steps.append(per_step(self._steps, self._batches, n=n))
                if self._reduced:
                    reduces.append(per_step(self._reduces, n=n))
        finally:
            for variable, value in zip(self._variables, saved, strict=True):
                variable.assign(value)
        # the median: as disturbed by other work as the training calls it is compared with
        return Calibration(step=statistics.median(steps),
                           reduce=statistics.median(reduces) if reduces else 0.0,
                           input=statistics.median(inputs) * micro_batches, setup=setup)


class ParameterServerProbe:
    """The ParameterServer calibration's probe, scheduled on the workers like a training
    call: n round trips to the parameter servers, each reading every trainable variable from
    its server to the worker and sending a tensor of the same size back (what a step moves:
    the variables in, the gradients out), timed on the worker. Nothing is written: the probe
    runs between training calls without touching the training."""

    def __init__(self, info: BuiltStrategy, model: keras.Model) -> None:
        self._coordinator = info.coordinator
        self._traced = False
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
        """`count` probes of n round trips on whichever workers are free (the coordinator
        gives each closure to the next free worker); their results are fetched later."""
        return [self._coordinator.schedule(self._round_trips, args=(tf.constant(n),))
                for _ in range(count)]

    def trace(self) -> float:
        """Make the probe (trace it) once, before the first use: seconds it took."""
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


def per_step(probe: Any, *args: Any, n: int) -> float:
    """Seconds a step of `probe` takes beyond the call's own overhead: the time of 2n steps
    minus that of n, over n (a call's fixed cost, a few milliseconds, would otherwise weigh
    on a probe of few steps as it does not on a training call of many)."""
    began = time.perf_counter()
    probe(*args, tf.constant(n)).numpy()
    once = time.perf_counter()
    probe(*args, tf.constant(2 * n)).numpy()
    return max(0.0, (time.perf_counter() - once) - (once - began)) / n


def cached_batches(source: ModelSource, info: BuiltStrategy, global_batch: int,
                   micro_batches: int) -> tuple[Any, ...]:
    """One global batch of the plan's data, distributed over the replicas as training's
    batches are (same structure and shapes), as the micro-batches of one step. Taken from a
    pipeline of its own: the training iterator's batches stay untouched."""
    ds = check_dataset(source.call("make_dataset")).repeat()
    ds = ds.batch(global_batch, drop_remainder=True).take(1).cache().repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    iterator = iter(info.strategy.experimental_distribute_dataset(ds.with_options(options)))
    keep(iterator)  # released, tf.data's threads would wind down while training waits
    batch = next(iterator)
    return tuple(batch for _ in range(micro_batches))


def per_example_loss(loss_obj: Any, labels: Any, outputs: Any) -> Any:
    """The loss of each example (float32, one value per example whatever the loss gives)."""
    per_example = tf.cast(loss_obj(labels, outputs), tf.float32)
    if per_example.shape.rank == 0:
        return tf.fill(tf.shape(outputs)[:1], per_example)
    if per_example.shape.rank is not None and per_example.shape.rank > 1:
        return tf.reduce_mean(per_example, axis=list(range(1, per_example.shape.rank)))
    return per_example


def sparse_accuracy(labels: Any, logits: Any) -> Any:
    """1.0 where the arg-max class is the label (integer labels, else one-hot), per example."""
    logits = tf.cast(logits, tf.float32)
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
    if labels.shape.rank is not None and logits.shape.rank is not None \
            and labels.shape.rank == logits.shape.rank and labels.shape[-1] == logits.shape[-1] \
            and logits.shape[-1] != 1:
        truth = tf.argmax(labels, axis=-1, output_type=tf.int64)
    else:
        truth = tf.cast(tf.reshape(labels, tf.shape(predicted)), tf.int64)
    return tf.cast(tf.equal(predicted, truth), tf.float32)


def _correct_count(labels: Any, logits: Any) -> Any:
    return tf.reduce_sum(sparse_accuracy(labels, logits))


def xla_functions(trainer: Trainer, iterator: Any, *args: Any) -> list[str]:
    """Names of the functions in the traced step that XLA must compile (``_XlaMustCompile``).

    With ``jit_compile=True`` TensorFlow compiles such a function or raises; so after a step
    has run, a non-empty list proves the replica step ran through XLA.
    """
    graph_def = trainer.run.get_concrete_function(iterator, *args).graph.as_graph_def()
    found = []
    for fdef in graph_def.library.function:
        if fdef.attr["_XlaMustCompile"].b or any(node.attr["_XlaMustCompile"].b for node in fdef.node_def):
            found.append(fdef.signature.name)
    return found
