"""One task's work: set TensorFlow up from the plan, then serve (PS worker/ps) or train."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

from . import calibration_runs, loop, step_timing
from .checkpoints import Checkpoints
from .data import make_loss, model_source
from .distribute import BuiltStrategy, build_strategy, configure_devices
from .events import EventWriter
from .export import ModelSaver
from .grad_compression import usable_compression, wire_dtype
from .model_file import ModelSource, UserError
from .optim import make_optimizer
from .plan import PRECISIONS, Plan
from .process_exit import keep
from .profile_capture import ClusterCapture, ProfileCapture
from .profile_request import ProfileRequest
from .progress import Progress
from .stop_request import STOPPED_EXIT, StopRequest
from .summaries import Scalars
from .validation import Validator, metric_functions

TPU_SETUP_SECONDS = 180


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Tag any exception escaping the block with what the task was doing."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, "dtgui_stage"):
            exc.dtgui_stage = name  # type: ignore[attr-defined]  # a mark read by train.py on any exception
        raise


@contextlib.contextmanager
def watchdog(plan: Plan, events: EventWriter) -> Iterator[None]:
    """TPU set-up can hang when a peer accepts the connection but never answers: bound it."""
    if not plan.strategy.uses_tpu:
        yield
        return

    def give_up() -> None:
        address = plan.tpu_address
        events.emit("failed", error=f"The TPU at {address} did not finish connecting within "
                                    f"{TPU_SETUP_SECONDS} s: check the address and that the "
                                    f"TPU is up and idle", traceback="")
        events.close()
        os._exit(1)

    timer = threading.Timer(TPU_SETUP_SECONDS, give_up)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def versions() -> dict[str, str]:
    return {"python": platform.python_version(), "tensorflow": tf.__version__,
            "keras": keras.__version__}


def configure(plan: Plan) -> None:
    """Logical CPUs, seeds, determinism and the mixed-precision policy (before any op runs)."""
    with stage("configuring the devices"):
        configure_devices(plan)
    keras.utils.set_random_seed(plan.seed)
    if plan.deterministic:
        tf.config.experimental.enable_op_determinism()
    precision = plan.precision
    if precision not in PRECISIONS:
        raise UserError(f'Unknown precision "{precision}" (expected {", ".join(PRECISIONS)})')
    keras.mixed_precision.set_global_policy(str(precision))  # a plain str: Keras takes the .name of other objects


def started_fields(plan: Plan, info: BuiltStrategy, global_batch: int,
                   resumed: int) -> dict[str, Any]:
    return {"replicas": info.local_replicas, "replica_ids": info.replica_ids,
            "devices": info.devices, "strategy": str(info.name), "global_batch": global_batch,
            "steps": plan.steps, "versions": versions(), "pid": os.getpid(),
            "host": socket.gethostname(), "resumed_from_step": resumed,
            "supervisor_pid": os.getppid()}


def serve(plan: Plan, info: BuiltStrategy, task: str, events: EventWriter) -> int:
    """A parameter_server worker/ps task: a gRPC server that runs until it is stopped."""
    events.emit("started", **started_fields(plan, info, 0, 0))
    address = ""
    with contextlib.suppress(Exception):
        address = info.server.target
    events.log(f"{task} is a parameter_server {task.split(':')[0]} server ({address}); it runs "
               f"until it is stopped")
    print(f"[{task}] serving at {address}", flush=True)
    info.server.join()
    return 0


def build(source: ModelSource, info: BuiltStrategy, plan: Plan) -> tuple[Any, ...]:
    """Model, optimizer, loss and step counter, created inside strategy.scope()."""
    float16 = plan.precision == "mixed_float16"
    with info.strategy.scope():
        with stage("building the model"):
            model = source.call("build_model")
            if not isinstance(model, keras.Model):
                raise UserError(f"build_model() must return a keras.Model, it returned a "
                                f"{type(model).__name__}")
            if not model.trainable_variables:  # a subclassed model not built yet
                features, _ = sample_batch(source, plan.per_replica_batch)
                model(features)
        with stage("making the optimizer"):
            optimizer: Any = make_optimizer(plan, source)
        if float16:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        with stage("making the loss"):
            loss_obj = make_loss(source)
    return model, optimizer, loss_obj, step_var


def sample_batch(source: ModelSource, batch: int) -> tuple[Any, Any]:
    ds = loop.check_dataset(source.call("make_dataset"))
    features, labels = next(iter(ds.batch(batch).take(1)))
    return features, labels


def sample_inputs(source: ModelSource) -> Any:
    """A batch of validation (else training) inputs, kept with the saved model with what the
    model predicts for it; None when the inputs are not one array (a dict of features)."""
    name = "make_validation_dataset" if source.make_validation_dataset else "make_dataset"
    features, _ = next(iter(loop.check_dataset(source.call(name)).batch(16).take(1)))
    return features.numpy() if hasattr(features, "numpy") else None


def is_classification(loss_obj: Any) -> bool:
    """Whether the task is a classification (accuracy means something): judged by its loss."""
    return isinstance(loss_obj, (keras.losses.SparseCategoricalCrossentropy,
                                 keras.losses.CategoricalCrossentropy))


def agree_on_step(info: BuiltStrategy, step: int) -> None:
    """Workers that run collectives together must resume from the same step, or the
    collectives would hang."""
    if not info.name.collective_across_workers:
        return
    strategy = info.strategy
    value = tf.constant(float(step), tf.float64)

    @tf.function
    def sums() -> Any:
        ones = strategy.run(lambda: (value, value * value, tf.constant(1.0, tf.float64)))
        return [strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None) for x in ones]

    total, squares, n = (float(x) for x in sums())
    if abs(squares / n - (total / n) ** 2) > 1e-6:
        raise UserError(f"The workers found different checkpoints (this one: step {step}); "
                        f"every worker must see the chief's <out>/checkpoints directory")


def profile_capture(info: BuiltStrategy, out_dir: str, task: str,
                    events: EventWriter) -> Callable[[int, int], ProfileCapture]:
    """How this task captures TensorFlow's profiler over steps (first, last): its own
    process, or under parameter_server the coordinator and every worker it schedules on."""
    if info.coordinator is None:
        return lambda first, last: ProfileCapture(out_dir, task, first, last, events)
    return lambda first, last: ClusterCapture(out_dir, task, first, last, events,
                                              info.worker_addresses)


def run_task(plan: Plan, bundle_dir: str, out_dir: str, task: str,
             events: EventWriter, stop: StopRequest | None = None,
             asked: ProfileRequest | None = None) -> int:
    configure(plan)
    if plan.strategy.collective_across_workers or (
            plan.strategy.has_coordinator and task.startswith("chief:")):
        events.log("connecting to the cluster: waits until the other tasks are up")
    with stage(f"creating the {plan.strategy} strategy"), watchdog(plan, events):
        info = build_strategy(plan, task)
    if info.is_server:
        return serve(plan, info, task, events)
    source = model_source(plan, bundle_dir)
    model, optimizer, loss_obj, step_var = build(source, info, plan)
    global_batch = plan.per_replica_batch * int(info.strategy.num_replicas_in_sync)
    total_steps = plan.steps
    # made whatever the interval: a stop saves at the step reached (a run without periodic
    # checkpoints too), and a run started again continues from there
    with stage("restoring the latest checkpoint"):
        ckpts = Checkpoints(out_dir, info, model, optimizer, step_var)
        resumed = ckpts.restore_latest()
        agree_on_step(info, resumed)
    micro_batches = plan.micro_batches
    with stage("making the data set"):
        dataset = loop.distributed_dataset(source, info, plan.seed, global_batch,
                                           resumed * micro_batches)
    # ParameterServer: the workers' calls time themselves unless deterministic ops forbid the
    # clock (tf.timestamp raises under them)
    ps_timed = step_timing.enabled() and not plan.deterministic
    compression, fallback = usable_compression(plan, optimizer)
    if fallback:
        events.log(f"{fallback}; the run trains uncompressed", level="warning")
    elif compression != "none":
        events.log(f"gradients cross the network as {compression}: cast before the all-reduce, "
                   "summed, applied in float32")
    trainer = loop.make_trainer(info, model, optimizer, loss_obj, global_batch,
                                xla=plan.xla,
                                float16=plan.precision == "mixed_float16",
                                micro_batches=micro_batches,
                                clip_norm=float(plan.clip_norm), timed=ps_timed,
                                compression=compression, bytes_per_pack=plan.bytes_per_pack)
    classification = is_classification(loss_obj)
    # where a step's time goes (step_timing.py): the synchronous strategies' calibration runs, or
    # the parameter servers' round trip the coordinator schedules on the workers
    step_runs, round_trip_runs = None, None
    if info.coordinator is None:
        step_runs = calibration_runs.CalibrationRuns(info, trainer, model, optimizer, source,
                                                     global_batch, micro_batches)
    # what crosses the network each step: the gradients in the dtype they are all-reduced in
    elif ps_timed:
        round_trip_runs = calibration_runs.RoundTripRuns(info, model)
    elif plan.deterministic:
        events.log("where the workers' step time goes is not measured: deterministic ops "
                   "forbid reading the clock in a step (tf.timestamp); ParameterServer "
                   "training is asynchronous, so not reproducible anyway: turn "
                   "Deterministic ops off to measure it", level="warning")
    validator = None
    if source.make_validation_dataset is not None:
        with stage("making the validation data set"):
            validator = Validator(info, model, loss_obj,
                                  metric_functions(source, classification), source,
                                  global_batch)
    saver = ModelSaver(model, out_dir, sample_inputs(source), events,
                       keep_best=plan.save_best, active=info.is_chief)
    # the bytes each step's all-reduce carries: the network estimate's model size
    wire = wire_dtype(compression)
    gradient_bytes = sum(math.prod(int(d) for d in v.shape)
                         * (wire.size if wire is not None else tf.as_dtype(v.dtype).size)
                         for v in model.trainable_variables)
    events.emit("started", **started_fields(plan, info, global_batch, resumed),
                gradient_bytes=gradient_bytes, grad_compression=str(compression),
                **({"compression_fallback": fallback} if fallback else {}))
    if resumed:
        events.log(f"resumed from the checkpoint of step {resumed}")
    policy = keras.mixed_precision.global_policy()
    if policy.name != "float32":
        events.log(f"mixed precision {policy.name}: compute in {policy.compute_dtype}, "
                   f"variables in {policy.variable_dtype}")
    writer = None
    if info.is_chief:
        writer = Scalars(out_dir, task)
    capture = profile_capture(info, out_dir, task, events)
    first, last = plan.profile_steps
    profile = capture(first, last) if plan.profiled and first > resumed else None
    if plan.profiled and profile is None:
        events.log(f"profile: steps {first}-{last} were trained before the checkpoint this run "
                   f"resumed from (step {resumed}): not captured; ask for a profile of the "
                   f"running run (Profile N steps\u2026, or dtgui profile RUN --steps N)",
                   level="warning")
    progress = Progress(plan, info, events, ckpts, writer, global_batch, resumed, task,
                        optimizer=optimizer, validator=validator, saver=saver,
                        classification=classification, calibration_runs=step_runs,
                        round_trip_runs=round_trip_runs, stop=stop, profile=profile,
                        asked=asked, capture=capture)
    with stage(f"training ({info.name})"):
        if info.coordinator is not None:
            progress.run_ps(trainer, dataset)
        else:
            # Never released, whether training ends or fails: releasing the iterator winds
            # tf.data's threads down (seconds, more with many replicas), which must not stand
            # between the last step and the saved model, nor delay the process's end.
            inputs = iter(dataset)
            keep(inputs)
            progress.run(trainer, inputs)
    if progress.stopped_at is not None:  # saved and said so: the model is not exported
        if writer is not None:
            writer.close()
        return STOPPED_EXIT
    with stage("saving the trained model"):
        saver.final(max(total_steps, resumed))
    if writer is not None:
        writer.close()
    events.emit("finished", steps=max(total_steps, resumed), loss=progress.last_loss,
                seconds=round(time.time() - progress.started_at, 3),
                timeline=progress.timeline,
                reporting_seconds=round(progress.reporting_seconds, 4))
    loss = "" if progress.last_loss is None else f", loss {progress.last_loss:.4g}"
    print(f"[{task}] finished {total_steps} steps{loss}", flush=True)
    return 0
