"""The wizard's Slurm target: the job a run asks of a cluster (nodes × tasks per node × GPUs
per task, partition, time limit, the nodes' Python), with the cluster's registered defaults
(`dtgui.core.slurm.SlurmDefaults`) filled in.

The target choice offers it as "Slurm cluster:" with the clusters beside it (the registered
clusters' login nodes, and this machine when Slurm's client is here); chosen, it stands in
for the review page's machine rows (`MachinesBox`) and makes the job (`SlurmJob`) the Slurm
driver's `target_of_job` turns into the target. The run's tasks
follow the job: a multi-process strategy gets nodes × tasks per node tasks (the coordinator
and the parameter servers first, the rest workers); a single-process strategy runs as one task
on one node. GPUs per task make a GPU run (one replica a GPU where the strategy says so).
Everything the user types is validated by `dtgui.core.slurm` (`job_problems`), and, when the
cluster's partitions are known (`sinfo`), checked against them (`fit_problems`).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import task_layout
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.settings import atomic_write_text, config_dir, read_json_or_backup
from dtgui.core.slurm import (
    JOB_FILE,
    LOCAL_CLUSTER,
    SlurmDefaults,
    SlurmError,
    SlurmJob,
    batch_script,
    fit_problems,
    job_problems,
    tf_config_on_nodes,
)
from dtgui.core.slurm_answers import ClusterFacts, Partition
from dtgui.core.slurm_bundle import place_on_cluster
from dtgui.launch.drivers.slurm import KIND
from dtgui.ui.workers import run_in_thread

from .common import card, label, mark_invalid, muted
from .target_box import TargetBox

LOGIN_NODE_TEXT = "This machine (login node)"

TPU_REFUSAL = ("The TPU strategy trains on a Cloud TPU, not on a Slurm cluster's nodes: choose "
               "another strategy, or another target.")


def tasks_for(strategy: Strategy, parameter_servers: int) -> int:
    """The fewest tasks a strategy runs as: a worker, plus its coordinator and servers."""
    if not strategy.multi_process:
        return 1
    extra = (1 if strategy.has_coordinator else 0) + \
        (parameter_servers if "ps" in strategy.task_types else 0)
    return 1 + extra


def fit_plan(plan: Plan, tasks: int, gpus_per_task: int) -> Plan:
    """The plan whose tasks are the job's `tasks` (rank order: the coordinator, the workers,
    the parameter servers) and whose devices are its GPUs (none: the CPU)."""
    strategy = plan.strategy
    changes: dict[str, object] = {"device_kind": "gpu" if gpus_per_task else "cpu"}
    if strategy.multi_process:
        changes["workers"] = max(1, tasks - tasks_for(strategy, plan.parameter_servers) + 1)
    if gpus_per_task and not strategy.one_gpu_per_task and not strategy.one_replica_per_worker:
        changes["replicas_per_task"] = gpus_per_task  # one replica a GPU
    return plan.with_changes(**changes)


class SlurmBox(TargetBox):
    """The job's fields for one cluster; `job()` and `fitted(plan)` for the review."""

    kind = KIND
    title = "Slurm cluster:"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("slurmBox")
        self._clusters: list[Machine] = []  # registered Slurm clusters (their login nodes)
        self._machines: list[Machine] = []
        self._login_node = False  # Slurm's client is here: this machine may be a login node
        self._probed: dict[str, list[Partition]] = {}  # cluster -> its probed partitions
        self.cluster_combo = QComboBox()
        self.cluster_combo.setObjectName("clusterChoice")
        self.cluster_combo.setMinimumWidth(200)
        self.cluster_combo.currentIndexChanged.connect(self._on_cluster)
        # picking a cluster is choosing the Slurm target
        self.cluster_combo.activated.connect(lambda _index: self.chosen.emit())
        self.cluster = ""  # the chosen cluster's name ("local": this machine is the login node)
        self.defaults = SlurmDefaults()
        self.partitions: list[Partition] = []  # what sinfo told of the cluster (may be none)
        self.last_job: SlurmJob | None = None  # the last job sent from the wizard
        self._strategy: Strategy | None = None
        self._machine: Machine | None = None  # the chosen cluster's registration
        self.nodes_spin = QSpinBox()
        self.nodes_spin.setRange(1, 10000)
        self.nodes_spin.setValue(2)
        self.nodes_spin.setObjectName("slurmNodes")
        self.tasks_spin = QSpinBox()
        self.tasks_spin.setRange(1, 1024)
        self.tasks_spin.setObjectName("slurmTasksPerNode")
        self.gpus_spin = QSpinBox()
        self.gpus_spin.setRange(0, 64)
        self.gpus_spin.setObjectName("slurmGpusPerTask")
        self.gpus_spin.setToolTip("0: the tasks train on the nodes' CPUs.")
        self.partition_edit = QLineEdit()
        self.partition_edit.setObjectName("slurmPartition")
        self.partition_edit.setPlaceholderText("the cluster's default")
        self.time_edit = QLineEdit()
        self.time_edit.setObjectName("slurmTime")
        self.time_edit.setPlaceholderText("the partition's default (HH:MM:SS, D-HH:MM)")
        self.python_edit = QLineEdit()
        self.python_edit.setObjectName("slurmPython")
        self.python_edit.setPlaceholderText("python3")
        self.python_edit.setToolTip("The interpreter (with TensorFlow) on the nodes, after the "
                                    "cluster's setup lines (module load, venv, conda).")
        for spin in (self.nodes_spin, self.tasks_spin, self.gpus_spin):
            spin.setMinimumWidth(80)
            spin.valueChanged.connect(self._on_change)
        for edit in (self.partition_edit, self.time_edit, self.python_edit):
            edit.textChanged.connect(self._on_change)

        inner = card()
        grid = QGridLayout(inner)
        grid.setContentsMargins(14, 8, 14, 8)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(4)
        heading = label("The Slurm job", wrap=False)
        heading.setStyleSheet("font-weight: bold;")
        grid.addWidget(heading, 0, 0, 1, 6)
        rows: tuple[tuple[tuple[str, QWidget], ...], ...] = (
            (("Nodes:", self.nodes_spin), ("× tasks per node:", self.tasks_spin),
             ("× GPUs per task:", self.gpus_spin)),
            (("Partition:", self.partition_edit), ("Time limit:", self.time_edit),
             ("Python on the nodes:", self.python_edit)))
        for row, fields in enumerate(rows, start=1):
            for col, (text, widget) in enumerate(fields):
                grid.addWidget(QLabel(text), row, col * 2)
                grid.addWidget(widget, row, col * 2 + 1)
        for col in (1, 3, 5):
            grid.setColumnStretch(col, 1)
        self.layout_label = muted()
        self.layout_label.setObjectName("slurmLayout")
        grid.addWidget(self.layout_label, 3, 0, 1, 6)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(inner)
        self._active = False  # the Slurm target is the choice
        run_in_thread(local_login_node, self._set_login_node, lambda _exc: None, context=self)
        run_in_thread(load_last_job, self.remember, lambda _exc: None, context=self)

    # -- the choice ------------------------------------------------------------------------
    def chooser(self) -> QWidget:
        return self.cluster_combo

    def set_machines(self, machines: Sequence[Machine]) -> None:
        self._machines = list(machines)
        self._clusters = [m for m in machines if m.is_slurm]
        self._update_clusters()

    def set_facts(self, facts: Mapping[str, object]) -> None:
        """A job for a cluster is checked against the partitions its probe found."""
        self._probed = {name: list(f.partitions) for name, f in facts.items()
                        if isinstance(f, ClusterFacts) and f.partitions}
        if self.cluster in self._probed:
            self.set_partitions(self._probed[self.cluster])

    def available(self) -> bool:
        return bool(self.cluster_combo.count())

    def tip(self) -> str:
        return ("The run is one batch job on the cluster's nodes." if self.available() else
                "No Slurm cluster is registered: add its login node under Machines (Slurm "
                "cluster).")

    def last_chosen(self, machines: set[str]) -> bool:
        last = next((m.name for m in self._clusters if m.name in machines), "")
        if last:
            self.cluster_combo.blockSignals(True)
            self.cluster_combo.setCurrentIndex(self.cluster_combo.findData(last))
            self.cluster_combo.blockSignals(False)
        return bool(last)

    def set_active(self, active: bool) -> None:
        self._active = active
        self._on_cluster()

    def chosen_cluster(self) -> Machine | None:
        """The chosen registered cluster (None: none, or this machine is the login node)."""
        name = str(self.cluster_combo.currentData() or "")
        return next((m for m in self._machines if m.name == name), None)

    def _set_login_node(self, found: bool) -> None:
        self._login_node = bool(found)
        self._update_clusters()

    def _update_clusters(self) -> None:
        """Offer the clusters there are; keep the chosen one while it is offered."""
        chosen = self.cluster_combo.currentData()
        self.cluster_combo.blockSignals(True)
        self.cluster_combo.clear()
        for machine in self._clusters:
            self.cluster_combo.addItem(machine.name, machine.name)
        if self._login_node:
            self.cluster_combo.addItem(LOGIN_NODE_TEXT, LOCAL_CLUSTER)
        self.cluster_combo.setCurrentIndex(max(0, self.cluster_combo.findData(chosen)))
        self.cluster_combo.blockSignals(False)
        self.cluster_combo.setEnabled(self.available())
        self.offered.emit()

    def _on_cluster(self) -> None:
        name = str(self.cluster_combo.currentData() or "")
        if not self._active or not name or name == self.cluster:
            return
        self.set_cluster(name, self.chosen_cluster())
        if name == LOCAL_CLUSTER:  # sinfo here: the job is checked against its partitions
            run_in_thread(local_partitions, self._set_partitions(name), lambda _exc: None,
                          context=self)
        elif name in self._probed:  # as the Machines panel last probed them
            self.set_partitions(self._probed[name])

    def _set_partitions(self, name: str) -> Callable[[object], None]:
        def done(partitions: object) -> None:
            if self.cluster == name and isinstance(partitions, list):
                self.set_partitions(partitions)

        return done

    # -- inputs ----------------------------------------------------------------------------
    def set_cluster(self, name: str, machine: Machine | None) -> None:
        """Fill the fields from a cluster's registered defaults (this machine as the login
        node: Slurm's own defaults, and this process's Python)."""
        if name == self.cluster:
            return
        self.cluster = name
        self._machine = machine
        self.partitions = []
        self.defaults = machine.slurm if machine is not None and machine.slurm else \
            SlurmDefaults()
        python = (machine.python.strip() if machine is not None else "") or (
            sys.executable if name == LOCAL_CLUSTER else "python3")
        fields: tuple[QWidget, ...] = (self.partition_edit, self.time_edit, self.python_edit,
                                       self.gpus_spin)
        for widget in fields:
            widget.blockSignals(True)
        self.partition_edit.setText(self.defaults.partition)
        self.time_edit.setText(self.defaults.time_limit)
        self.python_edit.setText(python)
        per_task = self.defaults.gpus_per_node // max(1, self.tasks_spin.value())
        self.gpus_spin.setValue(per_task)
        last = self.last_job
        if last is not None and last.cluster == name:  # the fields as that job had them
            self.partition_edit.setText(last.partition)
            self.time_edit.setText(last.time_limit)
            self.gpus_spin.setValue(last.gpus_per_node // max(1, last.tasks_per_node))
            if self._strategy is not None and self._strategy.multi_process:
                self._set_layout(last.nodes, last.tasks_per_node)
        for widget in fields:
            widget.blockSignals(False)
        self._on_change()

    def remember(self, job: SlurmJob | None) -> None:
        """The last job sent from the wizard: its cluster opens with that job's nodes, tasks
        per node, GPUs per task, partition and time limit."""
        self.last_job = job
        if job is not None and job.cluster == self.cluster:  # shown already: fill it again
            partitions, self.cluster = self.partitions, ""
            self.set_cluster(job.cluster, self._machine)
            self.set_partitions(partitions)

    def _set_layout(self, nodes: int, tasks_per_node: int) -> None:
        for spin, value in ((self.nodes_spin, nodes), (self.tasks_spin, tasks_per_node)):
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)

    def set_partitions(self, partitions: list[Partition]) -> None:
        """What `sinfo` says of the cluster's partitions: the job is checked against them."""
        self.partitions = list(partitions)
        self._on_change()

    def set_plan(self, plan: Plan) -> None:
        """The strategy decides what may change: a single-process strategy is one task on
        one node; a multi-process one needs room for its coordinator and servers."""
        strategy = plan.strategy
        fresh = strategy != self._strategy
        self._strategy = strategy
        single = not strategy.multi_process
        for spin in (self.nodes_spin, self.tasks_spin):
            spin.blockSignals(True)
            spin.setEnabled(not single)
        if single:
            self.nodes_spin.setValue(1)
            self.tasks_spin.setValue(1)
        elif fresh and self._last_fits(len(task_layout(plan))):
            assert self.last_job is not None
            self.nodes_spin.setValue(self.last_job.nodes)
            self.tasks_spin.setValue(self.last_job.tasks_per_node)
        elif fresh:  # the plan's own task count, one a node
            self.nodes_spin.setValue(len(task_layout(plan)))
            self.tasks_spin.setValue(1)
        for spin in (self.nodes_spin, self.tasks_spin):
            spin.setToolTip(f"{strategy.title} runs as one process: one task on one node."
                            if single else "")
            spin.blockSignals(False)

    def _last_fits(self, tasks: int) -> bool:
        """The last job was for this cluster and had as many tasks as the plan."""
        last = self.last_job
        return last is not None and last.cluster == self.cluster and last.tasks == tasks

    # -- outputs ---------------------------------------------------------------------------
    def tasks(self) -> int:
        return self.nodes_spin.value() * self.tasks_spin.value()

    def fitted(self, plan: Plan) -> Plan:
        """The plan with the job's tasks and devices."""
        return fit_plan(plan, self.tasks(), self.gpus_spin.value())

    def job(self, plan: Plan) -> SlurmJob:
        """The job as typed, with the cluster's other defaults (not validated)."""
        tasks_per_node = self.tasks_spin.value()
        return SlurmJob.from_defaults(
            self.cluster or LOCAL_CLUSTER, self.defaults, nodes=self.nodes_spin.value(),
            tasks_per_node=tasks_per_node,
            gpus_per_node=tasks_per_node * self.gpus_spin.value(),
            partition=self.partition_edit.text().strip(),
            time_limit=self.time_edit.text().strip(),
            python=self.python_edit.text().strip() or None,
            job_name="")

    def problems(self, placed: Plan, job: SlurmJob) -> list[str]:
        """Why the job cannot be submitted as typed (before anything is written)."""
        strategy = placed.strategy
        if strategy.uses_tpu:
            return [TPU_REFUSAL]
        least = tasks_for(strategy, placed.parameter_servers)
        if strategy.multi_process and self.tasks() < least:
            return [f"{strategy.title} with {placed.parameter_servers} parameter server(s) "
                    f"needs at least {least} tasks (a coordinator, the servers and a worker): "
                    f"nodes × tasks per node is {self.tasks()}."]
        out = job_problems(placed, job) + fit_problems(job, self.partitions)
        mark_invalid(self.partition_edit, any("partition" in p for p in out))
        mark_invalid(self.time_edit, any("time limit" in p for p in out))
        return out

    def review(self, draft: Plan) -> tuple[Plan, object, list[str]]:
        """The job's tasks in rank order on the cluster, as the launch places them."""
        fitted = self.fitted(draft)
        job = self.job(fitted)
        placed = place_on_cluster(fitted, job)
        problems = self.problems(placed, job)
        self.show_layout(placed)
        return placed, job, problems

    def task_where(self, job: object, rank: int) -> str:
        assert isinstance(job, SlurmJob)
        return f"Slurm rank {rank} · node {rank // job.tasks_per_node + 1}"

    def note(self, placed: Plan, job: object) -> str:
        assert isinstance(job, SlurmJob)
        where = ("this machine's Slurm" if job.cluster == LOCAL_CLUSTER
                 else f"the cluster {job.cluster}")
        return (f"{len(placed.tasks)} task(s) as one Slurm job on {where}: {job.nodes} "
                f"node(s) × {job.tasks_per_node} task(s) per node. See {JOB_FILE} for what is "
                "submitted.")

    def tf_config_text(self, placed: Plan, job: object, rank: int) -> str:
        """What a task's TF_CONFIG will be on the nodes (dtgui_worker.slurm_task forms it)."""
        assert isinstance(job, SlurmJob)
        return ("# Formed on the node when the job starts (dtgui_worker.slurm_task): the "
                "nodes'\n# addresses from Slurm's allocation, and a port per rank from a base "
                "drawn from\n# the job id, so tasks sharing a node never share a port.\n"
                + json.dumps(tf_config_on_nodes(placed, job, rank), indent=2) + "\n")

    def job_file(self, placed: Plan, job: object, problems: Sequence[str]) -> tuple[str, str]:
        """The batch script (exactly what the bundle holds), or why it cannot be written."""
        assert isinstance(job, SlurmJob)
        if problems:
            return JOB_FILE, "# Not written until these are fixed:\n" + "\n".join(
                f"#   {p}" for p in problems) + "\n"
        return JOB_FILE, batch_script(placed, job)

    def launch_tip(self) -> str:
        if not self.cluster:
            return ""
        queue = ("this machine's Slurm queue (it is the login node)"
                 if self.cluster == LOCAL_CLUSTER else f"the queue of the Slurm cluster "
                 f"{self.cluster}")
        return f"Submit the run as one batch job to {queue} and watch the training."

    def save(self, job: object) -> None:
        if isinstance(job, SlurmJob):
            save_last_job(job)

    # -- internals -------------------------------------------------------------------------
    def _on_change(self) -> None:
        self.changed.emit()

    def show_layout(self, placed: Plan) -> None:
        """Which task each node runs (block distribution: ranks 0..T-1 on the first node)."""
        per_node = self.tasks_spin.value()
        ids = [t.task_id for t in placed.tasks]
        nodes = []
        for node in range(self.nodes_spin.value()):
            ranks = ids[node * per_node:(node + 1) * per_node]
            if ranks:
                nodes.append(f"node {node + 1}: {', '.join(ranks)}")
            if len(nodes) == 4 and self.nodes_spin.value() > 5:
                nodes.append(f"… {self.nodes_spin.value() - 4} more")
                break
        where = ("this machine is the login node" if self.cluster == LOCAL_CLUSTER
                 else f"submitted on {self.cluster}'s login node")
        self.layout_label.setText(
            f"One batch job, {where}; TF_CONFIG is formed on the nodes from Slurm's "
            f"allocation. " + ("; ".join(nodes) if nodes else ""))


def local_login_node() -> bool:
    """Whether Slurm's client is installed here (this machine may be a login node)."""
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def local_partitions() -> list[Partition]:
    """What `sinfo` says here of the partitions (none when it cannot say)."""
    from dtgui.remote.commands import LocalRunner
    from dtgui.remote.slurm import ask_slurm

    facts = ask_slurm(LocalRunner())
    return facts.partitions if facts.version else []


def last_job_file() -> Path:
    return config_dir() / "last-slurm-job.json"


def load_last_job() -> SlurmJob | None:
    """The last Slurm job sent from the wizard (None when there is none or it cannot be read:
    the fields then start from the cluster's defaults)."""
    data, _message = read_json_or_backup(last_job_file())
    try:
        return SlurmJob.from_dict(data) if data is not None else None
    except (SlurmError, TypeError, ValueError):
        return None


def save_last_job(job: SlurmJob) -> None:
    atomic_write_text(last_job_file(), job.to_json())
