"""Follows the TensorBoard event files a script writes and turns their scalars into events.

Runs in the TensorFlow-free supervisor (a thread). Every `interval` seconds it looks for
`*tfevents*` files under its folders (the task's DTGUI_TENSORBOARD_DIR and DTGUI_OUTPUT_DIR),
reads the records appended since the last look (tfrecord.py) and emits one
``scalar`` event (``tag``, ``step``, ``value``, ``wall_time``) per scalar. A tag is prefixed
with the file's folder below the followed one (``train/epoch_loss``, ``validation/...``);
tf_keras's per-worker scratch folders (``workertemp_1``) are left out of the name.

Files a script writes where it likes - Keras' TensorBoard callback defaults to ``logs/`` in the
current folder (the bundle's project/), or a TB_LOG_DIR under the run's output - are followed
too, from `shared` folders that every task of a machine shares: there a file belongs to the
task whose script wrote it, told by the process id TensorFlow puts in its name
(``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``). Shared folders are looked through less
often (they may be large), skipping the folders in `skip`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from .tfrecord import RecordReader, Scalar, event_decoder, scalars_of

EmitScalar = Callable[[str, Scalar], None]  # (full tag, scalar)
SCALAR_PLUGIN = "scalars"


SHARED_EVERY = 4  # shared folders: every 4th look (2 s)


def file_pid(name: str) -> int | None:
    """The writer's process id in a TF2 event file's name (None when it has none)."""
    parts = name.removesuffix(".v2").split(".")
    if len(parts) >= 7 and parts[-1].isdigit() and parts[-2].isdigit():
        return int(parts[-2])
    return None


def _is_event_file(name: str) -> bool:
    return "tfevents" in name and not name.endswith((".tmp", ".part"))


def _tag_prefix(root: str, directory: str) -> str:
    rel = os.path.relpath(directory, root)
    if rel in (".", ""):
        return ""
    parts = [p for p in rel.split(os.sep) if p and not p.startswith("workertemp_")]
    return "/".join(parts) + "/" if parts else ""


class TensorBoardFollower:
    def __init__(self, roots: list[str], emit: EmitScalar, interval: float = 0.5, *,
                 shared: list[str] | tuple[str, ...] = (), pid: int | None = None,
                 skip: list[str] | tuple[str, ...] = ()) -> None:
        self.roots = [os.path.abspath(r) for r in roots]
        self.shared = [os.path.abspath(r) for r in shared]
        self.pid = pid  # the script's process: its files in the shared folders are this task's
        self._skip = {os.path.abspath(r) for r in (*skip, *self.roots)}
        self._looks = 0
        self.emit = emit
        self.interval = interval
        self._readers: dict[str, tuple[RecordReader, str]] = {}  # real path -> reader, prefix
        self._plugins: dict[str, str] = {}  # full tag -> plugin named by its first metadata
        self._decode = event_decoder()
        self._no_decoder_told = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.count = 0
        self.problems: list[str] = []
        self.last: dict[str, Scalar] = {}  # full tag -> its latest scalar

    def _discover(self, everything: bool = False) -> None:
        for root in self.roots:
            self._walk(root, mine=None)
        if self.pid is not None and (everything or self._looks % SHARED_EVERY == 0):
            for root in self.shared:
                self._walk(root, mine=self.pid)
        self._looks += 1

    def _walk(self, root: str, mine: int | None) -> None:
        """Find new event files under `root`; with `mine`, only that process's files."""
        if not os.path.isdir(root):
            return
        for directory, dirs, files in os.walk(root):
            if mine is not None:
                dirs[:] = [d for d in dirs if os.path.join(directory, d) not in self._skip]
            dirs.sort()
            for name in sorted(files):
                if not _is_event_file(name) or (mine is not None and file_pid(name) != mine):
                    continue
                path = os.path.join(directory, name)
                real = os.path.realpath(path)
                if real not in self._readers:
                    self._readers[real] = (RecordReader(path), _tag_prefix(root, directory))

    def poll_once(self, everything: bool = False) -> int:
        """Read what was appended (`everything`: look through the shared folders now too);
        returns how many scalars were emitted."""
        self._discover(everything)
        if self._decode is None:
            if self._readers and not self._no_decoder_told:
                self._no_decoder_told = True
                self.problems.append("TensorBoard files are not followed: the tensorboard "
                                     "package is not installed for this Python")
            return 0
        emitted = 0
        for reader, prefix in list(self._readers.values()):
            records = reader.read_new()
            if reader.damaged:
                self.problems.append(reader.damaged)
                reader.damaged = ""
            for record in records:
                for scalar in scalars_of(record, self._decode):
                    tag = prefix + scalar.tag
                    if scalar.plugin:
                        self._plugins.setdefault(tag, scalar.plugin)
                    if self._plugins.get(tag, SCALAR_PLUGIN) != SCALAR_PLUGIN:
                        continue  # one number, but not a scalar summary (e.g. hparams)
                    self.emit(tag, scalar)
                    self.last[tag] = scalar
                    emitted += 1
        self.count += emitted
        return emitted

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll_once()
            except Exception as exc:  # noqa: BLE001 - following must never end the task
                self.problems.append(f"following TensorBoard files: {exc}")

    def start(self) -> TensorBoardFollower:
        self._thread = threading.Thread(target=self._run, name="tb-follow", daemon=True)
        self._thread.start()
        return self

    def stop(self, drain: bool = True) -> None:
        """Stop the thread; with `drain`, read what the files hold now (the script ended)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if drain:
            try:
                self.poll_once(everything=True)
            except Exception as exc:  # noqa: BLE001
                self.problems.append(f"following TensorBoard files: {exc}")
        for reader, _ in self._readers.values():
            reader.close()
