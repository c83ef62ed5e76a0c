"""Connecting to machines from the UI: in the background, asking the person when needed.

`ConnectFlow.start(machines, action)` runs `action(attempt)` for every machine in parallel, in
background workers (one per machine, `dtgui.ui.workers.create_worker`). `action`
connects (usually `attempt.connect()`) and does its work. What it raises decides what happens
next, on the UI thread:

* `UnknownHostKeyError`: a `HostKeyDialog`; "Trust" records the key (in a thread) and runs the
  action again; "Reject" ends that machine with a plain message.
* `SecretRequired`: a `SecretPrompt`; the answer is kept for this batch only (and in the keyring
  when the person asks for it), then the action runs again.
* `ChangedHostKeyError`: refused; a `ChangedKeyDialog` explains it. Never an accept button.
* Any other `ConnectError`: the machine ends with its plain message.

One dialog at a time, opened with `open()`; `dialogShown` tells tests (and anyone) which.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QDialog, QWidget

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.remote import secrets as secret_store
from dtgui.remote.connection import SSHClient
from dtgui.remote.connector import CONNECT_TIMEOUT, Connector, Secrets
from dtgui.remote.hostkeys import (
    ChangedHostKeyError,
    ConnectError,
    UnknownHostKeyError,
    trust_host_key,
)
from dtgui.remote.secrets import SecretRequired
from dtgui.ui.machines.hostkey_dialog import ChangedKeyDialog, HostKeyDialog
from dtgui.ui.machines.secret_prompt import SecretPrompt
from dtgui.ui.workers import allow_threads, create_worker, error_message, run_in_thread

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 6
MIN_POOL_THREADS = 8
# What connecting can ask the person (a dialog each).
Question = UnknownHostKeyError | SecretRequired | ChangedHostKeyError


@dataclass
class Attempt:
    """What an action gets (on a worker thread): the machine, the secrets given so far, the
    connect timeout, and `report(text)` to show progress on the machine's row."""

    machine: Machine
    secrets: Secrets
    registry: MachineRegistry | None
    timeout: float
    report: Callable[[str], None]

    def connect(self) -> SSHClient:
        return Connector(self.secrets, self.registry, timeout=self.timeout).connect(self.machine)


Action = Callable[[Attempt], Any]


@dataclass
class Outcome:
    machine: Machine
    value: Any = None
    error: ConnectError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str:
        return str(self.error) if self.error is not None else ""


def _close(value: object) -> None:
    for item in value if isinstance(value, tuple) else (value,):
        if hasattr(item, "close") and hasattr(item, "get_transport"):
            with contextlib.suppress(Exception):
                item.close()


class Batch(QObject):
    """One `start()`: per-machine progress and outcomes, then `done` with all outcomes."""

    progress = Signal(str, str)  # machine name, short text
    outcome = Signal(object)  # Outcome (final for that machine)
    done = Signal(list)  # [Outcome] in the order given

    def __init__(self, machines: Sequence[Machine], action: Action, given: Secrets,
                 parent: QObject) -> None:
        super().__init__(parent)
        self.machines = list(machines)
        self.action = action
        self.secrets = given
        self.registry: MachineRegistry | None = None
        self.outcomes: dict[str, Outcome] = {}
        self.attempts: dict[str, int] = {}

    @property
    def finished(self) -> bool:
        return len(self.outcomes) == len(self.machines)


class ConnectFlow(QObject):
    dialogShown = Signal(object)  # the dialog just opened

    def __init__(self, dialog_parent: QWidget, registry: Callable[[], MachineRegistry | None],
                 *, timeout: float = CONNECT_TIMEOUT, keyring_ok: bool = True,
                 keyring_note: str = "") -> None:
        super().__init__(dialog_parent)
        self.dialog_parent = dialog_parent
        self.registry = registry
        self.timeout = timeout
        self.keyring_ok, self.keyring_note = keyring_ok, keyring_note
        self.dialog: QDialog | None = None
        self._questions: deque[tuple[Batch, Machine, Question]] = deque()
        self._trusted: set[tuple[str, int, str]] = set()  # keys accepted through this flow
        allow_threads(MIN_POOL_THREADS)  # SSH work waits on the network, not the CPU

    # -- starting --------------------------------------------------------------------------
    def start(self, machines: Sequence[Machine], action: Action,
              given: Secrets | None = None) -> Batch:
        batch = Batch(machines, action, given or Secrets(), self)
        batch.registry = self.registry()
        if not batch.machines:
            QTimer.singleShot(0, lambda: batch.done.emit([]))
            return batch
        for m in batch.machines:  # every machine at once, each in a worker of its own
            self._retry(batch, m)
        return batch

    def _attempt(self, batch: Batch, machine: Machine,
                 report: Callable[[str], None]) -> tuple[Any, ConnectError | None]:
        """Worker thread: run the action once; (value, None) or (None, the error)."""
        try:
            return batch.action(Attempt(machine, batch.secrets, batch.registry, self.timeout,
                                        report)), None
        except ConnectError as exc:
            return None, exc
        except Exception as exc:  # a bug must not leave the row spinning
            log.exception("working on %s failed unexpectedly", machine.name)
            return None, ConnectError(f"Unexpected error: {type(exc).__name__}: {exc}",
                                      machine=machine.name)

    def _retry(self, batch: Batch, machine: Machine) -> None:
        batch.progress.emit(machine.name, "connecting…")
        create_worker(lambda worker: self._attempt(batch, machine, worker.report),
                      on_done=lambda result: self._on_attempt(batch, machine, *result),
                      on_error=lambda exc: self._job_failed(batch, exc),
                      on_progress=lambda text: batch.progress.emit(machine.name, text),
                      # the batch is gone: nobody will close what the action opened
                      on_dropped=lambda result: _close(result[0]),
                      context=batch)

    def _job_failed(self, batch: Batch, exc: BaseException) -> None:
        for m in batch.machines:
            if m.name not in batch.outcomes:
                self._finish(batch, Outcome(m, error=ConnectError(error_message(exc))))

    # -- results (UI thread) ------------------------------------------------------------------
    def _on_attempt(self, batch: Batch, machine: Machine, value: Any,
                    error: ConnectError | None) -> None:
        n = batch.attempts[machine.name] = batch.attempts.get(machine.name, 0) + 1
        if error is None:
            self._finish(batch, Outcome(machine, value))
        elif n >= MAX_ATTEMPTS and isinstance(error, (UnknownHostKeyError, SecretRequired)):
            self._finish(batch, Outcome(machine, error=ConnectError(
                f"Gave up connecting to {machine.name} after {n} tries: {error}")))
        elif isinstance(error, UnknownHostKeyError):
            batch.progress.emit(machine.name, "waiting for you: new host key")
            self._ask(batch, machine, error)
        elif isinstance(error, SecretRequired):
            batch.progress.emit(machine.name, f"waiting for you: {error.kind}")
            self._ask(batch, machine, error)
        elif isinstance(error, ChangedHostKeyError):
            self._finish(batch, Outcome(machine, error=error))
            self._ask(batch, machine, error)
        else:
            self._finish(batch, Outcome(machine, error=error))

    def _finish(self, batch: Batch, outcome: Outcome) -> None:
        if outcome.machine.name in batch.outcomes:
            return
        batch.outcomes[outcome.machine.name] = outcome
        batch.outcome.emit(outcome)
        if batch.finished:
            batch.done.emit([batch.outcomes[m.name] for m in batch.machines])

    # -- questions ----------------------------------------------------------------------------
    def _ask(self, batch: Batch, machine: Machine, error: Question) -> None:
        self._questions.append((batch, machine, error))
        self._next_question()

    def _next_question(self) -> None:
        if self.dialog is not None or not self._questions:
            return
        batch, machine, error = self._questions.popleft()
        if isinstance(error, UnknownHostKeyError) and \
                (error.host, error.port, error.fingerprint) in self._trusted:
            # Two machines at one address: asked once (the key is being recorded right now).
            QTimer.singleShot(200, lambda: self._retry(batch, machine))
            self._next_question()
            return
        parent = self.dialog_parent.window() if self.dialog_parent else None
        if isinstance(error, UnknownHostKeyError):
            dialog: QDialog = HostKeyDialog(error, machine.name, parent)
            dialog.accepted.connect(lambda: self._trust(batch, machine, error))
            dialog.rejected.connect(lambda: self._finish(batch, Outcome(machine, error=ConnectError(
                f"You rejected the host key of {machine.name}; dtgui did not connect.",
                machine=machine.name))))
        elif isinstance(error, SecretRequired):
            dialog = SecretPrompt(error, keyring_ok=self.keyring_ok,
                                  keyring_note=self.keyring_note, parent=parent)
            dialog.accepted.connect(lambda: self._got_secret(batch, machine, error, dialog))
            dialog.rejected.connect(lambda: self._finish(batch, Outcome(machine, error=ConnectError(
                f"No {error.kind} was given for {error.machine}; dtgui did not connect.",
                machine=machine.name))))
        else:
            dialog = ChangedKeyDialog(error, machine.name, parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(self._dialog_closed)
        self.dialog = dialog
        dialog.open()
        self.dialogShown.emit(dialog)

    def _dialog_closed(self) -> None:
        self.dialog = None
        QTimer.singleShot(0, self._next_question)

    def _trust(self, batch: Batch, machine: Machine, error: UnknownHostKeyError) -> None:
        batch.progress.emit(machine.name, "trusting the host key…")
        self._trusted.add((error.host, error.port, error.fingerprint))

        def trusted(_: object) -> None:
            self._retry(batch, machine)

        def failed(message: str) -> None:
            self._finish(batch, Outcome(machine, error=ConnectError(
                f"The host key could not be recorded: {message}",
                machine=machine.name)))

        key = error.key
        if key is None:  # only an error raised while connecting carries the key
            failed("the host key was not received")
            return
        run_in_thread(lambda: trust_host_key(error.host, error.port, key), trusted,
                      lambda exc: failed(error_message(exc)), context=batch)

    def _got_secret(self, batch: Batch, machine: Machine, error: SecretRequired,
                    dialog: SecretPrompt) -> None:
        value, remember = dialog.secret(), dialog.wants_remember()
        batch.secrets.set(error.machine, error.kind, value)
        if remember:
            owner, kind = error.machine, error.kind
            run_in_thread(lambda: secret_store.set_secret(owner, kind, value), lambda _: None,
                          lambda exc: batch.progress.emit(machine.name, error_message(exc)),
                          context=batch)
        self._retry(batch, machine)
