"""dtgui's speed targets, measured side by side in one run (not a test: shared machines vary).

  python packaging/benchmarks/benchmark.py        (needs a display: run under xvfb-run, or it uses one)

Prints:
  * time to the first painted main window / time of `python -c "import tensorflow"`
    (target <= 0.15): the GUI must never pay for TensorFlow.
  * the dashboard frame time with 16 replicas x 100,000 points (target <= 16 ms).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3
TARGET = 0.15  # first painted window / import tensorflow


def time_import_tensorflow() -> float:
    start = time.time()
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return time.time() - start


def time_first_paint() -> float:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "DTGUI_BENCH_FIRST_PAINT": "1", "DTGUI_CONFIG_DIR": home,
               "DTGUI_DATA_DIR": home}
        start = time.time()
        proc = subprocess.run([sys.executable, "-m", "dtgui"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("FIRST_PAINT "):
            return float(line.split()[1]) - start
    raise RuntimeError(f"the app painted no window (exit {proc.returncode}): {proc.stderr[-500:]}")


def main() -> int:
    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    platform = "X11 " + os.environ["DISPLAY"] if os.environ.get("DISPLAY") else "offscreen"
    print(f"dtgui benchmark on {os.cpu_count()} cores, Qt platform: {platform}")
    tf_times, paint_times = [], []
    for _ in range(REPEATS):  # interleaved, so both see the same machine load
        tf_times.append(time_import_tensorflow())
        paint_times.append(time_first_paint())
    tf_s, paint_s = statistics.median(tf_times), statistics.median(paint_times)
    ratio = paint_s / tf_s
    print(f"import tensorflow:            {tf_s:6.2f} s (median of {REPEATS})")
    print(f"first painted dtgui window:   {paint_s:6.2f} s (median of {REPEATS})")
    print(f"ratio window/tensorflow:      {ratio:6.2f}   (target <= {TARGET:.2f}) "
          f"{'OK' if ratio <= TARGET else 'MISSED'}")

    # The dashboard frame time, in its own process (its own QApplication), same machine load.
    dash = subprocess.run([sys.executable, str(Path(__file__).with_name("benchmark_dashboard.py")),
                           "--naive-frames", "3"], capture_output=True, text=True, timeout=600)
    for line in dash.stdout.splitlines():
        if line.startswith(("dashboard frame time", "pyqtgraph downsampling", "without envelope")):
            print(line)
    if dash.returncode != 0:
        print(f"dashboard benchmark failed (exit {dash.returncode}): {dash.stderr[-400:]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
