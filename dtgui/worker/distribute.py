"""Build the tf.distribute strategy a plan asks for, for one task."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from .model_file import UserError, one_line
from .netcheck import tpu_precheck
from .plan import COMMUNICATIONS, Plan
from .strategies import Strategy


@dataclass
class BuiltStrategy:
    """A built strategy plus what the training loop needs to know about this task."""

    name: Strategy
    strategy: Any = None
    local_replicas: int = 1
    replica_ids: list[int] = field(default_factory=lambda: [0])
    devices: list[str] = field(default_factory=list)
    is_chief: bool = True
    worker_index: int = 0  # index among the compute workers (MWMS), else 0
    coordinator: Any = None  # parameter_server chief: ClusterCoordinator
    server: Any = None  # parameter_server worker/ps: the running tf.distribute.Server
    ps_workers: int = 0  # parameter_server chief: the workers its coordinator schedules on
    worker_addresses: list[str] = field(default_factory=list)  # theirs, "host:port" (chief)

    @property
    def is_server(self) -> bool:
        return self.server is not None


def parse_task(task: str) -> tuple[str, int]:
    """``"worker:0"`` -> ("worker", 0)."""
    kind, _, index = task.partition(":")
    if not kind or not index.isdigit():
        raise UserError(f'--task must look like "worker:0", got "{task}"')
    return kind, int(index)


def env_tf_config() -> dict[str, Any]:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"TF_CONFIG is not valid JSON: {exc}") from exc
    return value if isinstance(value, dict) else {}


def configure_devices(plan: Plan) -> None:
    """Before TensorFlow initialises: GPUs grow their memory on demand (tasks may share a
    host); on CPU, make ``replicas_per_task`` logical CPU devices."""
    replicas = plan.replicas_per_task
    if plan.on_gpu:
        for gpu in tf.config.list_physical_devices("GPU"):
            with contextlib.suppress(RuntimeError, ValueError):
                tf.config.experimental.set_memory_growth(gpu, True)
        return
    if replicas <= 1:
        return
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])


def fixed_device_buffers() -> bool:
    """Turn tf.data's autotuning off for the per-device buffers of distributed input.

    A distributed dataset's iterator (experimental_distribute_dataset, and a validation
    loop over one) feeds each replica from its own small dataset, a fixed-size prefetch from
    the host's pipeline: there is nothing to tune in it, yet tf.data starts an autotuning
    thread per device. That thread sleeps between rounds for a period that doubles up to a
    minute, and (TensorFlow 2.21) does not wake when its iterator is cancelled: releasing
    the iterator waits out each device's sleep in turn, with the GIL held. At 16 replicas the
    end of a run waited minutes. The host's own pipeline keeps its autotuning (its thread
    does wake). Returns False when this TensorFlow builds the per-device datasets some other
    way (then nothing is changed).
    """
    try:
        from tensorflow.python.data.ops import multi_device_iterator_ops as ops
    except ImportError:
        return False
    make = getattr(ops, "_create_device_dataset", None)
    if make is None:
        return False
    if getattr(make, "dtgui_fixed", False):
        return True

    @functools.wraps(make)
    def fixed(*args: Any, **kwargs: Any) -> Any:
        options = tf.data.Options()
        options.autotune.enabled = False
        return make(*args, **kwargs).with_options(options)

    setattr(fixed, "dtgui_fixed", True)  # noqa: B010 - a mark on a function object: no attribute to declare
    ops._create_device_dataset = fixed
    return True


def local_devices(plan: Plan) -> list[str]:
    """The device strings of this task's replicas (``/cpu:i`` or ``/gpu:i``)."""
    replicas = max(1, plan.replicas_per_task)
    if plan.on_gpu:
        found = len(tf.config.list_logical_devices("GPU"))
        if found < replicas:
            raise UserError(f"The plan needs {replicas} GPU(s) per task but TensorFlow sees "
                            f"{found} here (check CUDA_VISIBLE_DEVICES and the CUDA install)")
        return [f"/gpu:{i}" for i in range(replicas)]
    found = len(tf.config.list_logical_devices("CPU"))
    return [f"/cpu:{i}" for i in range(min(replicas, found))]


def _unknown_communication(comm: str) -> UserError:
    return UserError(f'Unknown communication "{comm}" (expected {", ".join(COMMUNICATIONS)})')


def _mirrored_ops(plan: Plan) -> Any:
    comm = plan.communication
    on_gpu = plan.on_gpu
    if comm == "nccl":
        if not on_gpu:
            raise UserError('communication "nccl" needs GPUs; use "auto" or "ring" on CPUs')
        return tf.distribute.NcclAllReduce()
    if comm == "ring":
        return tf.distribute.HierarchicalCopyAllReduce()
    if comm == "auto":
        return None if on_gpu else tf.distribute.ReductionToOneDevice()
    raise _unknown_communication(comm)


def _mwms_options(plan: Plan) -> Any:
    impl = tf.distribute.experimental.CommunicationImplementation
    comm = plan.communication
    table = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}
    if comm not in table:
        raise _unknown_communication(comm)
    # bytes_per_pack: packs start one by one, the last layers' gradients first, so the first
    # can cross the network while the backward pass still computes the earlier layers'
    return tf.distribute.experimental.CommunicationOptions(
        implementation=table[comm], bytes_per_pack=max(0, int(plan.bytes_per_pack)))


def _worker_devices(strategy: Any) -> list[str]:
    try:
        return [str(d) for d in strategy.extended.worker_devices]
    except Exception:  # noqa: BLE001 - strategies without that list raise their own errors; it is informative only
        return []


def build_strategy(plan: Plan, task: str) -> BuiltStrategy:
    """Build the plan's strategy for this task (after configure_devices)."""
    name = Strategy(plan.strategy)  # train.load_plan refused unknown names
    task_type, task_index = parse_task(task)
    if not name.uses_tpu:  # CPU and GPU devices: the options op it adds has kernels there
        fixed_device_buffers()
    if name is Strategy.ONE_DEVICE:
        device = "/gpu:0" if plan.on_gpu else "/cpu:0"
        local_devices(plan.with_changes(replicas_per_task=1))
        strategy = tf.distribute.OneDeviceStrategy(device)
        return BuiltStrategy(name, strategy, 1, [0], [device])
    if name is Strategy.MIRRORED:
        devices = local_devices(plan)
        strategy = tf.distribute.MirroredStrategy(devices=devices,
                                                  cross_device_ops=_mirrored_ops(plan))
        n = strategy.num_replicas_in_sync
        return BuiltStrategy(name, strategy, n, list(range(n)), _worker_devices(strategy))
    if name is Strategy.CENTRAL_STORAGE:
        devices = local_devices(plan)
        strategy = tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=devices, parameter_device="/cpu:0")
        n = strategy.num_replicas_in_sync
        return BuiltStrategy(name, strategy, n, list(range(n)),
                             _worker_devices(strategy) or devices)
    if name is Strategy.MULTI_WORKER_MIRRORED:
        return _build_mwms(plan, task_type, task_index)
    if name is Strategy.PARAMETER_SERVER:
        return _build_ps(task_type, task_index)
    return _build_tpu(plan)


def _build_mwms(plan: Plan, task_type: str, task_index: int) -> BuiltStrategy:
    config = env_tf_config()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=_mwms_options(plan))
    devices = _worker_devices(strategy)
    local = max(1, len(devices))
    cfg_task = config.get("task", {})
    index = int(cfg_task.get("index", task_index)) if config else 0
    kind = cfg_task.get("type", task_type) if config else "worker"
    is_chief = (kind == "chief") or (kind == "worker" and index == 0
                                     and "chief" not in config.get("cluster", {}))
    ids = [index * local + r for r in range(local)]
    return BuiltStrategy(Strategy.MULTI_WORKER_MIRRORED, strategy, local, ids, devices,
                         is_chief=is_chief, worker_index=index)


def _build_ps(task_type: str, task_index: int) -> BuiltStrategy:
    config = env_tf_config()
    if not config.get("cluster"):
        raise UserError("parameter_server needs TF_CONFIG with a cluster (chief, worker, ps); "
                        "run the task through its tasks/<task>.sh script")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    job = resolver.task_type or task_type
    index = resolver.task_id if resolver.task_id is not None else task_index
    if job in ("worker", "ps"):
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=job, task_index=index,
                                      protocol=resolver.rpc_layer or "grpc", start=True)
        return BuiltStrategy(Strategy.PARAMETER_SERVER, None, 0, [],
                             [f"/job:{job}/task:{index}"], is_chief=False, worker_index=index,
                             server=server)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    workers = [str(a) for a in resolver.cluster_spec().job_tasks("worker")]
    return BuiltStrategy(Strategy.PARAMETER_SERVER, strategy, 1, [0],
                         ["/job:chief/replica:0/task:0"], coordinator=coordinator,
                         ps_workers=len(workers), worker_addresses=workers)


def _build_tpu(plan: Plan) -> BuiltStrategy:
    address = tpu_precheck(plan.tpu_address)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as exc:
        raise UserError(f"Something answers at {address} but TensorFlow could not use it as a "
                        f"TPU ({one_line(exc)}); check the address and the TPU's TensorFlow "
                        f"version", traceback.format_exc()) from exc
    strategy = tf.distribute.TPUStrategy(resolver)
    n = strategy.num_replicas_in_sync
    return BuiltStrategy(Strategy.TPU, strategy, n, list(range(n)), _worker_devices(strategy))
