"""Detached processes and their pid files (`dtgui.launch.runs.detached`), with real processes: an
"interpreter" that is a shell script, so that its command line is ``-m MODULE FOLDER`` as
dtgui's own (the watcher's, a sweep's) and it does what each test needs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dtgui.launch.runs.detached import Detached, command_line

KIND = Detached("dtgui.tests.detached_probe", "probe.pid", "probe.log")


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def interpreter(tmp_path: Path, on_term: str = "exit 0") -> str:
    """A stand-in for Python: saves its stdin beside its folder's files, sets what it does on
    SIGTERM, says it started, waits."""
    path = tmp_path / "python"
    path.write_text(f"""#!/bin/sh
# $1 -m, $2 the module, $3 the folder
cat > "$3/stdin.txt"
trap '{on_term}' TERM
echo "started for $3"
while :; do sleep 0.05; done
""")
    path.chmod(0o755)
    return str(path)


def test_a_detached_process_is_started_found_by_its_pid_file_and_stopped(
        tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    pid = KIND.start(folder, ["--flag"], stdin=b'{"secret": 1}', python=interpreter(tmp_path))
    assert (folder / KIND.pid_name).read_text() == f"{pid}\n"
    assert KIND.pid(folder) == pid and KIND.is_one(pid, folder)
    assert command_line(pid)[-3:] == [KIND.module, str(folder.resolve()), "--flag"]
    wait_for(lambda: "started for" in (folder / KIND.log_name).read_text(), 60,
             "its output did not reach its log")
    assert (folder / "stdin.txt").read_bytes() == b'{"secret": 1}'  # stdin, then closed
    assert not KIND.is_one(pid, tmp_path)  # another folder's process it is not
    assert os.getsid(pid) == pid  # a session of its own: it outlives dtgui's terminal

    assert KIND.stop(folder) is True
    assert not KIND.is_one(pid, folder) and KIND.pid(folder) is None
    assert not (folder / KIND.pid_name).exists()
    assert not Path(f"/proc/{pid}").exists()  # reaped: no zombie left
    assert KIND.stop(folder) is True  # none runs: nothing to do


def test_a_process_that_does_not_end_in_time_is_left_running(tmp_path: Path) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    pid = KIND.start(folder, python=interpreter(tmp_path, on_term="echo busy"))
    wait_for(lambda: "started for" in (folder / KIND.log_name).read_text(), 60,
             "it did not start")
    try:
        assert KIND.stop(folder, timeout=0.5) is False
        assert KIND.pid(folder) == pid  # still its pid file's
    finally:
        os.kill(pid, 9)
    wait_for(lambda: KIND.pid(folder) is None, 60, "it did not end")


def test_a_pid_file_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    other = tmp_path / "other"
    folder.mkdir()
    other.mkdir()
    strangers = [  # a reused pid; the same kind for another folder
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]),
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", KIND.module,
                          str(other)])]
    try:
        for stranger in strangers:
            (folder / KIND.pid_name).write_text(f"{stranger.pid}\n")
            assert KIND.pid(folder) is None
            assert KIND.stop(folder) is True
            assert stranger.poll() is None
            assert not (folder / KIND.pid_name).exists()
    finally:
        for stranger in strangers:
            stranger.kill()
            stranger.wait()


def test_a_process_claims_its_pid_file_while_it_runs(tmp_path: Path) -> None:
    with KIND.claim(tmp_path):
        assert (tmp_path / KIND.pid_name).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / KIND.pid_name).exists()
