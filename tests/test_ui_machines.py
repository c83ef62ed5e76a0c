"""The machines panel and its dialogs, clicked through against the real sshd test hosts.

Secrets go to keyrings.alt's real file backend; host keys to the app's known_hosts in a temp
config dir; HOME is a temp dir (so ~/.ssh/config is the test's own). Nothing is mocked: the
dialogs are the ones a person sees, opened with open(), and clicked with pytest-qt.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from weakref import WeakKeyDictionary

import conftest_ssh
import netfaults
import pytest
import shiboken6
import sshhosts
import widgets
from conftest_ssh import host_key, machine, trust
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtWidgets import QAbstractButton, QDialogButtonBox, QLineEdit, QMessageBox, QWidget
from pytestqt.qtbot import QtBot

from dtgui.core.machines.doctor import FAIL, OK, Check
from dtgui.core.machines.hardware import MachineFacts, TfView
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.settings import config_dir
from dtgui.remote import hostkeys, secrets
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.machines.doctor_dialog import DoctorDialog
from dtgui.ui.machines.hostkey_dialog import ChangedKeyDialog, HostKeyDialog
from dtgui.ui.machines.import_dialog import ImportDialog
from dtgui.ui.machines.install_key_dialog import InstallKeyDialog
from dtgui.ui.machines.panel import MachinesPanel
from dtgui.ui.machines.secret_prompt import SecretPrompt

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("ssh_env")]
LEFT = Qt.MouseButton.LeftButton
SSH_WAIT = 60_000
LOCAL = MachineFacts(hostname="here", os_name="Linux", python="3.11.7", cpu_model="cpu",
                     cpu_cores=2, ram_total=8 << 30, tf=TfView(version="2.21.0"))


# -- helpers ----------------------------------------------------------------------------------
# the dialogs each panel showed (`dialogShown`), in order
_shown: WeakKeyDictionary[MachinesPanel, list[QWidget]] = WeakKeyDictionary()
D = TypeVar("D", bound=QWidget)


def record_dialogs(panel: MachinesPanel) -> None:
    seen: list[QWidget] = []
    _shown[panel] = seen
    panel.dialogShown.connect(seen.append)


def shown(panel: MachinesPanel) -> list[QWidget]:
    return _shown[panel]


@pytest.fixture
def make_panel(qtbot: QtBot) -> Callable[[], MachinesPanel]:
    def make() -> MachinesPanel:
        panel = MachinesPanel(local_facts=lambda: LOCAL)
        record_dialogs(panel)
        qtbot.addWidget(panel)
        panel.resize(640, 560)
        panel.show()
        qtbot.waitUntil(panel.ready, timeout=60_000)
        return panel

    return make


def type_into(qtbot: QtBot, edit: QLineEdit, text: str) -> None:
    edit.selectAll()
    qtbot.keyClick(edit, Qt.Key.Key_Delete)
    qtbot.keyClicks(edit, text)
    assert edit.text() == text


def click_indicator(qtbot: QtBot, button: QAbstractButton) -> None:
    """Click a check box or radio button on its indicator (a wide one ignores clicks right
    of its text)."""
    qtbot.mouseClick(button, LEFT, pos=QPoint(8, button.height() // 2))


def click_radio(qtbot: QtBot, radio: QAbstractButton) -> None:
    click_indicator(qtbot, radio)
    assert radio.isChecked()


def wait_dialog(qtbot: QtBot, panel: MachinesPanel, kind: type[D], timeout: int = SSH_WAIT
                ) -> D:
    """The open dialog of `kind` the panel showed (closed ones are deleted on close)."""
    def open_ones() -> list[D]:
        return [d for d in shown(panel) if shiboken6.isValid(d) and isinstance(d, kind)
                and d.isVisible()]

    qtbot.waitUntil(lambda: bool(open_ones()), timeout=timeout)
    return open_ones()[-1]


def wait_status(qtbot: QtBot, panel: MachinesPanel, name: str, *statuses: str) -> None:
    qtbot.waitUntil(lambda: name in panel.states and panel.states[name].status in statuses,
                    timeout=SSH_WAIT)


def cell(panel: MachinesPanel, name: str, column: str) -> str:
    from dtgui.ui.machines.panel import COLUMNS

    return widgets.cell_text(panel.table, panel.row_of(name), COLUMNS.index(column))


def fill_machine(qtbot: QtBot, dialog: MachineDialog, name: str, host: sshhosts.Host, auth: str,
                 secret: str = "") -> None:
    type_into(qtbot, dialog.name_edit, name)
    type_into(qtbot, dialog.host_edit, host.address)
    type_into(qtbot, dialog.port_spin.lineEdit(), str(host.port))
    type_into(qtbot, dialog.user_edit, sshhosts.TEST_USER)
    click_radio(qtbot, {"password": dialog.password_radio, "key": dialog.key_radio,
                        "agent": dialog.agent_radio}[auth])
    if secret:
        type_into(qtbot, dialog.secret_edit, secret)


def python_version(path: str) -> str:
    return subprocess.run([path, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def check_of(doctor: DoctorDialog, machine: str, topic: str) -> Check:
    """The doctor's first check of `machine` whose topic starts with `topic`."""
    found = doctor.status_of(machine, topic)
    assert found is not None, f"no {topic} check of {machine}"
    return found


def select(panel: MachinesPanel, *names: str) -> None:
    panel.table.clearSelection()
    for name in names:
        panel.table.selectRow(panel.row_of(name))
    assert sorted(panel.selected_names()) == sorted(names)


# -- adding, host keys, probing ------------------------------------------------------------------
def test_add_by_password_trust_the_fingerprint_and_see_the_probe(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    panel = make_panel()
    qtbot.mouseClick(panel.add_button, LEFT)
    dialog = panel.dialog
    assert isinstance(dialog, MachineDialog) and not dialog.ok_button.isEnabled()
    fill_machine(qtbot, dialog, "box-pw", h, "password", ssh_lab.password)
    assert dialog.remember_box.isChecked() and dialog.ok_button.isEnabled()
    assert "plain file" in dialog.keyring_note.text()  # keyrings.alt's file backend is in use
    qtbot.mouseClick(dialog.ok_button, LEFT)

    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    assert key_dialog.fingerprint_label.text() == h.fingerprint == sshhosts.fingerprint(h.host_pub)
    assert not hostkeys.app_known_hosts().exists()  # nothing is trusted by looking
    qtbot.waitUntil(lambda: panel.states["box-pw"].status == "connecting")
    qtbot.mouseClick(key_dialog.trust_button, LEFT)

    wait_status(qtbot, panel, "box-pw", "ok", "error")
    state = panel.states["box-pw"]
    assert state.status == "ok", state.message
    facts = state.facts
    assert facts is not None
    assert cell(panel, "box-pw", "Python") == python_version(facts.python_path)
    assert cell(panel, "box-pw", "Address") == h.address if h.port == 22 else True
    assert cell(panel, "box-pw", "OS") and cell(panel, "box-pw", "GPUs")
    assert cell(panel, "box-pw", "TF") == (facts.tf_version if facts.tf_installed else "none")
    select(panel, "box-pw")
    assert f"Python {facts.python_version}" in panel.details_label.text()
    assert f"{facts.cpu_cores} cores" in panel.details_label.text()
    assert secrets.get_secret("box-pw", "password") == ssh_lab.password
    assert MachineRegistry().get("box-pw").auth == "password"
    assert ssh_lab.password not in (config_dir() / "machines.toml").read_text()


def test_import_from_the_ssh_config_then_accept_its_key(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab,
        ssh_env: Path) -> None:
    h = ssh_lab.hosts[1]
    (ssh_env / ".ssh" / "config").write_text(
        f"Host lab-imported\n  HostName {h.address}\n  Port {h.port}\n"
        f"  User {sshhosts.TEST_USER}\n  IdentityFile {ssh_lab.plain_key}\n"
        "Host *\n  ServerAliveInterval 20\n")
    panel = make_panel()
    qtbot.mouseClick(panel.import_button, LEFT)
    dialog = panel.dialog
    assert isinstance(dialog, ImportDialog)
    qtbot.waitUntil(lambda: bool(dialog.found), timeout=60_000)
    assert dialog.path == ssh_env / ".ssh" / "config"
    assert [m.name for m in dialog.chosen()] == ["lab-imported"]
    qtbot.mouseClick(dialog.ok_button, LEFT)
    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    assert key_dialog.fingerprint_label.text() == h.fingerprint
    qtbot.mouseClick(key_dialog.trust_button, LEFT)
    wait_status(qtbot, panel, "lab-imported", "ok", "error")
    assert panel.states["lab-imported"].status == "ok", panel.states["lab-imported"].message
    imported = MachineRegistry().get("lab-imported")
    assert (imported.auth, imported.host, imported.key_file) == ("key", h.address,
                                                                 str(ssh_lab.plain_key))


def test_rejecting_the_host_key_connects_nothing(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    MachineRegistry().add(machine(ssh_lab, ssh_lab.hosts[0], name="nope"))
    panel = make_panel()
    qtbot.mouseClick(panel.refresh_button, LEFT)
    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    assert key_dialog.reject_button.isDefault()  # Enter does not trust by accident
    qtbot.mouseClick(key_dialog.reject_button, LEFT)
    wait_status(qtbot, panel, "nope", "error")
    assert "rejected the host key" in panel.states["nope"].message
    assert not hostkeys.app_known_hosts().exists()


def test_two_machines_at_one_address_ask_for_its_key_once(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[2]
    reg = MachineRegistry()
    reg.add(machine(ssh_lab, h, name="alias-a"))
    reg.add(machine(ssh_lab, h, name="alias-b"))
    panel = make_panel()
    qtbot.mouseClick(panel.refresh_button, LEFT)
    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    qtbot.mouseClick(key_dialog.trust_button, LEFT)
    wait_status(qtbot, panel, "alias-a", "ok", "error")
    wait_status(qtbot, panel, "alias-b", "ok", "error")
    assert [type(d) for d in shown(panel)] == [HostKeyDialog]
    assert panel.states["alias-a"].status == panel.states["alias-b"].status == "ok"


def test_wrong_password_is_shown_on_the_row_in_plain_words(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    trust(h)
    panel = make_panel()
    qtbot.mouseClick(panel.add_button, LEFT)
    dialog = panel.dialog
    assert isinstance(dialog, MachineDialog)
    fill_machine(qtbot, dialog, "box-wrong", h, "password", "not-the-password")
    click_indicator(qtbot, dialog.remember_box)
    assert not dialog.remember()
    panel.flow.timeout = 50.0  # room for the test host's sshd on a loaded machine
    t0 = time.monotonic()
    qtbot.mouseClick(dialog.ok_button, LEFT)
    wait_status(qtbot, panel, "box-wrong", "error")
    # the server's answer, not the connect timeout waited out
    assert time.monotonic() - t0 < panel.flow.timeout / 2
    message = panel.states["box-wrong"].message
    assert "was not accepted: wrong password" in message and "Traceback" not in message
    assert message in widgets.cell(panel.table, panel.row_of("box-wrong"), 0).toolTip()
    assert "wrong password" in panel.details_label.text()  # the only machine: shown below
    assert secrets.get_secret("box-wrong", "password") is None  # not remembered


def test_a_changed_host_key_is_refused_with_no_way_to_accept(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    hostkeys.trust_host_key(h3.address, h3.port, host_key(h2))  # "the old key" on record
    MachineRegistry().add(machine(ssh_lab, h3, name="moved"))
    panel = make_panel()
    qtbot.mouseClick(panel.refresh_button, LEFT)
    warning = wait_dialog(qtbot, panel, ChangedKeyDialog)
    assert warning.presented_label.text().endswith(h3.fingerprint)
    assert warning.expected_label.text().endswith(h2.fingerprint)
    roles = [box.buttonRole(b) for box in warning.findChildren(QDialogButtonBox)
             for b in box.buttons()]
    assert roles == [QDialogButtonBox.ButtonRole.RejectRole]  # Close, and nothing else
    assert "ssh-keygen -R" in warning.command_label.text()
    wait_status(qtbot, panel, "moved", "error")
    assert "CHANGED" in panel.states["moved"].message
    assert "CHANGED" in panel.details_label.text()
    qtbot.mouseClick(warning.close_button, LEFT)
    assert hostkeys.known_keys(h3.address, h3.port)["ssh-ed25519"] == host_key(h2)  # untouched


def test_password_asked_when_needed_and_remembered_on_request(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[2]
    trust(h)
    MachineRegistry().add(machine(ssh_lab, h, name="ask-me", auth="password"))
    panel = make_panel()
    qtbot.mouseClick(panel.refresh_button, LEFT)
    prompt = wait_dialog(qtbot, panel, SecretPrompt)
    assert prompt.kind == "password" and prompt.remember.isEnabled()
    qtbot.mouseClick(prompt, LEFT)
    type_into(qtbot, prompt.edit, ssh_lab.password)
    click_indicator(qtbot, prompt.remember)
    qtbot.mouseClick(prompt.ok_button, LEFT)
    wait_status(qtbot, panel, "ask-me", "ok", "error")
    assert panel.states["ask-me"].status == "ok", panel.states["ask-me"].message
    qtbot.waitUntil(lambda: secrets.get_secret("ask-me", "password") == ssh_lab.password)
    # Cancelling the question ends that machine with a plain message.
    secrets.delete_secrets("ask-me")
    qtbot.mouseClick(panel.refresh_button, LEFT)
    prompt = wait_dialog(qtbot, panel, SecretPrompt)
    prompt.reject()
    wait_status(qtbot, panel, "ask-me", "error")
    assert "No password was given" in panel.states["ask-me"].message


def test_no_keyring_says_so_and_asks_each_time(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    import keyring.backends.fail

    h = ssh_lab.hosts[0]
    trust(h)
    MachineRegistry().add(machine(ssh_lab, h, name="no-store", auth="password"))
    # keyring leaves KeyringBackend.__init__ unannotated (no "-> None"): an untyped call.
    no_backend = keyring.backends.fail.Keyring()  # type: ignore[no-untyped-call]  # keyring's untyped
    with secrets.using_keyring(no_backend):
        panel = make_panel()
        qtbot.waitUntil(lambda: not panel.keyring_ok, timeout=60_000)
        assert "No usable password store" in panel.message_label.text()
        qtbot.mouseClick(panel.add_button, LEFT)
        dialog = panel.dialog
        assert isinstance(dialog, MachineDialog) and not dialog.remember_box.isEnabled()
        dialog.reject()
        qtbot.mouseClick(panel.refresh_button, LEFT)
        prompt = wait_dialog(qtbot, panel, SecretPrompt)
        assert not prompt.remember.isEnabled() and "each time" in str(prompt.error)
        type_into(qtbot, prompt.edit, ssh_lab.password)
        qtbot.mouseClick(prompt.ok_button, LEFT)
        wait_status(qtbot, panel, "no-store", "ok", "error")
        assert panel.states["no-store"].status == "ok", panel.states["no-store"].message


def test_machines_connect_in_parallel_and_the_ui_keeps_running(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    import socket

    trust(*ssh_lab.hosts)
    reg = MachineRegistry()
    for h in ssh_lab.hosts:
        reg.add(machine(ssh_lab, h))
    silent = socket.socket()  # accepts TCP, never speaks SSH: the connect waits its timeout
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    reg.add(machine(ssh_lab, ssh_lab.hosts[0], name="silent", host="127.0.0.1",
                    port=silent.getsockname()[1]))
    panel = make_panel()
    timeout = 10.0  # the default: room for the good hosts to answer on a loaded machine
    panel.flow.timeout = timeout
    gaps: list[float] = []
    last = [time.monotonic()]

    def tick() -> None:
        now = time.monotonic()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(20)
    try:
        t0 = time.monotonic()
        qtbot.mouseClick(panel.refresh_button, LEFT)
        assert {s.status for s in panel.states.values()} == {"connecting"}
        for h in ssh_lab.hosts:
            wait_status(qtbot, panel, h.name, "ok", "error")
        assert panel.states["silent"].status == "connecting"  # the others did not wait for it
        wait_status(qtbot, panel, "silent", "error")
        elapsed = time.monotonic() - t0
    finally:
        timer.stop()
        silent.close()
    assert all(panel.states[h.name].status == "ok" for h in ssh_lab.hosts)
    assert f"did not answer within {timeout:g} s" in panel.states["silent"].message
    assert elapsed < 3 * timeout + 5  # bounded by the timeout, with room for a loaded machine
    # A connect on the UI thread would freeze it for the whole timeout; allow for a busy
    # machine (other processes competing for 2 cores) but not for that.
    assert max(gaps) < timeout / 2, f"the UI thread stalled for {max(gaps):.2f} s"


# -- edit, remove, public key --------------------------------------------------------------------
def test_edit_renames_with_its_secret_and_remove_forgets_both(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    trust(h)
    MachineRegistry().add(machine(ssh_lab, h, name="old-name", auth="password"))
    secrets.set_secret("old-name", "password", ssh_lab.password)
    panel = make_panel()
    select(panel, "old-name")
    qtbot.mouseClick(panel.edit_button, LEFT)
    dialog = panel.dialog
    assert isinstance(dialog, MachineDialog) and dialog.password_radio.isChecked()
    type_into(qtbot, dialog.name_edit, "new-name")
    qtbot.mouseClick(dialog.ok_button, LEFT)
    wait_status(qtbot, panel, "new-name", "ok", "error")
    assert panel.states["new-name"].status == "ok", panel.states["new-name"].message
    assert secrets.get_secret("new-name", "password") == ssh_lab.password
    assert secrets.get_secret("old-name", "password") is None
    select(panel, "new-name")
    qtbot.mouseClick(panel.remove_button, LEFT)
    box = panel.dialog
    assert isinstance(box, QMessageBox)
    qtbot.mouseClick(box.button(QMessageBox.StandardButton.Yes), LEFT)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 0, timeout=60_000)
    assert MachineRegistry().names() == [] and secrets.get_secret("new-name", "password") is None


def test_install_my_public_key_then_sign_in_with_it(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab,
        ssh_env: Path) -> None:
    h = ssh_lab.hosts[1]
    trust(h)
    key = sshhosts.keygen(ssh_env / ".ssh" / "id_ed25519", comment="me@here")
    MachineRegistry().add(machine(ssh_lab, h, name="to-key", auth="password"))
    panel = make_panel()
    select(panel, "to-key")
    qtbot.mouseClick(panel.install_button, LEFT)
    dialog = panel.dialog
    assert isinstance(dialog, InstallKeyDialog)
    assert dialog.public_key() == "~/.ssh/id_ed25519.pub" and dialog.switch_to_key()
    type_into(qtbot, dialog.password_edit, ssh_lab.password)
    qtbot.mouseClick(dialog.ok_button, LEFT)
    qtbot.waitUntil(lambda: MachineRegistry().get("to-key").auth == "key", timeout=SSH_WAIT)
    wait_status(qtbot, panel, "to-key", "ok", "error")
    assert panel.states["to-key"].status == "ok", panel.states["to-key"].message
    assert MachineRegistry().get("to-key").key_file == "~/.ssh/id_ed25519"
    authorized = (ssh_lab.home / ".ssh" / "authorized_keys").read_text()
    assert Path(f"{key}.pub").read_text().strip() in authorized
    assert secrets.get_secret("to-key", "password") is None  # no password kept


# -- the doctor ---------------------------------------------------------------------------------
def test_doctor_on_two_machines_shows_a_reachable_and_a_blocked_port_and_tf(
        qtbot: QtBot, make_panel: Callable[[], MachinesPanel], ssh_lab: sshhosts.SshLab) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    why = netfaults.firewall_unavailable(h3)
    if why:
        pytest.skip(why)
    trust(h2, h3)
    reg = MachineRegistry()
    reg.add(machine(ssh_lab, h2, name="left"))
    reg.add(machine(ssh_lab, h3, name="right"))
    panel = make_panel()
    qtbot.mouseClick(panel.doctor_button, LEFT)
    doctor = panel.dialog
    assert isinstance(doctor, DoctorDialog)
    assert [m.name for m in doctor.chosen()] == ["left", "right"]
    port = 23621
    type_into(qtbot, doctor.port_spin.lineEdit(), str(port))
    with netfaults.firewalled(h3, port), qtbot.waitSignal(doctor.finishedRun, timeout=SSH_WAIT):
        qtbot.mouseClick(doctor.run_button, LEFT)
        assert doctor.progress.isVisible() and not doctor.run_button.isEnabled()
    assert check_of(doctor, "left → right", "Reach").status == FAIL
    assert "firewall of right" in check_of(doctor, "left → right", "Reach").fix
    assert check_of(doctor, "right → left", "Reach").status == OK
    assert check_of(doctor, "left", "Port").status == OK
    facts_left = check_of(doctor, "left", "TensorFlow")
    if "not installed" in facts_left.detail:
        assert facts_left.status == FAIL
        assert facts_left.fix.startswith("pip install tensorflow==2.21.0 on left")
    table = doctor.table
    rows = {(widgets.cell(table, r, 0).text(), widgets.cell(table, r, 1).text()): widgets.cell(table, r, 2).text()
            for r in range(table.rowCount())}
    assert rows[("left → right", f"Reach port {port}")] == "✗ Problem"
    assert rows[("right → left", f"Reach port {port}")] == "✓ OK"
    assert table.rowCount() == len(doctor.checks)
    assert "problem" in doctor.status_label.text()
    doctor.only_problems.setChecked(True)
    assert all(widgets.cell(table, r, 2).text() != "✓ OK" for r in range(table.rowCount()))
    assert netfaults.leftover_listeners(port) == []


# -- the whole story, in the main window ---------------------------------------------------------
def test_two_machines_keys_versions_and_the_doctor_all_by_clicking(
        qtbot: QtBot, ssh_lab: sshhosts.SshLab, ssh_env: Path) -> None:
    """One machine by password, one from ~/.ssh/config, their host keys accepted, their
    versions and GPUs shown, and the doctor run from the toolbar: setting up two machines
    from start to end."""
    from dtgui.ui.main_window import MainWindow

    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    (ssh_env / ".ssh" / "config").write_text(
        f"Host from-config\n  HostName {h3.address}\n  Port {h3.port}\n"
        f"  User {sshhosts.TEST_USER}\n  IdentityFile {ssh_lab.plain_key}\n")
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    panel = window.machines
    record_dialogs(panel)
    qtbot.waitUntil(panel.ready, timeout=60_000)

    qtbot.mouseClick(panel.add_button, LEFT)
    adder = panel.dialog
    assert isinstance(adder, MachineDialog)
    fill_machine(qtbot, adder, "by-password", h2, "password", ssh_lab.password)
    qtbot.mouseClick(adder.ok_button, LEFT)
    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    assert key_dialog.fingerprint_label.text() == h2.fingerprint
    qtbot.mouseClick(key_dialog.trust_button, LEFT)
    wait_status(qtbot, panel, "by-password", "ok", "error")

    qtbot.mouseClick(panel.import_button, LEFT)
    importer = panel.dialog
    assert isinstance(importer, ImportDialog)
    qtbot.waitUntil(lambda: bool(importer.found), timeout=60_000)
    qtbot.mouseClick(importer.ok_button, LEFT)
    key_dialog = wait_dialog(qtbot, panel, HostKeyDialog)
    assert key_dialog.fingerprint_label.text() == h3.fingerprint
    qtbot.mouseClick(key_dialog.trust_button, LEFT)
    wait_status(qtbot, panel, "from-config", "ok", "error")
    for name in ("by-password", "from-config"):
        state = panel.states[name]
        assert state.status == "ok", state.message
        assert state.facts is not None
        assert cell(panel, name, "Python") == state.facts.python_version != ""
        assert cell(panel, name, "GPUs") == ("none" if not state.facts.gpus
                                             else cell(panel, name, "GPUs"))

    qtbot.waitUntil(lambda: window.machine.facts is not None
                    and window.machine.facts.tf is not None,
                    timeout=180_000)  # this machine's TensorFlow, asked in a subprocess
    window.acts.doctor.trigger()
    doctor = wait_dialog(qtbot, panel, DoctorDialog)
    with qtbot.waitSignal(doctor.finishedRun, timeout=SSH_WAIT):
        qtbot.mouseClick(doctor.run_button, LEFT)
    assert check_of(doctor, "by-password → from-config", "Reach").status == OK
    assert check_of(doctor, "from-config → by-password", "Reach").status == OK
    assert window.machine.facts is not None and window.machine.facts.tf is not None
    local_tf = window.machine.facts.tf.version
    for name in ("by-password", "from-config"):
        remote = panel.states[name].facts
        assert remote is not None
        remote_tf = remote.tf_version
        tf = check_of(doctor, name, "TensorFlow")
        if local_tf and remote_tf != local_tf:
            assert tf.status == FAIL and tf.fix.startswith(f"pip install tensorflow=={local_tf}")
        assert check_of(doctor, name, "Python").status in (OK, "warn")
    doctor.close()


def test_the_connection_test_says_its_message_as_it_is(qtbot: QtBot, tmp_path: Path) -> None:
    """Quotes, angle brackets and ampersands of a connection's message show as written (not
    as HTML entities)."""
    from dtgui.core.machines.registry import Machine
    from dtgui.ui.machines.connect_flow import Outcome

    dialog = MachineDialog(MachineRegistry(tmp_path / "machines.toml"), None)
    qtbot.addWidget(dialog)
    message = "the host's key isn't known: <check it> & trust it"
    dialog._tested([Outcome(Machine("a", "10.0.0.1"), error=hostkeys.ConnectError(message))])
    assert dialog.test_label.text() == f"✗ {message}"
    assert dialog.test_label.textFormat() == Qt.TextFormat.PlainText
