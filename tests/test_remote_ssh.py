"""Connecting, host keys, probing and key installation against real sshd hosts.

The hosts run in network namespaces (or on 127.0.0.x); see tests/sshhosts.py. Secrets go
through keyrings.alt's real file backend. Nothing here is mocked.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import conftest_ssh
import pytest
import sshhosts
from conftest_ssh import host_key, machine, trust
from keyrings.alt.file import PlaintextKeyring

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.settings import config_dir
from dtgui.remote import connection as conn
from dtgui.remote import hostkeys, secrets
from dtgui.remote.connector import Connector
from dtgui.remote.probe import probe
from dtgui.remote.ssh_config import read_ssh_config

# Fixtures shared with other modules (see tests/conftest_ssh.py).
ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
pytestmark = pytest.mark.usefixtures("ssh_env")

# The connect timeout of connections that must succeed, or fail for another reason than time:
# the test hosts' sshd and key exchange, on a machine whose cores other work keeps busy, may
# take seconds (the tests of the timeout itself give their own).
CONNECT = 60.0

H_ECHO = ["; touch pwned", "$(touch pwned-subst)", "`touch pwned-bt`", "a b", "'", '"', "\\",
          "*", "$HOME", "x|touch pwned-pipe", "a\nb", "-n"]


def _pwned(lab: sshhosts.SshLab) -> list[Path]:
    places = [lab.home, Path("/tmp"), Path.cwd(), config_dir(), lab.dir, Path.home()]
    return [p for d in places if d.is_dir() for p in d.glob("pwned*")]


# -- host keys ----------------------------------------------------------------------------------
def test_unknown_key_shows_ssh_keygen_fingerprint_then_trust_and_connect(
        ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    m = machine(ssh_lab, h)
    with pytest.raises(conn.UnknownHostKeyError) as info:
        conn.connect(m, timeout=CONNECT)
    exc = info.value
    assert exc.fingerprint == h.fingerprint  # == ssh-keygen -lf <host key>.pub
    assert (exc.host, exc.port, exc.key_type) == (h.address, h.port, "ssh-ed25519")
    assert h.fingerprint in str(exc)
    assert exc.key is not None
    assert hostkeys.fingerprint_sha256(exc.key) == h.fingerprint  # the key the server offered
    assert not hostkeys.app_known_hosts().exists()  # nothing trusted by looking
    hostkeys.trust_host_key(exc.host, exc.port, exc.key)
    name = hostkeys.host_key_name(h.address, h.port)
    found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(hostkeys.app_known_hosts())],
                           capture_output=True, text=True)
    assert found.returncode == 0, "OpenSSH cannot read the app's known_hosts"
    client = conn.connect(m, timeout=CONNECT)
    try:
        assert conn.run(client, ["whoami"], 10) == (0, f"{sshhosts.TEST_USER}\n", "")
    finally:
        client.close()


def test_changed_key_is_refused_with_a_warning_and_never_replaced_silently(
        ssh_lab: sshhosts.SshLab) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    hostkeys.trust_host_key(h3.address, h3.port, host_key(h2))  # the "old" key on record
    with pytest.raises(conn.ChangedHostKeyError) as info:
        conn.connect(machine(ssh_lab, h3), timeout=CONNECT)
    text = str(info.value)
    assert "CHANGED" in text and "man-in-the-middle" in text and "ssh-keygen -R" in text
    assert info.value.fingerprint == h3.fingerprint
    assert info.value.expected_fingerprint == h2.fingerprint
    with pytest.raises(conn.ChangedHostKeyError):
        hostkeys.trust_host_key(h3.address, h3.port, host_key(h3))
    with pytest.raises(conn.ChangedHostKeyError):
        conn.connect(machine(ssh_lab, h3), timeout=CONNECT)  # still refused
    hostkeys.trust_host_key(h3.address, h3.port, host_key(h3), replace=True)  # deliberate
    conn.connect(machine(ssh_lab, h3), timeout=CONNECT).close()


def test_user_known_hosts_is_honoured_hashed_too(ssh_lab: sshhosts.SshLab, ssh_env: Path) -> None:
    h = ssh_lab.hosts[0]
    kh = ssh_env / ".ssh" / "known_hosts"
    name = hostkeys.host_key_name(h.address, h.port)
    kh.write_text(f"{name} {' '.join(h.host_pub.read_text().split()[:2])}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert name not in kh.read_text()  # hashed now
    conn.connect(machine(ssh_lab, h), timeout=CONNECT).close()
    assert not hostkeys.app_known_hosts().exists()


# -- authentication -----------------------------------------------------------------------------
def test_password_login_through_the_keyring_and_wrong_password(ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    trust(h)
    m = machine(ssh_lab, h, auth="password")
    with pytest.raises(conn.SecretRequired) as info:
        conn.connect(m, timeout=CONNECT)
    assert info.value.kind == "password"
    secrets.set_secret(m.name, "password", ssh_lab.password)
    conn.connect(m, timeout=CONNECT).close()
    t0 = time.monotonic()
    with pytest.raises(conn.WrongPassword, match=r"password .* was not accepted"):
        conn.connect(m, password="not-" + ssh_lab.password, timeout=CONNECT)
    assert time.monotonic() - t0 < CONNECT / 2  # the server's answer, not the timeout waited out


def test_passphrase_protected_key(ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[1]
    trust(h)
    m = machine(ssh_lab, h, auth="key", key_file=str(ssh_lab.pass_key))
    with pytest.raises(conn.SecretRequired) as info:
        conn.connect(m, timeout=CONNECT)
    assert info.value.kind == "passphrase"
    with pytest.raises(conn.WrongPassphrase, match=r"passphrase .* is wrong"):
        conn.connect(m, passphrase="wrong", timeout=CONNECT)
    conn.connect(m, passphrase=ssh_lab.passphrase, timeout=CONNECT).close()
    secrets.set_secret(m.name, "passphrase", ssh_lab.passphrase)
    conn.connect(m, timeout=CONNECT).close()
    secrets.set_secret(m.name, "passphrase", "stale")
    with pytest.raises(conn.WrongPassphrase, match="remembered passphrase"):
        conn.connect(m, timeout=CONNECT)


def test_key_refused_and_missing_key_file(ssh_lab: sshhosts.SshLab, tmp_path: Path) -> None:
    h = ssh_lab.hosts[0]
    trust(h)
    stranger = sshhosts.keygen(tmp_path / "stranger")
    with pytest.raises(conn.KeyRefused, match="did not accept the key"):
        conn.connect(machine(ssh_lab, h, key_file=str(stranger)), timeout=CONNECT)
    with pytest.raises(conn.KeyFileError, match="does not exist"):
        conn.connect(machine(ssh_lab, h, key_file=str(tmp_path / "nope")), timeout=CONNECT)


def test_ssh_agent_login_and_missing_agent(
        ssh_lab: sshhosts.SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = ssh_lab.hosts[2]
    trust(h)
    m = machine(ssh_lab, h, auth="agent")
    with pytest.raises(conn.AgentUnavailable, match="not running"):
        conn.connect(m, timeout=CONNECT)
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.01)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", str(ssh_lab.plain_key)], env=env, check=True,
                       capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        conn.connect(m, timeout=CONNECT).close()
    finally:
        agent.terminate()
        agent.wait(5)


def test_no_keyring_means_ask_each_time(ssh_lab: sshhosts.SshLab) -> None:
    import keyring.backends.fail

    h = ssh_lab.hosts[0]
    trust(h)
    m = machine(ssh_lab, h, auth="password")
    # keyring leaves KeyringBackend.__init__ unannotated (no "-> None"): an untyped call.
    no_backend = keyring.backends.fail.Keyring()  # type: ignore[no-untyped-call]  # keyring's untyped
    with secrets.using_keyring(no_backend):
        with pytest.raises(conn.SecretRequired, match="each time") as info:
            conn.connect(m, timeout=CONNECT)
        assert info.value.kind == "password"
        conn.connect(m, password=ssh_lab.password, timeout=CONNECT).close()


# -- network failures in plain words, within the timeout ------------------------------------
def _fails_within(m: Machine, timeout: float,
                  kinds: type[conn.ConnectError] | tuple[type[conn.ConnectError], ...]
                  ) -> conn.ConnectError:
    t0 = time.monotonic()
    with pytest.raises(kinds) as info:
        conn.connect(m, password="x", timeout=timeout)
    # bounded by the timeout (room for a loaded machine, never for a connect that hangs)
    assert time.monotonic() - t0 < 3 * timeout + 5
    assert str(info.value) and "Traceback" not in str(info.value)
    return info.value


def test_unreachable_refused_unresolved_and_silent_hosts(ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[0]
    gone = machine(ssh_lab, h, host=ssh_lab.unused_address, auth="password")
    err = _fails_within(gone, 4, (conn.HostUnreachable, conn.ConnectTimeout))
    assert ssh_lab.unused_address in str(err)
    closed = machine(ssh_lab, h, port=h.port + 1, auth="password")
    err = _fails_within(closed, 4, conn.ConnectionRefused)
    assert "refused" in str(err) and "no SSH server" in str(err)
    nowhere = machine(ssh_lab, h, host="no-such-host.invalid", auth="password")
    err = _fails_within(nowhere, 4, conn.NameNotResolved)
    assert "no-such-host.invalid" in str(err) and "not found" in str(err)
    with socket.socket() as silent:  # accepts TCP, never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        err = _fails_within(machine(ssh_lab, h, host="127.0.0.1", port=port, auth="password"),
                            1.5, conn.ConnectTimeout)
    assert "did not answer within 1.5 s" in str(err)


def test_connecting_to_many_machines_in_parallel(ssh_lab: sshhosts.SshLab,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    trust(*ssh_lab.hosts)
    good = [machine(ssh_lab, h) for h in ssh_lab.hosts]
    bad = [machine(ssh_lab, ssh_lab.hosts[0], name="gone", host=ssh_lab.unused_address),
           machine(ssh_lab, ssh_lab.hosts[0], name="typo", host="no-such-host.invalid"),
           machine(ssh_lab, ssh_lab.hosts[1], name="wrongpw", auth="password")]
    took: list[float] = []  # each connection's own time (the real connect, timed)
    real_connect = conn.connect

    def timed_connect(m: Machine, **kwargs: Any) -> conn.SSHClient:
        start = time.monotonic()
        try:
            return real_connect(m, **kwargs)
        finally:
            took.append(time.monotonic() - start)

    monkeypatch.setattr(conn, "connect", timed_connect)
    t0 = time.monotonic()
    # long enough for the good hosts on a loaded machine; "gone" may wait it out
    connector = Connector({"wrongpw": {"password": "nope"}}, timeout=10)
    found = connector.connect_all(good + bad)
    elapsed = time.monotonic() - t0
    assert len(found) == len(good + bad)
    results = {m.name: r for m, r in zip(good + bad, found, strict=True)}
    try:
        assert all(not isinstance(results[m.name], Exception) for m in good), results
        assert isinstance(results["gone"], (conn.HostUnreachable, conn.ConnectTimeout))
        assert isinstance(results["typo"], conn.NameNotResolved)
        assert isinstance(results["wrongpw"], conn.WrongPassword)
        # in parallel: the slowest, not the sum (measured here, as load slows every one);
        # one after another would take the sum at least
        assert len(took) == len(good + bad)
        assert elapsed < max(took) + 0.5 * (sum(took) - max(took)), (elapsed, took)
    finally:
        for r in results.values():
            if not isinstance(r, Exception):
                r.close()


def test_jump_host_by_name_and_by_address(ssh_lab: sshhosts.SshLab) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2)
    reg = MachineRegistry()
    reg.add(machine(ssh_lab, h2, name="gw"))
    inner = machine(ssh_lab, h3, name="inner", jump_host="gw")
    reg.add(inner)
    with pytest.raises(conn.UnknownHostKeyError) as info:  # the target's key, via the jump
        conn.connect(inner, registry=reg, timeout=CONNECT)
    assert info.value.fingerprint == h3.fingerprint and info.value.machine == "inner"
    trust(h3)
    client = conn.connect(inner, registry=reg, timeout=CONNECT)
    code, out, _ = conn.run(client, ["sh", "-c", "echo $SSH_CONNECTION"], 10)
    client.close()
    assert code == 0 and out.split()[2] == h3.address
    spec = f"{sshhosts.TEST_USER}@{h2.address}:{h2.port}"
    conn.connect(machine(ssh_lab, h3, jump_host=spec), timeout=CONNECT).close()
    # An address as jump host signs in like the target, with the target's remembered secret.
    by_pw = machine(ssh_lab, h3, name="pw-inner", auth="password", jump_host=spec)
    secrets.set_secret(by_pw.name, "password", ssh_lab.password)
    client = conn.connect(by_pw, timeout=CONNECT)
    assert client.jump is not None
    jump_transport = client.jump.get_transport()
    assert jump_transport is not None and jump_transport.is_active()
    client.close()
    assert not client.jump.get_transport()  # closing the client closes its jump connection
    # A registered jump host with its own sign-in: its secret is asked for on its own.
    reg.add(machine(ssh_lab, h2, name="pw-gw", auth="password"))
    inner2 = machine(ssh_lab, h3, name="inner2", jump_host="pw-gw")
    with pytest.raises(conn.SecretRequired) as asked:
        conn.connect(inner2, registry=reg, timeout=CONNECT)
    assert asked.value.machine == "pw-gw" and str(asked.value).startswith("Jump host pw-gw:")
    conn.connect(inner2, registry=reg, jump_password=ssh_lab.password, timeout=CONNECT).close()


# -- commands, probe, key install, hostile values --------------------------------------------
def test_probe_reports_the_truth(ssh_lab: sshhosts.SshLab) -> None:
    h = ssh_lab.hosts[2]
    trust(h)
    client = conn.connect(machine(ssh_lab, h), timeout=CONNECT)
    try:
        facts = probe(client)
    finally:
        client.close()
    assert facts.warnings == []
    assert Path(facts.python_path).is_file()  # the hosts share this machine's files
    want = subprocess.run([facts.python_path, "-c", "import platform;print(platform.python_version())"],
                          capture_output=True, text=True).stdout.strip()
    assert facts.python_version == want
    tf = subprocess.run([facts.python_path, "-c", "import tensorflow as tf;print(tf.__version__)"],
                        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert facts.tf_version == (tf.stdout.strip().splitlines()[-1] if tf.returncode == 0 else "not installed")
    assert facts.cpu_cores == len(os.sched_getaffinity(0))
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0]
    assert facts.ram_total == int(meminfo.split()[1]) * 1024
    assert facts.os_name and facts.kernel.startswith("Linux")
    if not any(Path(p, "nvidia-smi").exists() for p in os.environ["PATH"].split(":")):
        assert facts.gpus == [] and "not found" in facts.gpu_error
    assert facts.as_machine_facts().cpu_cores == facts.cpu_cores


def test_a_command_that_ends_before_reading_its_input_gives_its_exit_code(
        ssh_lab: sshhosts.SshLab) -> None:
    """Its channel closes while its input is being sent (a Python not found there, say):
    that is the command's answer, not a lost connection, and the connection goes on."""
    from dtgui.remote.commands import run_bytes

    h = ssh_lab.hosts[0]
    trust(h)
    client = conn.connect(machine(ssh_lab, h), timeout=CONNECT)
    try:
        for _ in range(3):  # more input than the channel's window: the writer waits on it
            code, out, err = run_bytes(client, ["sh", "-c", "echo gone >&2; exit 3"], 20,
                                       stdin=b"x" * (16 << 20))
            assert (code, out, err) == (3, b"", b"gone\n")
        assert run_bytes(client, ["echo", "still here"], 20) == (0, b"still here\n", b"")
    finally:
        client.close()


def test_install_public_key_then_key_login(ssh_lab: sshhosts.SshLab, tmp_path: Path) -> None:
    h = ssh_lab.hosts[1]
    trust(h)
    key = sshhosts.keygen(tmp_path / "mine", comment="me; touch pwned $(touch pwned-c) 'x\"")
    m = machine(ssh_lab, h, auth="password")
    assert conn.install_public_key(m, ssh_lab.password, f"{key}.pub", timeout=CONNECT) is True
    assert conn.install_public_key(m, ssh_lab.password, f"{key}.pub", timeout=CONNECT) is False
    auth = ssh_lab.home / ".ssh" / "authorized_keys"
    assert auth.read_text().count(Path(f"{key}.pub").read_text().strip()) == 1
    assert oct(auth.stat().st_mode & 0o777) == "0o600"
    assert oct(auth.parent.stat().st_mode & 0o777) == "0o700"
    conn.connect(machine(ssh_lab, h, auth="key", key_file=str(key)), timeout=CONNECT).close()
    with pytest.raises(conn.WrongPassword):
        conn.install_public_key(m, "wrong", f"{key}.pub", timeout=CONNECT)
    assert _pwned(ssh_lab) == []


def test_hostile_values_in_every_field_execute_nothing(
        ssh_lab: sshhosts.SshLab, tmp_path: Path) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2, h3)
    odd = tmp_path / "k; touch pwned $(touch pwned-k) `touch pwned-kb` 'q\" x"
    odd.write_bytes(ssh_lab.plain_key.read_bytes())
    odd.chmod(0o600)
    reg = MachineRegistry()
    gw = reg.add(machine(ssh_lab, h2, name="; touch pwned $(touch pwned-n)", key_file=str(odd)))
    inner = reg.add(machine(ssh_lab, h3, name="`touch pwned-i` 'x\"", key_file=str(odd),
                            jump_host=gw.name))
    assert MachineRegistry().machines() == [gw, inner]
    for value in ("; touch pwned", "$(touch pwned-h)", "a b", "'x'"):
        for field in ("host", "user"):
            with pytest.raises(conn.InvalidMachine):
                conn.connect(machine(ssh_lab, h2, **{field: value}), timeout=CONNECT)
    with pytest.raises(conn.InvalidMachine):
        conn.connect(machine(ssh_lab, h2, port="22; touch pwned"), timeout=CONNECT)
    with pytest.raises(conn.InvalidMachine, match="neither a registered machine"):
        conn.connect(machine(ssh_lab, h2, jump_host="$(touch pwned-j)"), registry=reg, timeout=CONNECT)
    for m in (gw, inner):
        client = conn.connect(m, registry=reg, timeout=CONNECT)
        try:
            code, out, err = conn.run(client, ["printf", "%s\\0", *H_ECHO], 10)
            assert (code, err) == (0, "") and out.split("\0")[:-1] == H_ECHO
            assert probe(client).python_version
        finally:
            client.close()
    with pytest.raises(TypeError):
        conn.run(client, "echo hi; touch pwned", 5)  # a str is a Sequence[str] to mypy
    time.sleep(0.2)
    assert _pwned(ssh_lab) == []


def test_imported_ssh_config_connects_through_its_jump_host(
        ssh_lab: sshhosts.SshLab, tmp_path: Path) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2, h3)
    cfg = tmp_path / "config"
    cfg.write_text(
        f"Host lab-gw\n  HostName {h2.address}\n  Port {h2.port}\n  User {sshhosts.TEST_USER}\n"
        f"  IdentityFile {ssh_lab.plain_key}\n"
        f"Host lab-inner\n  HostName {h3.address}\n  Port {h3.port}\n"
        f"  User {sshhosts.TEST_USER}\n  IdentityFile {ssh_lab.plain_key}\n  ProxyJump lab-gw\n"
        "Host *\n  ServerAliveInterval 20\n"
    )
    machines, problems = read_ssh_config(cfg)
    assert problems == [] and [m.name for m in machines] == ["lab-gw", "lab-inner"]
    reg = MachineRegistry()
    for m in machines:
        reg.add(m)
    client = conn.connect(reg.get("lab-inner"), registry=reg, timeout=CONNECT)
    client.close()


# -- secrets never leak -------------------------------------------------------------------
def _readable(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_password_appears_in_no_file_log_command_line_or_environment(
    ssh_lab: sshhosts.SshLab, real_keyring: PlaintextKeyring, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str]
) -> None:
    h = ssh_lab.hosts[2]
    trust(h)
    secret = ssh_lab.password.encode()  # made up for this session, known only to the keyring
    caplog.set_level(logging.DEBUG)
    reg = MachineRegistry()
    m = reg.add(machine(ssh_lab, h, name="leaky", auth="password"))
    secrets.set_secret(m.name, "password", ssh_lab.password)
    client = conn.connect(m, timeout=CONNECT)
    seen: list[str] = []

    def scan() -> None:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                for part in ("cmdline", "environ"):
                    if secret in _readable(proc / part):
                        seen.append(f"{proc.name}/{part}")

    try:
        transport = client.get_transport()
        assert transport is not None
        chan = transport.open_session()
        chan.exec_command("sleep 2")  # a live remote process while we look
        time.sleep(0.3)
        scan()
        code, env, _ = conn.run(client, ["env"], 10)
        assert code == 0 and "SSH_CONNECTION" in env and secret.decode() not in env
        facts = probe(client)
        assert facts.python_version
        chan.close()
    finally:
        client.close()
    secrets.remove_machine(reg, m.name)
    assert seen == []
    files = [p for p in config_dir().rglob("*") if p.is_file()]
    assert files and all(secret not in p.read_bytes() for p in files)
    assert all(secret not in _readable(host.log) for host in ssh_lab.hosts)
    assert any(r.name.startswith("paramiko") for r in caplog.records)  # debug logs were on
    assert any(r.name.startswith("dtgui") for r in caplog.records)
    assert secret.decode() not in caplog.text
    out, err = capfd.readouterr()
    assert secret.decode() not in out + err
    assert secret not in _readable(Path(real_keyring.file_path))  # removed with the machine
