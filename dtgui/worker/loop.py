"""Dataset pipeline and the distributed training call: k steps per call in one graph loop
(a custom loop; works under every strategy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from .distribute import BuiltStrategy
from .events import EventWriter
from .grad_compression import all_reduce_compressed, skip_optimizer_all_reduce, wire_dtype
from .model_file import ModelSource, UserError
from .plan import GradCompression

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

    ``run(iterator, k, wishes, stop, reduces)`` trains ``k`` steps on the device in one call
    (k a scalar int32 tensor, so another k reuses the same trace) and returns ``(per_task,
    totals, agreed, lr, stops, probe)``: ``per_task`` is (k, local replicas, 2) - each local replica's mean
    loss and correct count per step -, ``totals`` is (k, 2), their sums over every replica in
    sync, ``agreed`` what every task agrees on, the mean of the tasks' ``wishes`` (`wishes`):
    the size of the next call, and the share of the tasks wishing to calibrate the split after
    it; ``lr`` the learning rate applied, and ``stops`` the sums over every replica of the
    tasks' float32 ``stop`` pairs (`stop_pair`): the stop flags (above 0: every task saves
    and ends after this call, at the same step) and the profile asked (above 0: every task
    captures the steps asked from the next call on, profile_request.py); ``probe``
    the sum of ``reduces`` all-reduces of the weights made after the steps (0 in training:
    the split's calibration times them through the same trace). Nothing in a call copies to
    the host; the caller fetches them once per call.
    Under parameter_server ``run(iterator, k)`` is the closure the
    coordinator schedules on a worker: it returns (k, 2) for that worker's single replica,
    and (worker index, the call's seconds, its input wait) as timed on the worker.
    """

    run: Any  # a tf.function (called, and traced by xla_functions); TensorFlow has no types
    compute: Callable[..., Any]
    replica_step: Callable[..., Any] | None = None  # one update, in a replica's context


def wishes(size: float, calibrate: bool) -> Any:
    """A call's `wishes` argument: the size wanted for the next call, and whether this task
    would calibrate the split after it (1.0) or not (0.0)."""
    return tf.constant([size, 1.0 if calibrate else 0.0], tf.float32)


def stop_pair(stop: float, profile: float) -> Any:
    """A call's `stop` argument: this task's stop flag, and the steps it asks to profile over
    each of its local replicas (the call sums the replicas' columns: the sum is the steps)."""
    return tf.constant([stop, profile], tf.float32)


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
                 clip_norm: float = 0.0, timed: bool = True,
                 compression: GradCompression = GradCompression.NONE,
                 bytes_per_pack: int = 0) -> Trainer:
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

    With ``compression`` (grad_compression.py) the summed gradient is all-reduced here,
    crossing the network as float16 or bfloat16 in packs of ``bytes_per_pack``, cast back to
    float32, clipped when asked, and applied as it is: the optimizer's own all-reduce is
    skipped.

    Under parameter_server each call times itself unless `timed` is False (deterministic
    ops forbid reading the clock in a graph: `tf.timestamp` raises).
    """
    strategy = info.strategy
    wire = wire_dtype(compression)
    if wire is not None:
        skip_optimizer_all_reduce(optimizer)

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
        if wire is not None:
            total = all_reduce_compressed(total, wire, bytes_per_pack)
            if clip_norm > 0:  # the sum is every replica's: clipped as the branch below does
                limit = clip_norm * loss_scale(optimizer) if float16 else clip_norm
                total, _ = tf.clip_by_global_norm(total, limit)
        elif clip_norm > 0:
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

    def sums_and_size(per_task: Any, wishes: Any, stop: Any) -> tuple[Any, Any, Any]:
        if not across_workers:  # the one task's replicas: their columns summed, as below
            return tf.reduce_sum(per_task, axis=1), wishes, stop * tf.cast(local, tf.float32)
        # One collective per call (not per step): every local replica contributes its own
        # column, and the sum runs over every worker's replicas. The wishes ride along: every
        # worker must train the same number of steps per call and calibrate at the same call
        # (or their collectives would not match), so they all take the mean wishes. So does a
        # stop asked of any worker: all of them see it after the same call, and save there, and
        # a profile asked of the chief: all of them capture from the next call on.
        extra = tf.reshape(tf.concat([wishes, stop], 0), [2, 1, 2])
        table = tf.concat([per_task, tf.repeat(extra, local, axis=1)], axis=0)
        columns = strategy.experimental_distribute_values_from_function(
            lambda ctx: table[:, ctx.replica_id_in_sync_group - first_id, :])
        summed = strategy.reduce(tf.distribute.ReduceOp.SUM, columns, axis=None)
        in_sync = tf.cast(strategy.num_replicas_in_sync, tf.float32)
        return summed[:-2], summed[-2] / in_sync, summed[-1]

    weights = list(model.trainable_variables)

    def flat_weights() -> Any:
        # gradient-shaped: the weights read in the replica's context, in one vector as the
        # optimizer packs its gradients (constants could be folded away), in the dtype
        # training's gradients cross the network in
        return tf.concat([tf.reshape(tf.cast(w, wire or tf.float32), [-1]) for w in weights], 0)

    @tf.function
    def run_steps(iterator: Any, k: Any, wishes: Any, stop: Any, reduces: Any) -> Any:
        rows = tf.TensorArray(tf.float32, size=k, element_shape=[local, 2])
        for i in tf.range(k):
            values = strategy.run(replica_step, args=(next_batches(iterator),))
            rows = rows.write(i, tf.stack(strategy.experimental_local_results(values)))
        per_task = rows.stack()
        # The split's probe of the gradient all-reduce alone (none in training calls): the
        # same traced call times it, so measuring it traces nothing of its own.
        probe = tf.constant(0.0)
        for _ in tf.range(reduces):
            probe += tf.cast(strategy.reduce(tf.distribute.ReduceOp.SUM,
                                             strategy.run(flat_weights), axis=None)[0],
                             tf.float32)
        totals, agreed, stops = sums_and_size(per_task, wishes, stop)
        return per_task, totals, agreed, applied_learning_rate(optimizer), stops, probe

    return Trainer(run_steps, compute_fn, replica_step)


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


def report_xla(events: EventWriter, trainer: Trainer, iterator: Any, *args: Any) -> None:
    """Log whether the replica step runs through XLA (after the first call)."""
    try:
        names = xla_functions(trainer, iterator, *args)
    except Exception as exc:  # noqa: BLE001 - the check is evidence only; training goes on
        events.log(f"XLA: could not inspect the step function: {exc}", level="warning")
        return
    if names:
        events.log(f"XLA: the replica step is compiled by XLA ({names[0]})")
    else:
        events.log("XLA: no XLA-compiled function found in the step", level="warning")
