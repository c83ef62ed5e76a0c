"""The SSH machine kind: a run's tasks are processes started and watched on registered
machines over SSH, sharing a run with this machine and each other (docs/machines.md).

Its driver (`driver`) and executor (`executor`) are here; the SSH transport they use
(connection, host keys, secrets, commands, transfer, the connector in `dtgui/remote/`, the
host in `dtgui/launch/ssh_host.py`) is shared with a cluster's login node. Its machines are
the wizard's machine rows (no box of its own) and the Add-machine dialog's plain fields.
"""

from dtgui.kinds import Kind

TARGET_KIND = Kind(name="ssh", driver="dtgui.kinds.ssh.driver:SshDriver")
