"""Where a run's files are in a bundle directory, and the wrapper every task runs in.

The one definition of the bundle's output layout: the executors, the shell scripts they send
to other machines, the Slurm task and every reader build their paths from these. Stdlib
only, no TensorFlow (copied into bundles as `dtgui_worker.layout`; dtgui.core imports it).

    output/events-<task>.jsonl   the task's events (JSON lines)
    output/logs/<task>.log       its stdout and stderr
    output/pids/<task>.pid       its process group (written by the wrapper)
    output/pids/<task>.exit      its exit code (written by the wrapper when it ended)
    output/checkpoints/          the chief's checkpoints (a resume reads them)
    output/logs/slurm-<job>.log  a Slurm job's batch step

Paths are relative to the bundle directory, "/"-separated (they are used on other machines
and in shell scripts alike). <task> is a task's file stem ("worker-0").
"""

from __future__ import annotations

OUTPUT_DIR = "output"
LOGS_DIR = f"{OUTPUT_DIR}/logs"
PIDS_DIR = f"{OUTPUT_DIR}/pids"
TASK_DIRS = (LOGS_DIR, PIDS_DIR)  # made before a task starts: its log and pid go there
EVENTS_GLOB = "events-*.jsonl"  # every task's events file, in OUTPUT_DIR
CHECKPOINTS_NAME = "checkpoints"  # the chief's checkpoints, in OUTPUT_DIR
TENSORBOARD_NAME = "tensorboard"  # a TensorBoard run a task (its scalars, its profiles), in OUTPUT_DIR
TASKS_DIR = "tasks"
BUNDLE_ARCHIVE = ".bundle.tar.gz"  # the bundle as copied to another machine, before unpacking


def task_dir_names() -> list[str]:
    """TASK_DIRS' names inside OUTPUT_DIR ("logs", "pids")."""
    return [d.removeprefix(f"{OUTPUT_DIR}/") for d in TASK_DIRS]


def tensorboard_dir(out_dir: str, task: str) -> str:
    """A task's TensorBoard folder in its output directory (its scalars; its traces under
    plugins/profile there): one TensorBoard run a task."""
    return f"{out_dir}/{TENSORBOARD_NAME}/{task.replace(':', '-')}"


def events_name(stem: str) -> str:
    """The events file's name inside OUTPUT_DIR (a task given its output directory)."""
    return f"events-{stem}.jsonl"


def events_file(stem: str) -> str:
    return f"{OUTPUT_DIR}/{events_name(stem)}"


def log_file(stem: str) -> str:
    return f"{LOGS_DIR}/{stem}.log"


def pid_file(stem: str) -> str:
    return f"{PIDS_DIR}/{stem}.pid"


def exit_file(stem: str) -> str:
    return f"{PIDS_DIR}/{stem}.exit"


def job_log_file(job_id: str) -> str:
    """A Slurm job's batch step log (`job_id` "%j" is sbatch's pattern for it)."""
    return f"{LOGS_DIR}/slurm-{job_id}.log"


def task_script(stem: str) -> str:
    return f"{TASKS_DIR}/{stem}.sh"


# The task wrapper, run from the bundle directory as `sh -c WRAPPER dtgui-task STEM [MODE]`
# with its output going to the task's log: it writes its pid (= the task's process group when
# started in a session of its own) to the pid file, runs the task's script and writes its
# exit code to the exit file. The traps only let the wrapper outlive a signal sent to the
# whole group long enough to record the code (the script gets default signal actions). MODE
# "signalled": a task stopped by a signal records 128 + N whatever its script returned (a
# batch scheduler's time limit, its warning before it (USR1) or cancel; the job's state says
# why). USR2 (a profile asked, profile_request.py) is ignored, and so by default in the
# processes the wrapper starts: only the training process takes it. A task stopped by that warning records 138 but leaves with 0: srun's
# --kill-on-bad-exit would otherwise kill the tasks still saving their checkpoint.
WRAPPER = (
    "s=; trap '' USR2; trap 's=129' HUP; trap 's=130' INT; trap 's=143' TERM; trap 's=138' USR1; "
    f'echo "$$" > "{pid_file("$1")}"; sh "{task_script("$1")}"; c=$?; '
    '[ "${2:-}" = signalled ] && [ -n "$s" ] && c=$s; '
    f'echo "$c" > "{exit_file("$1")}"; '
    '[ "${2:-}" = signalled ] && [ "$c" = 138 ] && exit 0; exit "$c"'
)
WRAPPER_NAME = "dtgui-task"  # the wrapper's $0 (what ps shows)
SIGNALLED = "signalled"


def wrapper_argv(stem: str, *, signalled: bool = False) -> list[str]:
    """The command that runs task `stem` in the wrapper (from the bundle directory)."""
    return ["sh", "-c", WRAPPER, WRAPPER_NAME, stem, *([SIGNALLED] if signalled else [])]
