"""Placing a plan's tasks on this machine, choosing ports, and writing each task's TF_CONFIG."""

from __future__ import annotations

import errno
import json
import socket
from contextlib import ExitStack

from dtgui.core.plan import Plan, TaskSpec

LOCAL_HOST = "127.0.0.1"


class PortInUseError(RuntimeError):
    """A port a task needs is taken by another process."""


def free_ports(count: int, host: str = LOCAL_HOST) -> list[int]:
    """`count` distinct ports that are free on `host` right now (bound together, then released)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def port_is_free(port: int, host: str = LOCAL_HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def task_layout(plan: Plan) -> list[tuple[str, int]]:
    """(type, index) of every task the strategy needs, coordinator first."""
    if plan.strategy == "multi_worker_mirrored":
        return [("worker", i) for i in range(plan.workers)]
    if plan.strategy == "parameter_server":
        return (
            [("chief", 0)]
            + [("worker", i) for i in range(plan.workers)]
            + [("ps", i) for i in range(plan.parameter_servers)]
        )
    return [("worker", 0)]


def place_local(plan: Plan, ports: list[int] | None = None) -> Plan:
    """Put every task on this machine with free ports; fills `tasks` and `cluster`."""
    layout = task_layout(plan)
    multi = len(layout) > 1 or plan.strategy == "multi_worker_mirrored"
    if not multi:
        return plan.with_changes(tasks=(TaskSpec("worker", 0, LOCAL_HOST, 0),), cluster={})
    ports = ports if ports is not None else free_ports(len(layout))
    if len(ports) < len(layout):
        raise ValueError(f"need {len(layout)} ports, got {len(ports)}")
    tasks = tuple(
        TaskSpec(kind, index, LOCAL_HOST, port)
        for (kind, index), port in zip(layout, ports, strict=False)
    )
    return plan.with_changes(tasks=tasks, cluster=cluster_spec(tasks))


def cluster_spec(tasks: tuple[TaskSpec, ...]) -> dict[str, list[str]]:
    cluster: dict[str, list[str]] = {}
    for task in sorted(tasks, key=lambda t: (t.type, t.index)):
        cluster.setdefault(task.type, []).append(task.address)
    return cluster


def tf_config(plan: Plan, task: TaskSpec) -> dict | None:
    """TF_CONFIG for one task, or None for a single-process strategy."""
    if not plan.cluster:
        return None
    return {"cluster": plan.cluster, "task": {"type": task.type, "index": task.index}}


def tf_config_json(plan: Plan, task: TaskSpec) -> str:
    config = tf_config(plan, task)
    return json.dumps(config, separators=(",", ":")) if config else ""


def busy_ports(plan: Plan) -> list[str]:
    """Sentences naming every task port on this machine that another process holds."""
    problems = []
    for task in plan.tasks:
        if task.port and task.host == LOCAL_HOST and not port_is_free(task.port, task.host):
            problems.append(
                f"Port {task.port} for task {task.task_id} is in use by another process: "
                "press Re-plan ports in the review page (or stop that process)."
            )
    return problems
