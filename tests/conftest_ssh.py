"""Fixtures for tests against real SSH hosts and a real keyring backend.

Bind them in a test module: `ssh_lab = conftest_ssh.ssh_lab` (and so on).
The lab is shared by every module that imports it (one start, stopped at exit).
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import remote_python
import sshhosts
from keyrings.alt.file import PlaintextKeyring

from dtgui.core.machines.registry import Machine
from dtgui.remote import hostkeys, secrets

_lab: sshhosts.SshLab | None = None
_lab_error = ""
_lock = threading.Lock()


def _get_lab() -> sshhosts.SshLab:
    global _lab, _lab_error
    with _lock:
        reason = sshhosts.unavailable_reason()
        if reason:
            pytest.skip(reason)
        if _lab_error:
            pytest.fail(_lab_error)
        if _lab is None:
            try:
                _lab = sshhosts.SshLab(3).start()
            except Exception as exc:
                _lab_error = f"the SSH test hosts did not start: {exc}"
                raise
            atexit.register(_lab.stop)
        return _lab


@pytest.fixture(scope="session")
def ssh_lab() -> Iterator[sshhosts.SshLab]:
    lab = _get_lab()
    yield lab
    remote_python.cleanup()  # the test account's Python, made once a session
    with _lock:
        global _lab
        if _lab is not None:
            _lab.stop()
            atexit.unregister(_lab.stop)
            _lab = None


def _lab_python(ssh_lab: sshhosts.SshLab) -> Iterator[str]:
    python = remote_python.python_for()  # made once a session
    yield python
    shutil.rmtree(ssh_lab.home / ".cache" / "dtgui", ignore_errors=True)


@pytest.fixture(scope="module")
def lab_python(ssh_lab: sshhosts.SshLab) -> Iterator[str]:
    """This machine's TensorFlow Python as the test account runs it; the account's dtgui cache
    (uploaded worker packages...) cleared after the module."""
    yield from _lab_python(ssh_lab)


@pytest.fixture(name="lab_python")
def lab_python_each_test(ssh_lab: sshhosts.SshLab) -> Iterator[str]:
    """`lab_python`, the cache cleared after each test (bind it as `lab_python`)."""
    yield from _lab_python(ssh_lab)


@pytest.fixture
def real_keyring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    """keyrings.alt's file backend, its file in this test's temp dir (outside the config dir)."""
    backend = PlaintextKeyring()
    backend.file_path = str(tmp_path / "keyring" / "keyring_pass.cfg")
    with secrets.using_keyring(backend):
        yield backend


@pytest.fixture
def ssh_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_keyring: PlaintextKeyring,
            ssh_lab: sshhosts.SshLab) -> Path:
    """A clean HOME (so the real ~/.ssh is never read), no ssh-agent, a real keyring."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    ssh_lab.reset_home()
    return home


def host_key(host: sshhosts.Host) -> paramiko.PKey:
    kind, blob = host.host_pub.read_text().split()[:2]
    return paramiko.PKey.from_type_string(kind, base64.b64decode(blob))


def trust(*hosts: sshhosts.Host) -> None:
    """Record the hosts' real keys, as a person accepting the fingerprints would."""
    for host in hosts:
        hostkeys.trust_host_key(host.address, host.port, host_key(host))


def machine(lab: sshhosts.SshLab, h: sshhosts.Host, auth: str = "key", **kw: Any) -> Machine:
    """A machine for test host `h`; keyword arguments override any field."""
    key = str(lab.plain_key) if auth == "key" else ""
    return dataclasses.replace(Machine(name=h.name, host=h.address, port=h.port,
                                       user=sshhosts.TEST_USER, auth=auth, key_file=key), **kw)


def copy_and_start(lab: sshhosts.SshLab, host: sshhosts.Host, bundle: Path, folder: str,
                   python: str, machine_name: str) -> subprocess.Popen[str]:
    """`bundle` copied to `folder` of the test account on `host` with scp and started there
    with `bash run.sh MACHINE` over ssh, as a person would by hand (stdout and stderr piped)."""
    opts = ["-o", f"UserKnownHostsFile={hostkeys.app_known_hosts()}", "-o",
            "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-i", str(lab.plain_key)]
    login = f"{sshhosts.TEST_USER}@{host.address}"
    subprocess.run(["ssh", *opts, login, f"rm -rf {folder}"], check=True, timeout=30)
    subprocess.run(["scp", "-q", "-r", *opts, str(bundle), f"{login}:{folder}"], check=True,
                   timeout=60)
    command = f"cd {folder} && PYTHON={python} bash run.sh {machine_name}"
    return subprocess.Popen(["ssh", *opts, login, command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
