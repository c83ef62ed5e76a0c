"""Launch time on 4 machines divided by launch time on 1 machine (a script, not a test).

    sudo .venv/bin/python packaging/benchmarks/benchmark_launch.py [--repeat 3]

Starts real SSH test hosts (tests/sshhosts.py: sshd in network namespaces, as root), then
launches MultiWorkerMirrored runs through `launch_plan` and measures, per launch, the
wall time from Start (the call) to every task stepping (each task's first `step` event seen by
the controller). The Python/TensorFlow check is warmed once first (later launches skip the
TensorFlow import, as in the app).

Configurations (median of --repeat launches each):
  1 host  x 1 worker      the baseline
  4 hosts x 1 worker each the target: ratio 4-hosts / 1-host <= 1.3
  1 host  x 4 workers     the same TensorFlow work as "4 hosts" on one machine

The test hosts share this machine's CPUs (2 cores here): 4 workers importing TensorFlow at once
take longer than 1 whatever the launcher does, while on real machines each imports on its own
CPUs. So the launcher's own part (connect, check, ports, copy, start: "launcher") is reported
separately, and "4 hosts / (1 host x 4 workers)" isolates what spreading over machines costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SCRATCH = tempfile.mkdtemp(prefix="dtgui-bench-")
for var in ("DTGUI_CONFIG_DIR", "DTGUI_DATA_DIR", "HOME"):
    os.environ[var] = os.path.join(SCRATCH, var.lower())
    os.makedirs(os.environ[var])
os.environ.pop("SSH_AUTH_SOCK", None)

import remote_python  # noqa: E402
import sshhosts  # noqa: E402
from conftest_ssh import machine, trust  # noqa: E402

from dtgui.core.plans.placement import assign  # noqa: E402
from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.launch.start.pipeline import STEPS, launch_plan  # noqa: E402
from dtgui.launch.targets import Target  # noqa: E402

LAUNCH_STEPS = tuple(step.name for step in STEPS)


def one_launch(lab: sshhosts.SshLab, python: str, hosts: list[str], workers: int,
               n: int) -> tuple[float, float]:
    """(seconds from Start to every task stepping, seconds of the launcher's own steps)."""
    plan = Plan(run_name=f"bench-{len(hosts)}h{workers}w-{n}", strategy="multi_worker_mirrored",
                workers=workers, replicas_per_task=1, steps=1_000_000, checkpoint_every=0)
    placement = [hosts[i % len(hosts)] for i in range(workers)]
    by_name = {h.name: h for h in lab.hosts}
    targets = [Target(h, machine(lab, by_name[h]), python=python) for h in hosts]
    start = time.monotonic()
    controller = launch_plan(plan, targets=targets, assignments=assign(plan, machines=placement))
    try:
        launcher = sum(controller.launch_timings.get(s, 0.0) for s in LAUNCH_STEPS)
        tasks = [t.task_id for t in controller.bundle.plan.tasks]
        deadline = start + 300
        while True:
            snap = controller.metrics.snapshot()
            if all(snap.tasks.get(t) is not None and snap.tasks[t].step >= 1 for t in tasks):
                return time.monotonic() - start, launcher
            if controller.finished or time.monotonic() > deadline:
                raise RuntimeError(f"the run did not step: {controller.state} {controller.message}")
            time.sleep(0.02)
    finally:
        controller.request_stop()
        controller.wait(60)
        controller.detach()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    reason = sshhosts.unavailable_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    lab = sshhosts.SshLab(4).start()
    try:
        python = remote_python.python_for()
        trust(*lab.hosts)
        names = [h.name for h in lab.hosts]
        print(f"{len(names)} SSH hosts ({lab.mode}), {os.cpu_count()} CPU cores; warming up")
        one_launch(lab, python, names, len(names), 0)  # the TF import check, once per host
        configs = {"1 host x 1 worker": (names[:1], 1), "4 hosts x 1 worker": (names, 4),
                   "1 host x 4 workers": (names[:1], 4)}
        results: dict[str, tuple[float, float]] = {}
        for label, (hosts, workers) in configs.items():
            runs = [one_launch(lab, python, hosts, workers, n + 1) for n in range(args.repeat)]
            results[label] = (statistics.median(r[0] for r in runs),
                              statistics.median(r[1] for r in runs))
            print(f"{label:20s} Start -> every task stepping {results[label][0]:6.2f} s "
                  f"(launcher {results[label][1]:.2f} s); runs: "
                  + ", ".join(f"{r[0]:.2f}" for r in runs), flush=True)
        one = results["1 host x 1 worker"]
        four = results["4 hosts x 1 worker"]
        same = results["1 host x 4 workers"]
        print(f"ratio 4 hosts / 1 host (Start -> stepping): {four[0] / one[0]:.2f}  "
              "(target <= 1.3; CPU-bound here: the hosts share this machine's cores)")
        print(f"ratio 4 hosts / 1 host (launcher only):     {four[1] / one[1]:.2f}")
        print(f"ratio 4 hosts / (1 host x 4 workers):       {four[0] / same[0]:.2f}  "
              "(same TensorFlow work: the cost of spreading over machines)")
    finally:
        shutil.rmtree(lab.home / ".cache" / "dtgui", ignore_errors=True)
        lab.stop()
        remote_python.cleanup()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
