"""Fixtures for tests against real SSH hosts and a real keyring backend.

Bind them in a test module: `ssh_lab = conftest_ssh.ssh_lab` (and so on).
The lab is shared by every module that imports it (one start, stopped at exit).
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import remote_python
import sshhosts
from keyrings.alt.file import PlaintextKeyring

from dtgui.core.machines import Machine
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
