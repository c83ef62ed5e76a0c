"""Placing a plan's tasks on this machine, choosing ports, and writing each task's TF_CONFIG."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from dtgui.core.machines.registry import Machine, ssh_login
from dtgui.core.plans.plan import (
    LOCAL_HOST,
    LOCAL_MACHINE,
    MachineAccess,
    Plan,
    TaskSpec,
    is_local_machine,
)

# the one port check, as on other machines: ports bound as TensorFlow binds them
from dtgui.worker.machine_probe import choose_free_ports, port_is_free

# the one TF_CONFIG builder, shared with the Slurm task on the nodes and the review page
from dtgui.worker.tf_config import task_tf_config, tf_cluster


class PlacementError(ValueError):
    """Tasks cannot be placed on the chosen machines; the message says what to change."""


def task_layout(plan: Plan) -> list[tuple[str, int]]:
    """(type, index) of every task the strategy needs, coordinator first."""
    counts = {"chief": 1, "worker": plan.compute_tasks, "ps": plan.parameter_servers}
    return [(kind, i) for kind in plan.strategy.task_types for i in range(counts[kind])]


def place_local(plan: Plan, ports: list[int] | None = None) -> Plan:
    """Put every task on this machine with free ports; fills `tasks` and `cluster`."""
    layout = task_layout(plan)
    multi = plan.strategy.multi_process
    if not multi:
        return plan.with_changes(tasks=(TaskSpec("worker", 0, LOCAL_HOST, 0),), cluster={})
    ports = ports if ports is not None else choose_free_ports(len(layout))
    if len(ports) < len(layout):
        raise ValueError(f"need {len(layout)} ports, got {len(ports)}")
    tasks = tuple(
        TaskSpec(kind, index, LOCAL_HOST, port)
        for (kind, index), port in zip(layout, ports, strict=False)
    )
    return plan.with_changes(tasks=tasks, cluster=cluster_spec(tasks))


def cluster_spec(tasks: tuple[TaskSpec, ...]) -> dict[str, list[str]]:
    return tf_cluster((t.type, t.index, t.address) for t in tasks)


def placed_tf_config(plan: Plan, task: TaskSpec) -> dict[str, Any] | None:
    """TF_CONFIG for one task, or None for a single-process strategy."""
    if not plan.cluster:
        return None
    return task_tf_config(plan.cluster, task.type, task.index)


def placed_tf_config_json(plan: Plan, task: TaskSpec) -> str:
    config = placed_tf_config(plan, task)
    return json.dumps(config, separators=(",", ":")) if config else ""


def port_in_use(port: int, task_id: str, machine: str = "") -> str:
    """The one sentence for a task's port that another process holds (the wizard, the
    launch and the command line alike: each adds its own way to choose other ports)."""
    where = f" on {machine}" if machine else ""
    return (f"Port {port}{where} (task {task_id}) is in use by another process: choose other "
            "ports (or stop that process).")


def local_port_conflicts(plan: Plan) -> list[str]:
    """Sentences naming every task port on this machine that another process holds."""
    return [port_in_use(t.port, t.task_id) for t in plan.tasks
            if t.port and t.is_local and not port_is_free(t.port)]


# -- tasks on several machines -----------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def machine_key(name: str) -> str:
    """The name placement uses for a machine ("local" for this machine)."""
    return LOCAL_MACHINE if is_local_machine(name) else name


def assign(plan: Plan, *, machines: Sequence[str] = (), chief: str = "",
           workers: Sequence[str] = (), ps: Sequence[str] = ()) -> dict[str, str]:
    """Task id -> machine for the plan's layout.

    multi_worker_mirrored: `machines` (or `workers`) lists one machine per worker, in worker
    order (a machine may appear more than once). parameter_server: `chief`, `workers`, `ps`.
    Single-task strategies: the first of `machines` (default this machine).
    """
    layout = task_layout(plan)
    if plan.strategy.has_coordinator:
        if len(workers) != plan.workers or len(ps) != plan.parameter_servers:
            raise PlacementError(
                f"Choose a machine for each of the {plan.workers} worker(s) and "
                f"{plan.parameter_servers} parameter server(s)."
            )
        wanted = [chief or LOCAL_MACHINE, *workers, *ps]
    elif plan.strategy.multi_process:
        wanted = list(machines or workers)
        if len(wanted) != plan.workers:
            raise PlacementError(f"Choose one machine for each of the {plan.workers} worker(s).")
    else:
        wanted = [machines[0] if machines else LOCAL_MACHINE]
    return {f"{kind}:{index}": machine_key(m) for (kind, index), m in zip(layout, wanted, strict=True)}


def place_on_machines(plan: Plan, assignments: Mapping[str, str],
                      addresses: Mapping[str, str], ports: Mapping[str, Sequence[int]],
                      gpus: Mapping[str, Sequence[int]] | None = None,
                      logins: Mapping[str, Mapping[str, str]] | None = None) -> Plan:
    """Put each task on its machine: fills `tasks` (machine, address, port, GPUs), `cluster`
    and `machines`.

    `assignments`: task id -> machine ("local" = this machine). `addresses`: machine -> the
    address every other machine reaches it at (used in TF_CONFIG when more than one machine
    takes part; one machine alone uses 127.0.0.1). `ports`: machine -> ports free there,
    used in task order. `gpus`: machine -> the GPUs chosen there; each compute task takes
    `replicas_per_task` of them (CUDA_VISIBLE_DEVICES). `logins`: machine -> extra facts for
    the bundle's README (`login`, `python`).
    """
    layout = task_layout(plan)
    ids = [f"{kind}:{index}" for kind, index in layout]
    wanted = {k: machine_key(v) for k, v in assignments.items()}
    missing = [t for t in ids if t not in wanted]
    extra = [t for t in wanted if t not in ids]
    if missing or extra:
        raise PlacementError(
            "Every task needs exactly one machine: "
            + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}")
        )
    used = list(dict.fromkeys(wanted[t] for t in ids))
    multi_machine = len(used) > 1
    multi_task = plan.strategy.multi_process
    hosts = {m: _machine_address(m, addresses, multi_machine) for m in used}
    free = {m: list(ports.get(m, ())) for m in used}
    gpu_pool = {m: list((gpus or {}).get(m, ())) for m in used}
    tasks = []
    for (kind, index), tid in zip(layout, ids, strict=True):
        machine = wanted[tid]
        port = 0
        if multi_task:
            if not free[machine]:
                raise PlacementError(f"No free port left on {machine} for task {tid}.")
            port = int(free[machine].pop(0))
        chosen: tuple[int, ...] = ()
        if gpu_pool[machine] and plan.strategy.holds_replicas(kind) and plan.on_gpu:
            need = plan.strategy.gpus_per_task(plan.replicas_per_task)
            if len(gpu_pool[machine]) < need:
                raise PlacementError(
                    f"{machine} has too few chosen GPUs for task {tid} (needs {need}).")
            chosen, gpu_pool[machine] = tuple(gpu_pool[machine][:need]), gpu_pool[machine][need:]
        host = hosts[machine] if multi_task else LOCAL_HOST
        tasks.append(TaskSpec(kind, index, host, port, chosen,
                              "" if machine == LOCAL_MACHINE else machine))
    seen: dict[tuple[str, int], str] = {}
    for task in tasks:
        key = (task.machine_name, task.port)
        if task.port and key in seen:
            raise PlacementError(
                f"Tasks {seen[key]} and {task.task_id} would share port {task.port} on "
                f"{task.machine_name}.")
        seen[key] = task.task_id
    placed = tuple(tasks)
    machines_info: dict[str, MachineAccess] = {}
    if multi_machine or any(not t.is_local for t in placed):
        for m in used:
            login = (logins or {}).get(m, {})
            machines_info[m] = MachineAccess(address=hosts[m], login=login.get("login", ""),
                                             python=login.get("python", ""),
                                             jump=login.get("jump", ""))
    return plan.with_changes(tasks=placed, cluster=cluster_spec(placed) if multi_task else {},
                             machines=machines_info)


def _machine_address(machine: str, addresses: Mapping[str, str], multi_machine: bool) -> str:
    if not multi_machine:
        return LOCAL_HOST
    address = (addresses.get(machine) or "").strip()
    if not address:
        raise PlacementError(f"No network address is known for {machine}: give one that the "
                             "other machines can reach.")
    if is_loopback(address):
        raise PlacementError(
            f"{machine}'s address {address} is a loopback address: the other machines cannot "
            "reach it. Give its network address (the one they reach it at).")
    return address


def local_address_towards(host: str) -> str:
    """The address of this machine's interface that routes to `host` (no packet is sent): the
    address `host` reaches this machine at, for TF_CONFIG."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return socket.gethostname()


def reachable_addresses(used: Sequence[str], machines: Mapping[str, Machine],
                        given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where the other machines reach each machine a plan uses: the address given (chosen by
    the person, or this machine's end of its SSH connections), else a registered machine's
    host, and for this machine (when others take part) its address towards the first other."""
    given = given or {}
    out: dict[str, str] = {}
    for name in used:
        if given.get(name):
            out[name] = given[name]
        elif name in machines:
            out[name] = machines[name].host
    if len(used) > 1 and LOCAL_MACHINE in used and LOCAL_MACHINE not in out:
        towards = next((a for n, a in out.items() if n != LOCAL_MACHINE), "8.8.8.8")
        out[LOCAL_MACHINE] = local_address_towards(towards)
    return out


def place_plan(plan: Plan, assignments: Mapping[str, str], machines: Mapping[str, Machine],
               ports: Mapping[str, Sequence[int]], *,
               pythons: Mapping[str, str] | None = None,
               gpus: Mapping[str, Sequence[int]] | None = None,
               known: Sequence[Machine] = (),
               addresses: Mapping[str, str] | None = None) -> Plan:
    """Place a plan on this machine and registered ones (the wizard, the launcher and
    `dtgui export` all place tasks through here).

    `machines`: the registered machines by name (this machine is "local"); `pythons`: the
    interpreter chosen on each machine (a registered machine's default: its registered one);
    `known`: every registered machine (jump hosts are named among them); `addresses`: given
    addresses (see `reachable_addresses`). Raises PlacementError."""
    used = list(dict.fromkeys(machine_key(m) for m in assignments.values()))
    pythons = pythons or {}
    logins: dict[str, dict[str, str]] = {}
    for name in used:
        machine = machines.get(name)
        info: dict[str, str] = {}
        if pythons.get(name):
            info["python"] = pythons[name]
        elif machine is not None:
            info["python"] = machine.interpreter
        if machine is not None:
            info.update(ssh_login(machine, known or list(machines.values())))
        logins[name] = info
    return place_on_machines(plan, assignments, reachable_addresses(used, machines, addresses),
                             ports, gpus=gpus, logins=logins)

