"""Save PNGs of the machines panel, its dialogs and the cluster doctor, on real SSH hosts.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_machines.py /tmp/machines

Needs root: it starts two real sshd test hosts in network namespaces (tests/sshhosts.py),
adds one by password through the add dialog and imports the other from an SSH config file,
accepts their host keys in the fingerprint dialog, probes both, blocks one port with
nftables (when `nft` is installed) and runs the doctor. Everything happens in temporary
directories (config, HOME, keyring file); nothing of the real user is read or written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import shots

TMP = shots.sandbox()

import shutil  # noqa: E402

import sshhosts  # noqa: E402
from keyrings.alt.file import PlaintextKeyring  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from dtgui.remote import hostkeys, secrets  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402

BLOCKED_PORT = 23457


def settle(app: QApplication, seconds: float = 0.3) -> None:
    shots.settle(app, seconds)


def shoot(app: QApplication, widget: QWidget, out: Path, name: str) -> None:
    shots.shoot(app, widget, out, name, seconds=0.3)


def block_port(host: sshhosts.Host, port: int) -> bool:
    """Drop TCP to `port` inside the host's own namespace (a firewall on that machine)."""
    if not host.netns or not shutil.which("nft"):
        return False
    rules = ("table inet dtgui_shot {\n chain input {\n  type filter hook input priority 0;\n"
             f"  tcp dport {port} drop\n }}\n}}\n")
    subprocess.run(["ip", "netns", "exec", host.netns, "nft", "-f", "-"], input=rules,
                   text=True, check=True)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    reason = sshhosts.unavailable_reason()
    if reason:
        print(f"cannot start the SSH test hosts: {reason}", file=sys.stderr)
        return 1
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    home = TMP / "home"
    (home / ".ssh").mkdir(parents=True)
    backend = PlaintextKeyring()
    backend.file_path = str(TMP / "keyring" / "keyring_pass.cfg")
    lab = sshhosts.SshLab(2).start()
    try:
        with secrets.using_keyring(backend):
            return run(lab, out, home)
    finally:
        lab.stop()
        shutil.rmtree(TMP, ignore_errors=True)


def run(lab: sshhosts.SshLab, out: Path, home: Path) -> int:
    h2, h3 = lab.hosts
    (home / ".ssh" / "config").write_text(
        f"Host gpu-box-2\n  HostName {h3.address}\n  Port {h3.port}\n"
        f"  User {sshhosts.TEST_USER}\n  IdentityFile {lab.plain_key}\n"
        "Host *\n  ServerAliveInterval 30\n")
    app = make_app([sys.argv[0]])
    from dtgui.ui.machines.add_dialog import MachineDialog
    from dtgui.ui.machines.doctor_dialog import DoctorDialog
    from dtgui.ui.machines.hostkey_dialog import ChangedKeyDialog, HostKeyDialog
    from dtgui.ui.machines.import_dialog import ImportDialog
    from dtgui.ui.main_window import MainWindow

    window = MainWindow()
    window.resize(1400, 880)
    window.show()
    panel = window.machines
    shown: list[QWidget] = []
    panel.dialogShown.connect(shown.append)
    shots.wait_until(app, panel.ready)
    shoot(app, window, out, "0-main-window-empty")

    # 1. Add gpu-box-1 by password through the dialog.
    panel.machine_actions.add_machine()
    dialog = shown[-1]
    assert isinstance(dialog, MachineDialog)
    dialog.name_edit.setText("gpu-box-1")
    dialog.host_edit.setText(h2.address)
    dialog.port_spin.setValue(h2.port)
    dialog.user_edit.setText(sshhosts.TEST_USER)
    dialog.password_radio.setChecked(True)
    dialog.secret_edit.setText(lab.password)
    shoot(app, dialog, out, "2-add-dialog")

    # 2. "Test connection": the first contact shows the fingerprint dialog.
    dialog.test_button.click()
    shots.wait_until(app, lambda: isinstance(shown[-1], HostKeyDialog))
    shoot(app, shown[-1], out, "3-fingerprint-dialog")
    shown[-1].trust_button.click()
    shots.wait_until(app, lambda: dialog.test_label.text().startswith("✓"), 60)
    shoot(app, dialog, out, "2b-add-dialog-tested")
    dialog.ok_button.click()

    # 3. Import gpu-box-2 from ~/.ssh/config; accept its key too.
    panel.machine_actions.import_config()
    shots.wait_until(app, lambda: isinstance(shown[-1], ImportDialog) and shown[-1].found)
    shoot(app, shown[-1], out, "4-import-dialog")
    shown[-1].ok_button.click()
    shots.wait_until(app, lambda: isinstance(shown[-1], HostKeyDialog))
    shown[-1].trust_button.click()
    shots.wait_until(app, lambda: len(panel.states) == 2
               and all(s.status == "ok" for s in panel.states.values()), 120)
    shots.wait_until(app, lambda: window.machine.facts is not None
               and window.machine.facts.tf is not None, 120)
    panel.table.selectRow(0)
    shoot(app, window, out, "1-main-window-machines")

    # 4. The doctor, with one port blocked by a firewall on gpu-box-2.
    blocked = block_port(h3, BLOCKED_PORT)
    panel.table.clearSelection()
    panel.machine_actions.open_doctor()
    doctor = shown[-1]
    assert isinstance(doctor, DoctorDialog)
    doctor.port_spin.setValue(BLOCKED_PORT if blocked else 23456)
    done: list[object] = []
    doctor.finishedRun.connect(done.append)
    doctor.run()
    settle(app, 0.4)
    shoot(app, doctor, out, "5a-doctor-running")
    shots.wait_until(app, lambda: done, 120)
    shoot(app, doctor, out, "5-doctor-table")
    doctor.only_problems.setChecked(True)
    shoot(app, doctor, out, "5b-doctor-only-problems")
    doctor.close()

    # 5. A changed host key: gpu-box-2's address now answers with another key on record.
    hostkeys.forget_host_key(h3.address, h3.port)
    from conftest_ssh import host_key

    hostkeys.trust_host_key(h3.address, h3.port, host_key(h2))
    panel.refresh(["gpu-box-2"])
    shots.wait_until(app, lambda: isinstance(shown[-1], ChangedKeyDialog))
    shoot(app, shown[-1], out, "6-changed-key-dialog")
    shown[-1].close_button.click()
    panel.table.selectRow(1)
    shoot(app, window, out, "7-main-window-changed-key")

    # 6. The secret prompt (no keyring entry, no password typed).
    secrets.delete_secrets("gpu-box-1")
    panel.refresh(["gpu-box-1"])
    from dtgui.ui.machines.secret_prompt import SecretPrompt

    shots.wait_until(app, lambda: isinstance(shown[-1], SecretPrompt))
    shoot(app, shown[-1], out, "8-password-prompt")
    shown[-1].reject()
    settle(app)

    # 7. Inline validation in the add dialog.
    panel.machine_actions.add_machine()
    dialog = shown[-1]
    dialog.name_edit.setText("gpu-box-1")
    dialog.host_edit.setText("gpu box; rm -rf /")
    dialog.user_edit.setText("")
    dialog.key_radio.setChecked(True)
    dialog.key_edit.setText("")
    shoot(app, dialog, out, "2c-add-dialog-invalid")
    dialog.reject()
    settle(app)
    window.close()
    settle(app)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
