"""A machine's own Python (its registered interpreter) is what the probe and the doctor ask.

On the real sshd test hosts the test account's `python3` has no TensorFlow, while the
interpreter from `remote_python.python_for()` (this machine's TensorFlow, reachable by that
account) has it: registered as the machine's Python, the probe, the doctor's checks run on
the machine, and the machines panel and doctor dialog all report that TensorFlow.
"""

from __future__ import annotations

import importlib.metadata

import conftest_ssh
import pytest
import remote_python
import sshhosts
from conftest_ssh import machine, trust
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from dtgui.core.machines.doctor import FAIL, OK, Check, build_checks
from dtgui.core.machines.hardware import MachineFacts, TfView
from dtgui.core.machines.registry import MachineRegistry
from dtgui.remote import doctor_checks
from dtgui.remote.connection import connect
from dtgui.remote.probe import probe

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ssh_env")]
TF = importlib.metadata.version("tensorflow")
LOCAL = MachineFacts(hostname="here", os_name="Linux", python="3.11.7", cpu_model="cpu",
                     cpu_cores=2, ram_total=8 << 30, tf=TfView(version=TF))
SSH_WAIT = 120_000


@pytest.fixture  # not module-scoped: the module's tests spread over the workers
def venv_python(ssh_lab: sshhosts.SshLab) -> str:
    return remote_python.python_for()  # made once a session


def test_probe_and_doctor_checks_run_the_registered_python(
        ssh_lab: sshhosts.SshLab, venv_python: str) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2, h3)
    plain, with_tf = machine(ssh_lab, h2, name="plain"), machine(ssh_lab, h3, name="with-tf",
                                                                   python=venv_python)
    clients = {m.name: connect(m, timeout=60) for m in (plain, with_tf)}
    try:
        facts = {m.name: probe(clients[m.name], m.interpreter) for m in (plain, with_tf)}
        if facts["plain"].tf_installed:
            pytest.skip("the test account's python3 has TensorFlow: nothing to tell apart")
        assert facts["plain"].python_command == "python3"
        assert facts["with-tf"].python_command == facts["with-tf"].python_path == venv_python
        assert facts["with-tf"].tf_version == TF
        assert facts["with-tf"].tf_built_with_cuda is not None
        assert facts["with-tf"].warnings == []

        machines = {"plain": plain, "with-tf": with_tf}
        ports, reach = doctor_checks.run_doctor_checks(clients, machines, 23631, timeout=2.0)
        assert [(p.machine, p.free) for p in ports] == [("plain", True), ("with-tf", True)]
        assert {(r.source, r.target): r.outcome for r in reach} == {
            ("plain", "with-tf"): "ok", ("with-tf", "plain"): "ok"}

        checks = build_checks(LOCAL, facts, 23631, ports, reach)
        by = {(c.machine, c.topic): c for c in checks}
        assert by[("with-tf", "TensorFlow")].status == OK
        assert by[("with-tf", "TensorFlow")].detail == f"TensorFlow {TF}"
        assert by[("plain", "TensorFlow")].status == FAIL
        assert by[("plain", "TensorFlow")].fix.startswith(f"pip install tensorflow=={TF} on plain")

        # The doctor's own scripts run the machine's interpreter too: a missing one is named.
        missing = machine(ssh_lab, h3, name="with-tf", python="/nonexistent/bin/python")
        ports, _ = doctor_checks.run_doctor_checks({"with-tf": clients["with-tf"]},
                                                   {"with-tf": missing}, 23632)
        assert ports[0].free is None
        assert ports[0].detail == "there is no /nonexistent/bin/python on with-tf"
    finally:
        for client in clients.values():
            client.close()


def test_a_hostile_python_field_is_data(ssh_lab: sshhosts.SshLab) -> None:
    h2 = ssh_lab.hosts[0]
    trust(h2)
    odd = "python3; touch pwned $(touch pwned-py) `touch pwned-pb`"
    m = machine(ssh_lab, h2, python=odd)
    client = connect(m, timeout=60)
    try:
        facts = probe(client, m.interpreter)
        assert facts.python_path == "" and facts.python_command == odd
        assert facts.warnings == [f"The Python interpreter {odd!r} was not found there."]
        port = doctor_checks.check_port_free(client, m.name, 23633, python=odd)
        assert port.free is None and odd in port.detail
        outcome, _, detail = doctor_checks.try_connect(client, h2.address, 22, "x", python=odd)
        assert outcome == "untested" and odd in detail
    finally:
        client.close()
    assert not list(ssh_lab.home.glob("pwned*"))


@pytest.mark.gui
def test_panel_and_doctor_dialog_show_the_registered_pythons_tensorflow(
        qtbot: QtBot, ssh_lab: sshhosts.SshLab, venv_python: str) -> None:
    from dtgui.ui.machines.doctor_dialog import DoctorDialog
    from dtgui.ui.machines.panel import COLUMNS, MachinesPanel

    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2, h3)
    registry = MachineRegistry()
    registry.add(machine(ssh_lab, h2, name="plain"))
    registry.add(machine(ssh_lab, h3, name="with-tf", python=venv_python))

    panel = MachinesPanel(local_facts=lambda: LOCAL)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(panel.ready, timeout=60_000)
    panel.refresh(["plain", "with-tf"])
    qtbot.waitUntil(lambda: all(n in panel.states and panel.states[n].status in ("ok", "error")
                                for n in ("plain", "with-tf")), timeout=SSH_WAIT)
    assert panel.states["with-tf"].status == "ok", panel.states["with-tf"].message
    def tf_cell(name: str) -> str:
        item = panel.table.item(panel.row_of(name), COLUMNS.index("TF"))
        assert item is not None
        return item.text()

    assert tf_cell("with-tf") == TF
    plain_facts = panel.states["plain"].facts
    assert plain_facts is not None
    if plain_facts.tf_installed:
        pytest.skip("the test account's python3 has TensorFlow: nothing to tell apart")
    assert tf_cell("plain") == "none"

    doctor = DoctorDialog(registry, LOCAL)
    qtbot.addWidget(doctor)
    doctor.show()
    with qtbot.waitSignal(doctor.finishedRun, timeout=SSH_WAIT):
        qtbot.mouseClick(doctor.run_button, Qt.MouseButton.LeftButton)
    def check(machine: str, topic: str) -> Check:
        found = doctor.status_of(machine, topic)
        assert found is not None, f"no {topic} check of {machine}"
        return found

    assert check("with-tf", "TensorFlow").status == OK
    assert check("with-tf", "Python").detail.endswith(f"({venv_python})")
    assert check("plain", "TensorFlow").status == FAIL
    assert check("with-tf", "Port").status == OK
    assert check("plain → with-tf", "Reach").status == OK
