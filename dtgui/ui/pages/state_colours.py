"""A run's state as a colour, the same on every page (the dashboard's header and tasks, the
Runs page's running rows)."""

from __future__ import annotations

from dtgui.core.runs.run_state import RunState

STATE_COLOURS: dict[str, str] = {  # by RunState (a str)
    RunState.READY: "#5f6368",
    RunState.STARTING: "#5f6368",
    RunState.RUNNING: "#1a73e8",
    RunState.STOPPING: "#e37400",
    RunState.FINISHED: "#188038",
    RunState.FAILED: "#d93025",
    RunState.STOPPED: "#b06000",
    RunState.LOST: "#8e24aa",
}
