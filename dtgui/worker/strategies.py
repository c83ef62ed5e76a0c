"""The catalogue of tf.distribute strategies dtgui offers: their names and every fact about them.

Every question about a strategy ("does it run several processes?", "which tasks does it
need?", "how many GPUs does a task take?") is answered here, by a property of `Strategy`.
The values are the names written in plan.json, settings and run records. No TensorFlow:
the GUI process and every bundle share this module.
"""

from __future__ import annotations

from .plan_options import Choice


class Strategy(Choice):
    """A strategy: its plan.json name (the value), the texts people read about it, and its
    facts (the properties below); an option set as the plan's others are (`named`, str())."""

    title: str  # type: ignore[assignment]  # the name shown to people; str.title() is no use here
    summary: str
    tf_class: str  # the TensorFlow class that implements it
    tagline: str  # its shape in a few words ("several worker processes · sync")
    good_for: str  # when to choose it
    updates: str  # how the replicas' updates are combined

    ONE_DEVICE = (
        "one_device", "OneDevice",
        "Trains on a single device (one GPU, or the CPU). The baseline: no distribution "
        "overhead, and the simplest to debug.",
        "tf.distribute.OneDeviceStrategy",
        "1 device · 1 process",
        "Debugging, small models, and a baseline to compare the others with.",
        "One replica: nothing to synchronise.")
    MIRRORED = (
        "mirrored", "Mirrored",
        "Synchronous data parallelism on one machine: every device (GPU, or logical CPU "
        "device) holds a copy of the model and gradients are all-reduced each step.",
        "tf.distribute.MirroredStrategy",
        "several devices · 1 process · sync",
        "One machine with several GPUs (or CPU cores) and a model that fits on one device.",
        "Synchronous: gradients are all-reduced every step.")
    CENTRAL_STORAGE = (
        "central_storage", "CentralStorage",
        "Synchronous data parallelism on one machine with the variables kept on the CPU "
        "and the computation replicated across devices. Useful when GPU memory is tight.",
        "tf.distribute.experimental.CentralStorageStrategy",
        "several devices · variables on CPU",
        "One machine whose devices are short of memory for the variables.",
        "Synchronous: variables on the CPU, updated once per step.")
    MULTI_WORKER_MIRRORED = (
        "multi_worker_mirrored", "MultiWorkerMirrored",
        "Synchronous data parallelism across several worker processes (here: processes on "
        "this machine talking over 127.0.0.1). Each worker mirrors the model on its local "
        "devices; gradients are all-reduced across all of them.",
        "tf.distribute.MultiWorkerMirroredStrategy",
        "several worker processes · sync",
        "Several machines training one model in lock-step (here: several processes on this "
        "machine).",
        "Synchronous: collective all-reduce across the workers.")
    PARAMETER_SERVER = (
        "parameter_server", "ParameterServer",
        "Asynchronous training: a coordinator dispatches steps to workers, variables live on "
        "parameter servers. Tolerates slow workers; losses are reported per step by the "
        "coordinator.",
        "tf.distribute.ParameterServerStrategy",
        "coordinator, workers, PS · async",
        "Many workers of uneven speed, or variables too large for one device.",
        "Asynchronous: workers update the parameter servers independently.")
    TPU = (
        "tpu", "TPU",
        "Trains on a Cloud TPU reached at a grpc:// address. dtgui checks that the address "
        "answers before launching and never waits on it for more than a few seconds.",
        "tf.distribute.TPUStrategy",
        "a Cloud TPU over grpc://",
        "Google Cloud TPUs (a TPU VM, or a TPU node reached over the network).",
        "Synchronous across the TPU cores.")

    def __new__(cls, name: str, *texts: str) -> Strategy:
        member = str.__new__(cls, name)
        member._value_ = name
        (member.title, member.summary, member.tf_class, member.tagline, member.good_for,
         member.updates) = texts
        return member

    @property
    def multi_process(self) -> bool:
        """Runs as a cluster of task processes (TF_CONFIG, one port per task, may span
        machines); the others run as one process on one machine."""
        return self in (Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER)

    @property
    def has_coordinator(self) -> bool:
        """A chief task dispatches steps to workers and holds no replica itself; its exit
        ends the run while the worker and ps tasks serve until they are stopped."""
        return self is Strategy.PARAMETER_SERVER

    @property
    def asynchronous(self) -> bool:
        """Workers update the variables independently (no all-reduce)."""
        return self is Strategy.PARAMETER_SERVER

    @property
    def collective_across_workers(self) -> bool:
        """Workers run collectives together: they must agree on the step to resume from and
        on the steps per call, and share the chief's checkpoints."""
        return self is Strategy.MULTI_WORKER_MIRRORED

    @property
    def task_types(self) -> tuple[str, ...]:
        """The kinds of task a run has, coordinator first."""
        if self is Strategy.PARAMETER_SERVER:
            return ("chief", "worker", "ps")
        return ("worker",)

    def holds_replicas(self, task_type: str) -> bool:
        """Whether a task of this type trains replicas (the coordinator and the parameter
        servers hold none)."""
        return task_type == "worker" or not self.multi_process

    @property
    def one_replica(self) -> bool:
        """Trains exactly one replica."""
        return self is Strategy.ONE_DEVICE

    @property
    def one_replica_per_worker(self) -> bool:
        """Each worker trains one replica on its own batch (total replicas = workers, the
        batch of a step is one worker's)."""
        return self is Strategy.PARAMETER_SERVER

    @property
    def one_gpu_per_task(self) -> bool:
        """A task takes one GPU, whatever the replicas per task; the others take one GPU
        per replica."""
        return self in (Strategy.ONE_DEVICE, Strategy.PARAMETER_SERVER)

    def gpus_per_task(self, replicas_per_task: int) -> int:
        """The GPUs a replica-holding task takes."""
        return 1 if self.one_gpu_per_task else replicas_per_task

    @property
    def supports_communication(self) -> bool:
        """Has a choice of collective communication (auto, ring, NCCL)."""
        return self in (Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED)

    @property
    def all_reduces_gradients(self) -> bool:
        """dtgui's loop all-reduces the replicas' gradients every update: it can compress them
        for the collective (the all-reduce levers); the others have no all-reduce to compress
        (one replica, variables kept on one device, parameter servers, a TPU's own)."""
        return self in (Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED)

    @property
    def packs_all_reduce(self) -> bool:
        """Its all-reduce is TensorFlow's collective, whose packs (CommunicationOptions'
        bytes_per_pack) start one by one, the last layers' gradients first."""
        return self is Strategy.MULTI_WORKER_MIRRORED

    def no_levers_reason(self) -> str:
        """Why the all-reduce levers do not apply to this strategy ("" when they do)."""
        if self.all_reduces_gradients:
            return ""
        if self is Strategy.PARAMETER_SERVER:
            return ("ParameterServer has no all-reduce: each worker sends its gradients to the "
                    "parameter servers.")
        if self is Strategy.ONE_DEVICE:
            return "OneDevice trains one replica: there is nothing to all-reduce."
        if self is Strategy.CENTRAL_STORAGE:
            return ("CentralStorage keeps the variables on one device of one machine: its "
                    "gradients do not cross a network.")
        return f"{self.title} all-reduces on its own interconnect: dtgui does not change it."

    @property
    def supports_xla(self) -> bool:
        return self is not Strategy.PARAMETER_SERVER

    @property
    def uses_tpu(self) -> bool:
        """Trains on a Cloud TPU reached at an address (not on this machine's devices)."""
        return self is Strategy.TPU

    @property
    def fit_needs_legacy_keras(self) -> bool:
        """Keras 3's model.fit fails under it (a PerReplica value reaches a Tensor
        conversion): a user's script that calls .fit( needs tf_keras."""
        return self.multi_process


# Every strategy by its plan.json name, in the order they are offered.
STRATEGIES: dict[str, Strategy] = {s.value: s for s in Strategy}
