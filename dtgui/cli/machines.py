"""`dtgui export` machine options: place a run's tasks on registered machines.

The same placement the wizard's "Where each process runs" makes, from the command line:

    --workers-on h2,h2,h3    one machine per worker, in worker order (sets --workers)
    --chief-on h1            the ParameterServer coordinator (chief:0)
    --ps-on h4               one machine per parameter server (sets --ps)
    --on worker:1=h3         one task (repeatable; TYPE:INDEX or TYPE-INDEX as in tasks/)
    --python h2=/opt/venv/bin/python   --address local=10.0.0.1   --base-port 23456

A machine is a name registered in the Machines panel (`dtgui.core.machines.registry.MachineRegistry`)
or `local` (this machine); a task given no machine runs here. Nothing is contacted: ports
are chosen consecutively from the base port on each machine and cannot be checked, and
this machine's address is the one facing the other machines (as the wizard finds it)
unless given. Every problem is collected and raised together as `ExportOptionError`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from dtgui.core.machines.registry import Machine, MachineRegistry, host_problem
from dtgui.core.plans.placement import (
    PlacementError,
    assign,
    is_loopback,
    place_plan,
    reachable_addresses,
    task_layout,
)
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.plans.strategies import Strategy

DEFAULT_BASE_PORT = 23456
LOWEST_PORT = 1024  # below it a task needs root to listen
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
_TASK = re.compile(r"(chief|worker|ps)(?:[:-](\d+))?")


class ExportOptionError(ValueError):
    """Machine options that cannot be used; `problems` holds one sentence per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(" ".join(problems))
        self.problems = list(problems)


def add_machine_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "machines (tasks on several machines)",
        "Place tasks on machines registered in the GUI's Machines panel, or on 'local' (this "
        "machine; any task given no machine runs here). Nothing is contacted at export time: "
        "ports are NOT checked, and the bundle's README says how to start each machine's "
        "tasks over ssh. Example: --strategy multi_worker_mirrored --workers-on h2,h2,h3 "
        "--address local=10.0.0.1",
    )
    group.add_argument("--on", action="append", default=[], metavar="TASK=MACHINE",
                       help="put one task on a machine, e.g. --on worker:1=h3 (repeatable; "
                       "tasks: chief:0, worker:N, ps:N)")
    group.add_argument("--workers-on", default="", metavar="M1,M2,...",
                       help="one machine per worker, in order; a machine may repeat "
                       "(also sets --workers)")
    group.add_argument("--chief-on", default="", metavar="MACHINE",
                       help="the coordinator (chief:0) of parameter_server")
    group.add_argument("--ps-on", default="", metavar="M1,M2,...",
                       help="one machine per parameter server (also sets --ps)")
    group.add_argument("--python", action="append", default=[], metavar="MACHINE=PATH",
                       help="the Python (with TensorFlow) to run a machine's tasks with "
                       "(repeatable; default python3)")
    group.add_argument("--gpus", action="append", default=[], metavar="MACHINE=I,J,...",
                       help="with --device gpu: the GPUs a machine's tasks may use, e.g. "
                       "--gpus h2=0,1 (each task takes its own: CUDA_VISIBLE_DEVICES; "
                       "default: every GPU)")
    group.add_argument("--address", action="append", default=[], metavar="MACHINE=ADDR",
                       help="the address the other machines reach MACHINE at (default: its "
                       "registered host; for local, this machine's address towards them)")
    group.add_argument("--base-port", type=int, default=None, metavar="N",
                       help=f"each machine's tasks listen on N, N+1, ... (default "
                       f"{DEFAULT_BASE_PORT}); not checked: they must be free on each machine")


def wants_machines(args: argparse.Namespace) -> bool:
    return bool(args.on or args.workers_on or args.chief_on or args.ps_on or args.python
                or args.address or args.gpus)


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",")] if text.strip() else []


def _count(option: str, given: int | None, on: list[str], default: int, each: str,
           problems: list[str]) -> int:
    """The count of a task type `option` (--workers, --ps) set or implied by its `-on` list."""
    if given is None:
        return len(on) or default
    if on and len(on) != given:
        problems.append(f"{option} {given} but {option}-on names {len(on)} machine(s): give one "
                        f"machine per {each} (or drop {option}).")
    return given


def resolve_counts(args: argparse.Namespace) -> list[str]:
    """Fill `args.workers` / `args.ps` (None = not given) from the shorthands; problems."""
    problems: list[str] = []
    strategy = Strategy(args.strategy)
    workers_on, ps_on = _names(args.workers_on), _names(args.ps_on)
    if strategy.multi_process:
        args.workers = _count("--workers", args.workers, workers_on, 2, "worker", problems)
    else:
        args.workers = 1 if args.workers is None else args.workers
        if len(workers_on) > 1:
            problems.append(f"--strategy {strategy} runs one task (worker:0): give --workers-on "
                            "one machine, or choose multi_worker_mirrored or parameter_server.")
    if "ps" in strategy.task_types:
        args.ps = _count("--ps", args.ps, ps_on, 1, "parameter server", problems)
    else:
        args.ps = 1 if args.ps is None else args.ps
        for option, value in (("--chief-on", args.chief_on), ("--ps-on", args.ps_on)):
            if value.strip():
                problems.append(f"{option} is only for --strategy parameter_server (it has a "
                                f"coordinator and parameter servers), not {strategy}.")
    return problems


def check_base_port(base: int, count: int) -> str:
    """Why ports base..base+count-1 cannot be used, or ""."""
    top = 65535 - max(count, 1) + 1
    if not LOWEST_PORT <= base <= top:
        return (f"--base-port {base} is out of range: give a port from {LOWEST_PORT} to {top} "
                f"({count} consecutive port(s) are needed on one machine; ports below "
                f"{LOWEST_PORT} need root).")
    return ""


def _pairs(option: str, values: Sequence[str], problems: list[str]) -> list[tuple[str, str]]:
    out = []
    for raw in values:
        key, sep, value = raw.partition("=")
        if not sep or not key.strip() or not value.strip():
            problems.append(f"{option} {raw!r} is not KEY=VALUE: write e.g. {option} "
                            + ("worker:1=h2." if option == "--on" else "h2=..."))
            continue
        out.append((key.strip(), value.strip()))
    return out


class _Resolver:
    """Machine names typed by a person -> registered names ("local" = this machine)."""

    def __init__(self, registry: MachineRegistry, problems: list[str]) -> None:
        self.registry = registry
        self.problems = problems

    def name(self, text: str, where: str) -> str | None:
        if text.casefold() in (LOCAL_MACHINE, "this"):
            return LOCAL_MACHINE
        if not _SAFE_NAME.fullmatch(text):
            self.problems.append(
                f"Machine name {text!r} ({where}) has spaces or shell characters: use a "
                "registered name of letters, digits, '.', '_' and '-' (rename the machine in "
                "the Machines panel), or local.")
            return None
        machine = self.registry.find(text)
        if machine is None:
            known = ", ".join(self.registry.names())
            self.problems.append(
                f"Unknown machine {text!r} ({where}): "
                + (f"registered machines are {known}; or use local for this machine."
                   if known else "no machine is registered: add machines in the GUI's Machines "
                   f"panel (kept in {self.registry.path}), or use local for this machine."))
            return None
        if not _SAFE_NAME.fullmatch(machine.name):
            return self.name(machine.name, where)
        return machine.name

    def machine(self, name: str) -> Machine | None:
        return None if name == LOCAL_MACHINE else self.registry.find(name)


def _task_id(text: str, ids: list[str]) -> str | None:
    m = _TASK.fullmatch(text.strip().lower())
    if not m:
        return None
    return f"{m.group(1)}:{m.group(2) or 0}" if f"{m.group(1)}:{m.group(2) or 0}" in ids else None


def _choose(args: argparse.Namespace, ids: list[str], names: _Resolver,
            problems: list[str]) -> dict[str, str]:
    """Task id -> machine from the shorthands and --on (conflicts are problems)."""
    chosen: dict[str, tuple[str, str]] = {}

    def put(tid: str, raw: str, source: str) -> None:
        machine = names.name(raw, f"in {source}") if raw else None
        if machine is None:
            return
        if tid in chosen and chosen[tid][0] != machine:
            problems.append(f"Task {tid} is placed twice: on {chosen[tid][0]} "
                            f"({chosen[tid][1]}) and on {machine} ({source}); keep one.")
            return
        chosen[tid] = (machine, source)

    workers = [t for t in ids if t.startswith("worker:")]
    for tid, raw in zip(workers, _names(args.workers_on), strict=False):
        put(tid, raw, "--workers-on")
    if args.chief_on.strip():
        put("chief:0", args.chief_on.strip(), "--chief-on")
    for tid, raw in zip([t for t in ids if t.startswith("ps:")], _names(args.ps_on),
                        strict=False):
        put(tid, raw, "--ps-on")
    for task, raw in _pairs("--on", args.on, problems):
        task_id = _task_id(task, ids)
        if task_id is None:
            problems.append(f"--on {task}={raw}: {args.strategy} with these options has no task "
                            f"{task!r}; its tasks are {', '.join(ids)}.")
            continue
        put(task_id, raw, f"--on {task}={raw}")
    return {tid: chosen[tid][0] if tid in chosen else LOCAL_MACHINE for tid in ids}


def place_from_args(plan: Plan, args: argparse.Namespace,
                    registry: MachineRegistry | None = None) -> tuple[Plan, list[str]]:
    """The plan placed on the machines the options name, and notes for stderr.

    Raises ExportOptionError with every problem found."""
    problems: list[str] = []
    notes: list[str] = []
    registry = registry or MachineRegistry()
    if registry.message:
        notes.append(registry.message)
    names = _Resolver(registry, problems)
    ids = [f"{kind}:{index}" for kind, index in task_layout(plan)]
    if any(n == "" for n in _names(args.workers_on) + _names(args.ps_on)):
        problems.append("--workers-on / --ps-on has an empty name: write names separated by "
                        "commas, e.g. --workers-on h2,h2,h3.")
    wanted = _choose(args, ids, names, problems)
    order = [wanted[t] for t in ids]
    if plan.strategy.has_coordinator:
        assignments = assign(plan, chief=order[0], workers=order[1:1 + plan.workers],
                             ps=order[1 + plan.workers:])
    else:
        assignments = assign(plan, machines=order)
    used = list(dict.fromkeys(assignments.values()))
    several = len(used) > 1

    pythons: dict[str, str] = {}
    for raw, path in _pairs("--python", args.python, problems):
        name = names.name(raw, f"in --python {raw}={path}")
        if name is None:
            continue
        if name not in used:
            problems.append(f"--python {raw}={path}: no task runs on {name} (the tasks run on "
                            f"{', '.join(used)}).")
        elif not _SAFE_PATH.fullmatch(path) or path.startswith("-"):
            problems.append(
                f"--python {raw}={path}: give the interpreter's plain path (letters, digits, "
                "'/', '.', '_', '+', '-'; no spaces, '~' or shell characters), e.g. "
                "/home/me/venv/bin/python.")
        else:
            pythons[name] = path

    gpus: dict[str, list[int]] = {}
    for raw, text in _pairs("--gpus", args.gpus, problems):
        name = names.name(raw, f"in --gpus {raw}={text}")
        if name is None:
            continue
        indices = [part.strip() for part in text.split(",")]
        if plan.device_kind != "gpu":
            problems.append(f"--gpus {raw}={text}: the plan trains on the CPU: add --device gpu "
                            "(or drop --gpus).")
        elif name not in used:
            problems.append(f"--gpus {raw}={text}: no task runs on {name} (the tasks run on "
                            f"{', '.join(used)}).")
        elif not all(i.isdigit() for i in indices) or len(set(indices)) != len(indices):
            problems.append(f"--gpus {raw}={text}: give distinct GPU numbers separated by "
                            "commas, e.g. --gpus h2=0,1 (as nvidia-smi numbers them).")
        else:
            gpus[name] = [int(i) for i in indices]

    overrides: dict[str, str] = {}
    for raw, address in _pairs("--address", args.address, problems):
        name = names.name(raw, f"in --address {raw}={address}")
        if name is None:
            continue
        problem = host_problem(address)
        if name not in used:
            problems.append(f"--address {raw}={address}: no task runs on {name} (the tasks run "
                            f"on {', '.join(used)}).")
        elif problem:
            problems.append(f"--address {raw}={address}: {problem}")
        elif several and is_loopback(address):
            problems.append(
                f"--address {raw}={address} is a loopback address: the other machines cannot "
                f"reach {name} there. Give its network address (the one they reach it at).")
        else:
            overrides[name] = address
    if overrides and not several:
        notes.append(f"--address is not used: every task runs on {used[0]}, so the tasks reach "
                     "each other at 127.0.0.1.")

    registered = {name: m for name in used if (m := names.machine(name)) is not None}
    addresses = reachable_addresses(used, registered, overrides)
    if several:
        for name, machine in registered.items():
            if name not in overrides and is_loopback(machine.host):
                problems.append(
                    f"{name} is registered with the loopback address {machine.host}: the other "
                    f"machines cannot reach it there. Give --address {name}=ADDR (its network "
                    "address).")
    if several and LOCAL_MACHINE in used and LOCAL_MACHINE not in overrides:
        found = addresses[LOCAL_MACHINE]
        towards = next((a for n, a in addresses.items() if n != LOCAL_MACHINE), "")
        if is_loopback(found) or host_problem(found):
            problems.append(
                f"This machine's address towards {towards} was found to be {found}, which the "
                "other machines cannot reach: give --address local=ADDR (this machine's "
                "network address).")
        else:
            notes.append(f"this machine (local) is reached at {found} (its address towards "
                         f"{towards}); give --address local=ADDR to choose another.")

    base = DEFAULT_BASE_PORT if args.base_port is None else args.base_port
    per_machine = {m: sum(1 for t in ids if assignments[t] == m) for m in used}
    port_problem = check_base_port(base, max(per_machine.values()))
    if port_problem:
        problems.append(port_problem)
    if problems:
        raise ExportOptionError(problems)

    ports = {m: list(range(base, base + n)) for m, n in per_machine.items()}
    try:
        placed = place_plan(plan, assignments, registered, ports, pythons=pythons, gpus=gpus,
                            known=registry.machines(), addresses=addresses)
    except PlacementError as exc:
        raise ExportOptionError([str(exc)]) from exc
    if any(t.port for t in placed.tasks):
        listed = "; ".join(
            f"{m}: {ports[m][0]}" + (f"-{ports[m][-1]}" if len(ports[m]) > 1 else "")
            for m in used)
        notes.append(f"ports {listed} were NOT checked (no machine is contacted at export "
                     "time): make sure they are free on each machine, or choose others with "
                     "--base-port.")
    return placed, notes
