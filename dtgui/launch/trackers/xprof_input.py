"""What each task's newest profile says of the input, for the bottleneck card beside dtgui's
own split (dtgui.core.measure.profile_input says how it is read).

The trace is converted by XProf (the `dtgui[profile]` extra: TensorBoard's Profile tab uses
the same converter) in a process of its own, `python -m dtgui.launch.trackers.xprof_input
TRACE...`: the conversion is native code that takes up to seconds a trace, the app must not
wait on it, and without the extra the app simply shows no figure. XProf does not import
TensorFlow. The child prints only the events the share is read from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dtgui.core.measure.profile_input import ProfileInput, input_share, wanted
from dtgui.worker.layout import TENSORBOARD_NAME

TRACES = "*/plugins/profile/*/*.xplane.pb"  # under a run's output/tensorboard, a task a folder
CONVERT_SECONDS = 300.0  # a long capture of a large model converts for a while


def newest_traces(output: Path) -> dict[str, Path]:
    """Each task's newest trace in the run's output folder (task: "worker:0")."""
    found: dict[str, Path] = {}
    folder = output / TENSORBOARD_NAME
    for path in sorted(folder.glob(TRACES)):  # sessions are named by time
        kind, _, index = path.relative_to(folder).parts[0].rpartition("-")
        found[f"{kind}:{index}"] = path
    return found


def profile_inputs(output: Path, python: str = sys.executable) -> list[ProfileInput]:
    """The input share of each task's newest profile that marks its steps ([] when there is
    none, or XProf cannot read them). Blocks for the conversion: off the UI thread."""
    traces = newest_traces(output)
    if not traces:
        return []
    try:
        done = subprocess.run([python, "-m", __name__, *map(str, traces.values())],
                              capture_output=True, text=True, timeout=CONVERT_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return []
    shares = [input_share(task, events)
              for task, events in zip(traces, json.loads(lines[-1]), strict=False)]
    return [share for share in shares if share is not None]


def main(argv: list[str]) -> int:
    """The child: for each trace, the events the input share is read from, as one JSON line
    (a list a trace)."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        print("XProf is not installed (the dtgui[profile] extra)", file=sys.stderr)
        return 2
    out = []
    for path in argv:
        data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
        text = data.decode() if isinstance(data, bytes) else str(data)
        out.append([e for e in json.loads(text).get("traceEvents", []) if wanted(e)])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
