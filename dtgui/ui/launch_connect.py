"""Connecting to a run's machines before a launch or a reattach, asking the person when needed.

A launch (or reattach) first connects to every remote machine through the machines panel's
`ConnectFlow`: an unknown host key opens the fingerprint dialog, a missing password or key
passphrase opens the secret prompt, a changed key is refused with its explanation - the same
dialogs as in the Machines panel, never a bare "could not start". Only when every machine is
connected does the launch itself run (in a thread), with a `dtgui.remote.connector.Connector`
that hands out the connections made here first, then reconnects (a dropped connection during
the run) with the secrets given now. Those stay in memory for the run's lifetime only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dtgui.core.machines.registry import Machine
from dtgui.remote.connector import Connector
from dtgui.ui.workers import run_in_thread

if TYPE_CHECKING:  # at run time imported on use: it brings paramiko, not wanted at start-up
    from dtgui.ui.machines.connect_flow import ConnectFlow, Outcome


def connect_machines(flow: ConnectFlow, machines: Sequence[Machine], *,
                     ready: Callable[[Connector], None], failed: Callable[[str], None],
                     progress: Callable[[str], None]) -> None:
    """Connect to `machines` (asking the person through `flow` when needed), then call
    `ready(connector)` - or `failed(message)` naming every machine that could not be reached,
    after closing the connections that were made. Returns at once; callbacks run on the UI
    thread."""
    if not machines:
        ready(Connector(registry=flow.registry()))
        return
    batch = flow.start(list(machines), lambda attempt: attempt.connect())
    batch.progress.connect(lambda name, text: progress(f"{name}: {text}"))

    def done(outcomes: list[Outcome]) -> None:
        clients = {o.machine.name: o.value for o in outcomes if o.ok}
        errors = [o.message for o in outcomes if not o.ok]
        connector = Connector(batch.secrets, batch.registry, clients=clients)
        if errors:
            run_in_thread(connector.close_unused, lambda _: None, lambda _: None)
            failed("Could not connect: " + " ".join(errors))
            return
        ready(connector)

    batch.done.connect(done)
