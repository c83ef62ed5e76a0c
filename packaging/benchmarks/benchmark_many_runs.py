"""What the app costs while it follows many runs at once (a script, not a test).

    xvfb-run -a .venv/bin/python packaging/benchmarks/benchmark_many_runs.py [--runs 1 8] [--seconds 20]

For each count of runs: the main window (1366x768, offscreen without a display) launches that
many runs on this machine, each training with the tests' stub child (tests/stub_task.py: the
bundle's real supervisor and events, no TensorFlow; a 5-step call every 0.25 s), and follows
them all. Once every run trains, it measures over --seconds, twice: with the dashboard showing
one run, then with the Runs page's rows of all of them live. Printed: the app's CPU share (this
process's CPU time, every thread: the runs' monitors, the UI, the render thread, over the wall
time; 100 % = one core), its resident memory (VmRSS) and how much it grew during the measure;
the runs' own processes are not counted. Then every run is stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # runs.stub_python
_tmp = Path(tempfile.mkdtemp(prefix="dtgui-many-runs-"))
os.environ["DTGUI_CONFIG_DIR"] = str(_tmp / "config")
os.environ["DTGUI_DATA_DIR"] = str(_tmp / "data")

STEP_SECONDS = 0.05


def rss_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def ui_thread_cpu() -> float:
    """CPU seconds of this process's main thread (the UI thread)."""
    fields = Path(f"/proc/self/task/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(app: object, condition: object, timeout: float) -> None:
    from PySide6.QtWidgets import QApplication

    assert isinstance(app, QApplication) and callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("waited too long")
        app.processEvents()
        time.sleep(0.01)


def run_for(app: object, seconds: float) -> tuple[float, float, float, float]:
    """(CPU share, the UI thread's share, RSS at the end, RSS growth) over `seconds` of the
    event loop."""
    from PySide6.QtWidgets import QApplication

    assert isinstance(app, QApplication)
    before, wall, cpu, ui = rss_mib(), time.perf_counter(), time.process_time(), ui_thread_cpu()
    end = wall + seconds
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.005)
    spent = time.perf_counter() - wall
    share, ui_share = (time.process_time() - cpu) / spent, (ui_thread_cpu() - ui) / spent
    after = rss_mib()
    return share, ui_share, after, after - before


def measure(count: int, seconds: float) -> None:
    from runs import stub_python

    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.plan import MachineAccess, Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    app = make_app([])
    window = MainWindow()
    window.resize(1366, 768)
    window.show()
    python = stub_python(step_seconds=STEP_SECONDS)
    for i in range(count):
        plan = place_local(Plan(run_name=f"run-{count}-{i}", strategy=Strategy.ONE_DEVICE,
                                replicas_per_task=1, steps=10_000_000, checkpoint_every=0))
        window.launch(plan.with_changes(machines={"local": MachineAccess(python=python)}))
    wait(app, lambda: len(window.runs.live()) == count and all(
        s.source is not None and s.source.state == "running" for s in window.runs.live()),
        120)
    run_for(app, 3.0)  # the runs' first steps drawn
    share, ui, rss, grew = run_for(app, seconds)
    print(f"{count} run(s), dashboard shown: CPU {share:.1%} of a core (UI thread {ui:.1%}), "
          f"RSS {rss:.0f} MiB "
          f"(+{grew:.1f} MiB in {seconds:g} s)", flush=True)
    window.show_runs()
    run_for(app, 2.0)
    share, ui, rss, grew = run_for(app, seconds)
    print(f"{count} run(s), Runs page live: CPU {share:.1%} of a core (UI thread {ui:.1%}), "
          f"RSS {rss:.0f} MiB "
          f"(+{grew:.1f} MiB in {seconds:g} s)", flush=True)
    for session in window.runs.live():
        session.request_stop()
    wait(app, lambda: not window.runs.live(), 120)
    window.close()
    window.deleteLater()
    app.processEvents()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    print(f"RSS with nothing shown yet: {rss_mib():.0f} MiB", flush=True)
    for count in args.runs:
        measure(count, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
