"""ProcessExecutor: the tasks of one machine as detached process groups, over a host
(`dtgui.launch.exec.host`): this machine (`LocalExecutor`) or one of a kind's machines over its
host (the SSH machines' executor).

* prepare: the bundle made ready in the run directory (copied as one archive and unpacked
  when the machine is another).
* start: every task started in the task wrapper, detached in a session of its own (so it
  survives the GUI and a dropped connection); the process groups come back.
* poll: one read per poll for all the machine's tasks: the states of their processes, then
  their exit codes and the new bytes of their events and logs from the offsets read so far.
  A task counts as alive while any process of its group is (zombies excepted), and as hung
  when one of them is stopped (state T).
* signal: each signal to each task's process group.
"""

from __future__ import annotations

import posixpath
import shutil
import statistics
import time
from collections.abc import Iterable
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.placement import port_in_use
from dtgui.core.plans.plan import TaskSpec
from dtgui.launch.exec.executor import Executor, MachinePoll, TaskPoll
from dtgui.launch.exec.host import CopyProgress, Host, bundle_archive, full_output
from dtgui.worker import layout

CLOCK_SHIFT_MIN = 0.5  # seconds of clock difference worth correcting on the time axis


class ProcessExecutor(Executor):
    """The tasks of `bundle` on `host`, from the bundle directory `directory` there."""

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec], host: Host,
                 directory: str, python: str) -> None:
        super().__init__(name, bundle, tasks)
        self.host = host
        self.mirrors = host.mirrors
        self._directory = directory
        self.python = python
        self._offsets: list[float] = []
        self.clock_offset = 0.0  # the machine's clock minus this machine's (seconds)

    @property
    def directory(self) -> str:
        return self._directory

    def prepare(self, progress: CopyProgress | None = None) -> None:
        if self.archive is None and self.host.mirrors:
            self.archive = bundle_archive(self.bundle)
        self.host.prepare_dir(self.directory, self.archive, make_dir=not self.dir_ready,
                              progress=progress)

    def port_conflicts(self) -> list[str]:
        ports = [t.port for t in self.tasks if t.port]
        if not ports:
            return []
        busy, unchecked = self.host.held_ports(ports, self.python)
        if unchecked:
            return [f"Could not check the ports on {self.name}: {unchecked}"]
        where = self.name if self.host.mirrors else ""
        return [port_in_use(t.port, t.task_id, where) for t in self.tasks if t.port in busy]

    def start(self) -> dict[str, int]:
        stems = {t.file_stem: t.task_id for t in self.tasks}
        pids = self.host.start_tasks(self.directory, self.python, list(stems))
        self.pids.update({stems[s]: p for s, p in pids.items()})
        return {t: self.pids[t] for t in self.task_ids}

    def full_output(self) -> str:
        return full_output(self.host, self.directory)

    def identities(self) -> dict[str, str]:
        try:
            facts = self.host.groups(list(self.pids.values()))
        except self.host.failures:
            return {}
        return {t: found for t, p in self.pids.items() if (found := facts.identity(p))}

    def poll(self) -> MachinePoll:
        sent = time.time()
        try:
            seen = self.host.read_tasks(self.directory, self.task_reads())
        except self.host.failures as exc:
            return MachinePoll(self.name, error=str(exc) or type(exc).__name__)
        self._track_clock(seen.now, sent, time.time())
        shift = self.clock_offset if abs(self.clock_offset) >= CLOCK_SHIFT_MIN else 0.0
        files = self.take_files(seen, self.host.max_chunk, shift)
        result = MachinePoll(self.name)
        for task in self.tasks:
            tid = task.task_id
            pgid = self.pids.get(tid, 0)
            live = [s for s in seen.states.get(pgid, []) if s != "Z"] if pgid else []
            found = files[tid]
            poll = TaskPoll(tid, alive=bool(live), stopped="T" in live or "t" in live,
                            events=found.events, log_lines=found.log_lines,
                            raw_events=found.raw_events, raw_log=found.raw_log)
            if not poll.alive:
                poll.exit_code = found.exit_code
            result.behind |= found.behind
            result.tasks[tid] = poll
        return result

    def _track_clock(self, remote_now: float | None, sent: float, received: float) -> None:
        if remote_now is None or received - sent > 1.0:
            return
        self._offsets = [*self._offsets[-8:], remote_now - (sent + received) / 2]
        self.clock_offset = statistics.median(self._offsets)

    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        chosen = set(self.pids) if tasks is None else set(tasks)
        self.host.signal_groups([p for t, p in self.pids.items() if t in chosen and p > 0],
                                sigs)

    def put_output_file(self, name: str, data: bytes) -> None:
        self.host.write_file(posixpath.join(self.directory, layout.OUTPUT_DIR, name), data)

    def read_output_file(self, name: str, limit: int) -> bytes:
        return self.host.read_tail(posixpath.join(self.directory, layout.OUTPUT_DIR), name, limit)

    def fetch_output(self, name: str) -> int:
        if not self.host.mirrors:
            return 0  # the tasks write into the local bundle
        return self.host.download_tree(posixpath.join(self.directory, layout.OUTPUT_DIR, name),
                                       self.bundle.output / name)

    # -- checkpoints (restart) -------------------------------------------------------------
    def _checkpoints(self) -> str:
        return posixpath.join(self.directory, layout.OUTPUT_DIR, layout.CHECKPOINTS_NAME)

    def download_checkpoints(self, local_dir: Path) -> int:
        """Copy this machine's output/checkpoints (the chief's) to `local_dir`."""
        shutil.rmtree(local_dir, ignore_errors=True)
        return self.host.download_tree(self._checkpoints(), local_dir,
                                       skip_prefixes=["tmp-worker"])

    def upload_checkpoints(self, local_dir: Path) -> None:
        self.host.upload_tree(local_dir, self._checkpoints())

    def sync_checkpoints_from(self, source: Executor) -> None:
        if source is self:
            return
        if source.mirrors and isinstance(source, ProcessExecutor):
            source.download_checkpoints(self.bundle.output / layout.CHECKPOINTS_NAME)
        self.put_checkpoints()

    def put_checkpoints(self) -> None:
        if self.mirrors:
            self.upload_checkpoints(self.bundle.output / layout.CHECKPOINTS_NAME)

    def put_task_files(self, task_ids: Iterable[str]) -> None:
        if not self.mirrors:
            return  # the tasks write into the local bundle
        wanted = set(task_ids)
        for task in self.tasks:
            if task.task_id not in wanted:
                continue
            for name, local in ((layout.events_file(task.file_stem), self.bundle.events_file(task)),
                                (layout.log_file(task.file_stem), self.bundle.log_file(task))):
                data = local.read_bytes() if local.is_file() else b""
                code, _, err = self.host.run(
                    ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh",
                     posixpath.join(self.directory, name)], 120, stdin=data)
                if code != 0:
                    raise OSError(f"writing {name} on {self.name} failed: "
                                  f"{err.decode('utf-8', 'replace').strip()[-300:]}")

    def close(self) -> None:
        self.host.close()
