"""Follows the TensorBoard event files a script writes and turns their scalars into events.

Runs in the TensorFlow-free supervisor (a thread). Every `interval` seconds it looks for
`*tfevents*` files under its folders (the task's DTGUI_TENSORBOARD_DIR and DTGUI_OUTPUT_DIR),
reads the records appended since the last look (dtgui_worker.tfrecord) and emits one
``scalar`` event (``tag``, ``step``, ``value``, ``wall_time``) per scalar. A tag is prefixed
with the file's folder below the followed one (``train/epoch_loss``, ``validation/...``);
tf_keras's per-worker scratch folders (``workertemp_1``) are left out of the name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from .tfrecord import RecordReader, Scalar, event_decoder, scalars_of

EmitScalar = Callable[[str, Scalar], None]  # (full tag, scalar)
SCALAR_PLUGIN = "scalars"


def _tag_prefix(root: str, directory: str) -> str:
    rel = os.path.relpath(directory, root)
    if rel in (".", ""):
        return ""
    parts = [p for p in rel.split(os.sep) if p and not p.startswith("workertemp_")]
    return "/".join(parts) + "/" if parts else ""


class TensorBoardFollower:
    def __init__(self, roots: list[str], emit: EmitScalar, interval: float = 0.5) -> None:
        self.roots = [os.path.abspath(r) for r in roots]
        self.emit = emit
        self.interval = interval
        self._readers: dict[str, tuple[RecordReader, str]] = {}  # real path -> reader, prefix
        self._plugins: dict[str, str] = {}  # full tag -> plugin named by its first metadata
        self._decode = event_decoder()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.count = 0
        self.problems: list[str] = []
        self.last: dict[str, Scalar] = {}  # full tag -> its latest scalar

    def _discover(self) -> None:
        for root in self.roots:
            if not os.path.isdir(root):
                continue
            for directory, dirs, files in os.walk(root):
                dirs.sort()
                for name in sorted(files):
                    if "tfevents" not in name or name.endswith((".tmp", ".part")):
                        continue
                    path = os.path.join(directory, name)
                    real = os.path.realpath(path)
                    if real not in self._readers:
                        self._readers[real] = (RecordReader(path),
                                               _tag_prefix(root, directory))

    def poll_once(self) -> int:
        """Read what was appended; returns how many scalars were emitted."""
        self._discover()
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
                self.poll_once()
            except Exception as exc:  # noqa: BLE001
                self.problems.append(f"following TensorBoard files: {exc}")
        for reader, _ in self._readers.values():
            reader.close()
