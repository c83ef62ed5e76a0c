"""README.md of a bundle whose tasks run on several machines.

It tells a person how to reproduce the run by hand with plain ssh/scp and python: which
machine runs which task, the exact environment (TF_CONFIG, CUDA_VISIBLE_DEVICES) and command
of every task, and how to stop the servers. Machine names and logins are data, always quoted.
Each task's environment and command are given by the bundle (dtgui.core.bundles.bundle), which writes
the same into the task's script.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from dtgui.core.plans.plan import Plan, TaskSpec, is_local_machine
from dtgui.worker.layout import LOGS_DIR, events_file, pid_file

# A task's environment and its command line.
TaskScript = tuple[Mapping[str, str], str]


def _login(plan: Plan, machine: str) -> tuple[str, str]:
    """(user@host, port) of a machine, from its login ("user@host:port")."""
    login = plan.machine(machine).login
    user_host, sep, port = login.rpartition(":")
    if not sep:
        return login, "22"
    return user_host, port or "22"


def _task_block(task: TaskSpec, script: TaskScript) -> str:
    env, command = script
    body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return (f"### {task.task_id} on {task.machine_name}\n\n```sh\n{body}"
            f"{command}\n```\n")


def multi_machine_readme(plan: Plan, scripts: Mapping[str, TaskScript]) -> str:
    """The README of `plan`; `scripts`: each task's environment and command by task id."""
    target = f"dtgui-{plan.run_name}"
    rows, starts, copies = [], [], []
    for name in plan.machine_names:
        mine = [t for t in plan.tasks if t.machine_name == name]
        facts = plan.machine(name)
        python = facts.python or "python3"
        address = facts.address or (mine[0].host if mine else "")
        rows.append(f"| {name} | {address} | {', '.join(t.task_id for t in mine)} | "
                    f"`{python}` |")
        user_host, port = _login(plan, name)
        run = f"cd {shlex.quote(target)} && PYTHON={shlex.quote(python)} bash run.sh " \
              f"{shlex.quote(name)}"
        if not user_host and not is_local_machine(name) and address:
            user_host = address
        if user_host:
            jump = f"-J {shlex.quote(facts.jump)} " if facts.jump else ""
            p_scp = f"-P {shlex.quote(port)} " if port != "22" else ""
            p_ssh = f"-p {shlex.quote(port)} " if port != "22" else ""
            copies.append(f"scp {jump}-r {p_scp}. {shlex.quote(user_host + ':' + target)}")
            starts.append(f"ssh {jump}{p_ssh}{shlex.quote(user_host)} {shlex.quote(run)} &")
        else:
            copies.append(f"# {name} (this machine): use this directory, or copy it to "
                          f"~/{target}")
            starts.append(f"( {run} ) &   # on {name}")
    tasks = "\n".join(_task_block(t, scripts[t.task_id]) for t in plan.tasks)
    return f"""# dtgui run bundle: {plan.run_name} ({len(plan.machine_names)} machines)

Strategy: {plan.strategy.title} — {plan.total_replicas} replica(s), global batch {plan.global_batch},
{plan.steps} steps, precision {plan.precision}, XLA {"on" if plan.xla else "off"}, seed {plan.seed}.

This directory reproduces the run without dtgui, with plain ssh and python. The tasks find
each other through the addresses and ports in their TF_CONFIG (below): every machine must be
able to reach the others at those addresses, and the ports must be free.

| machine | address | tasks | python |
|---|---|---|---|
{chr(10).join(rows)}

## 1. Copy this directory to every machine

Run from this directory (every machine needs the whole directory; the same TensorFlow version
everywhere: `python3 -m pip install -r requirements.txt`):

```sh
{chr(10).join(copies)}
```

## 2. Start every machine's tasks

In any order: the tasks wait for each other. `bash run.sh MACHINE` starts the tasks placed
on MACHINE, waits for its training tasks and then stops its servers:

```sh
{chr(10).join(starts)}
wait
```

Parameter servers and ParameterServer workers are servers that never exit by themselves:
when the chief has finished, stop them with Ctrl-C in their `run.sh`, or on their machine with
`kill -TERM -- -$(cat {pid_file("<task>")})`.

Each machine writes the events of its own tasks to `{events_file("<task>")}` (JSON lines;
a `steps` event reports the steps of one training call: every step's loss per replica, in the
compact form `dtgui_worker/step_batch.py` reads, and `replica_ids`, their global ids), logs to
`{LOGS_DIR}/`. Checkpoints go to the chief's `output/checkpoints/`; to resume
a MultiWorkerMirrored run every worker must see them: copy the chief's `output/checkpoints/`
to the other machines first (delete `output/` everywhere to start over).

## Tasks

Each task is `tasks/<task>.sh`; run from the bundle directory it does the following.

{tasks}"""
