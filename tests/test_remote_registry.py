"""Machine registry (TOML), validation of hostile values, keyring secrets, ssh config parsing.

No SSH server here: see test_remote_ssh.py for real hosts.
"""

from __future__ import annotations

import getpass
from pathlib import Path

import conftest_ssh
import keyring.backends.fail
import pytest
import tomllib
from keyrings.alt.file import PlaintextKeyring

from dtgui.core.machines.registry import (
    SCHEMA,
    Machine,
    MachineError,
    MachineRegistry,
    machines_file,
    parse_jump_spec,
    parse_port,
)
from dtgui.remote import secrets
from dtgui.remote.probe import ProbeAnswer, parse_gpu_csv, read_probe
from dtgui.remote.ssh_config import read_ssh_config

real_keyring = conftest_ssh.real_keyring
HOSTILE = ["; touch pwned", "$(reboot)", "`reboot`", "a b", "'quoted'", '"dq"', "x|y", "a&&b",
           "-oProxyCommand=touch pwned", "\\", "*"]


def test_registry_round_trip_keeps_every_field_and_writes_schema(tmp_path: Path) -> None:
    reg = MachineRegistry()
    a = reg.add(Machine("gpu box", "gpu1.lab.example", 2222, "ann", "key", "~/.ssh/id_ed25519"))
    b = reg.add(Machine("b", "10.0.0.7", 22, "bob", "password", jump_host="gpu box"))
    c = reg.add(Machine("c", "fe80::1", 22, "c_user", "agent", jump_host="me@gw.example:2200"))
    data = tomllib.loads(machines_file().read_text())
    assert data["schema"] == SCHEMA == 1
    assert "password" not in machines_file().read_text().replace('"password"', "")
    again = MachineRegistry()
    assert again.message == ""
    assert again.machines() == [a, b, c]
    assert [p.name for p in machines_file().parent.iterdir()] == ["machines.toml"]  # no temp left


def test_names_are_unique_and_edits_rename_jump_references() -> None:
    reg = MachineRegistry()
    reg.add(Machine("gw", "gw.example", user="u"))
    reg.add(Machine("inner", "10.1.1.1", user="u", jump_host="gw"))
    with pytest.raises(MachineError, match="already exists"):
        reg.add(Machine("GW", "x.example", user="u"))
    reg.update("gw", Machine("gateway", "gw.example", user="u"))
    assert MachineRegistry().get("inner").jump_host == "gateway"
    with pytest.raises(MachineError, match="jump host of inner"):
        reg.remove("gateway")
    with pytest.raises(MachineError, match="neither a registered machine"):
        reg.add(Machine("x", "10.1.1.2", user="u", jump_host="; touch pwned"))
    reg.remove("inner")
    reg.remove("gateway")
    assert MachineRegistry().machines() == []


def test_corrupt_file_is_kept_as_backup_and_the_app_goes_on() -> None:
    path = machines_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("schema = 1\n[[machines]\nname = 'oops")
    reg = MachineRegistry()
    assert reg.machines() == []
    assert "damaged" in reg.message and "corrupt-" in reg.message
    backups = list(path.parent.glob("machines.toml.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text().startswith("schema = 1")
    reg.add(Machine("m", "m.example", user="u"))  # a fresh file works again
    assert MachineRegistry().names() == ["m"]


def test_bad_entries_are_skipped_with_a_message() -> None:
    path = machines_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        'schema = 1\n[[machines]]\nname = "ok"\nhost = "ok.example"\nuser = "u"\n'
        '[[machines]]\nname = "bad"\nhost = "; touch pwned"\nuser = "u"\n'
    )
    reg = MachineRegistry()
    assert reg.names() == ["ok"]
    assert "entry 2 was skipped" in reg.message and "not a host name" in reg.message


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_host_and_user_are_refused_in_plain_words(value: str) -> None:
    with pytest.raises(MachineError, match="host"):
        Machine("m", value, user="u").validate()
    with pytest.raises(MachineError, match="user name"):
        Machine("m", "h.example", user=value).validate()


@pytest.mark.parametrize("port", [0, 65536, -1, "22; reboot", "22", 22.5, True])
def test_bad_ports_are_refused(port: object) -> None:
    with pytest.raises(MachineError, match="port"):
        # a hostile value of any type, as a hand-edited machines.toml can hold
        Machine("m", "h.example", port=port, user="u").validate()  # type: ignore[arg-type]  # on purpose


def test_parse_port_and_jump_spec() -> None:
    assert parse_port(" 2222 ") == 2222
    with pytest.raises(MachineError):
        parse_port("$(reboot)")
    assert parse_jump_spec("me@gw.example:2200") == ("me", "gw.example", 2200)
    assert parse_jump_spec("gw.example") == ("", "gw.example", 22)
    assert parse_jump_spec("[fe80::1]:22") == ("", "fe80::1", 22)
    for spec in HOSTILE:
        assert parse_jump_spec(spec) is None  # treated as a machine name, never as an address


def test_hostile_free_text_fields_are_stored_verbatim() -> None:
    reg = MachineRegistry()
    for i, value in enumerate(HOSTILE):
        reg.add(Machine(f"{value} #{i}", "h.example", 22, "u", "key", f"/keys/{value}"))
    reg.add(Machine("hopper", "h2.example", user="u", jump_host=f"{HOSTILE[0]} #0"))
    again = MachineRegistry()
    assert again.message == ""
    assert [m.name for m in again.machines()][:-1] == [f"{v} #{i}" for i, v in enumerate(HOSTILE)]
    assert again.get("hopper").jump_host == "; touch pwned #0"
    assert again.get("$(reboot) #1").key_file == "/keys/$(reboot)"


def test_newline_in_name_and_missing_key_file_are_refused() -> None:
    with pytest.raises(MachineError, match="one line"):
        Machine("a\nb", "h.example", user="u").validate()
    with pytest.raises(MachineError, match="private key file"):
        Machine("a", "h.example", user="u", auth="key").validate()
    with pytest.raises(MachineError, match="sign-in method"):
        Machine("a", "h.example", user="u", auth="telnet").validate()


# -- secrets (real keyring backends) ----------------------------------------------------------
def test_secrets_live_in_the_keyring_and_go_with_the_machine(
        real_keyring: PlaintextKeyring) -> None:
    reg = MachineRegistry()
    reg.add(Machine("m; $(x)", "h.example", user="u", auth="password"))
    secrets.set_secret("m; $(x)", "password", "pw-AAA")
    secrets.set_secret("m; $(x)", "passphrase", "pp-BBB")
    assert real_keyring.get_password("dtgui", "password:m; $(x)") == "pw-AAA"
    assert "pw-AAA" not in machines_file().read_text()
    _, msg = secrets.update_machine(reg, "m; $(x)", Machine("renamed", "h.example", user="u",
                                                            auth="password"))
    assert msg == ""
    assert secrets.get_secret("renamed", "password") == "pw-AAA"
    assert secrets.get_secret("m; $(x)", "password") is None
    assert secrets.get_secret("renamed", "passphrase") is None  # not a key machine: forgotten
    machine, msg = secrets.remove_machine(reg, "renamed")
    assert msg == "" and machine.name == "renamed"
    assert secrets.get_secret("renamed", "password") is None
    assert "pw-AAA" not in Path(real_keyring.file_path).read_text()


def test_no_keyring_backend_gives_a_plain_message_not_a_crash() -> None:
    # keyring leaves KeyringBackend.__init__ unannotated (no "-> None"): an untyped call.
    no_backend = keyring.backends.fail.Keyring()  # type: ignore[no-untyped-call]  # keyring's untyped
    with secrets.using_keyring(no_backend):
        assert not secrets.available()
        with pytest.raises(secrets.KeyringUnavailable, match="ask for passwords"):
            secrets.get_secret("m", "password")
        with pytest.raises(secrets.KeyringUnavailable):
            secrets.set_secret("m", "password", "x")
        reg = MachineRegistry()
        reg.add(Machine("m", "h.example", user="u"))
        machine, msg = secrets.remove_machine(reg, "m")
        assert machine.name == "m" and "each time" in msg
        assert "each time" in secrets.storage_note()


# -- parsers ----------------------------------------------------------------------------------
def test_gpu_csv_and_probe_output_parse_robustly() -> None:
    rows = ["NVIDIA A100-SXM4-40GB, 40960, 1024, 37, 535.104.05",
            "Tesla T4, 15360, [N/A], [Not Supported], 535.104.05", "garbage", ""]
    gpus = parse_gpu_csv(rows)
    assert [g.name for g in gpus] == ["NVIDIA A100-SXM4-40GB", "Tesla T4"]
    assert gpus[0].mem_total == 40960 * 2**20 and gpus[0].util == 37.0
    assert gpus[1].mem_used == 0 and gpus[1].driver == "535.104.05"
    answer = ProbeAnswer({"python": "3.11.2", "executable": "/usr/bin/python3",
                          "system": {"hostname": "box", "kernel": "Linux 6.1.0", "arch": "x86_64",
                                     "cpu_cores": 8, "ram_total": 16318480 * 1024},
                          "gpus": {"source": "nvidia-smi", "rc": "0", "compute_cap": False,
                                   "rows": ["NVIDIA GeForce RTX 3090, 24576, 10, 5, 550.54"],
                                   "header": ["| NVIDIA-SMI 550.54   Driver Version: 550.54   "
                                              "CUDA Version: 12.4     |"]}})
    tf = ProbeAnswer({"tensorflow": {"tensorflow": None, "not_installed": True,
                                     "error": "ModuleNotFoundError: No module named 'tensorflow'"}})
    facts = read_probe("python3", answer, tf)
    assert (facts.cpu_cores, facts.ram_total) == (8, 16318480 * 1024)
    assert facts.tf_version == "not installed" and facts.cuda_version == "12.4"
    assert facts.gpus[0].name == "NVIDIA GeForce RTX 3090" and facts.driver == "550.54"
    # no answer at all: warnings, no exception
    assert read_probe("python3", ProbeAnswer(None, 1, "Segmentation fault")).warnings


def test_ssh_config_import(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        "Host *\n  ServerAliveInterval 30\n"
        "Host alpha\n  HostName 10.9.8.7\n  Port 2201\n  User ann\n  IdentityFile ~/.ssh/id_a\n"
        "Host beta beta2\n  HostName beta.example\n  ProxyJump alpha\n"
        "Host *.corp !evil.corp\n  User corp\n"
        "Host gamma\n  HostName gamma.example\n  ProxyCommand nc %h %p\n"
        "Host delta\n  HostName ;touch pwned\n"
    )
    machines, problems = read_ssh_config(cfg)
    by = {m.name: m for m in machines}
    assert list(by) == ["alpha", "beta", "beta2"]
    assert (by["alpha"].host, by["alpha"].port, by["alpha"].user) == ("10.9.8.7", 2201, "ann")
    assert by["alpha"].auth == "key" and by["alpha"].key_file == "~/.ssh/id_a"
    assert by["beta"].jump_host == "alpha" and by["beta"].auth == "agent"
    assert by["beta"].user == getpass.getuser()
    assert any("gamma" in p and "ProxyCommand" in p for p in problems)
    assert any("delta" in p and "host" in p for p in problems)
    assert read_ssh_config(tmp_path / "missing")[1]


def test_jump_host_loops_are_refused() -> None:
    reg = MachineRegistry()
    reg.add(Machine("a", "a.example", user="u"))
    reg.add(Machine("b", "b.example", user="u", jump_host="a"))
    reg.add(Machine("c", "c.example", user="u", jump_host="b"))
    with pytest.raises(MachineError, match="loop"):
        reg.update("a", Machine("a", "a.example", user="u", jump_host="c"))
    with pytest.raises(MachineError, match="loop"):
        reg.update("a", Machine("a2", "a.example", user="u", jump_host="b"))
    with pytest.raises(MachineError, match="own jump host"):
        reg.update("a", Machine("a", "a.example", user="u", jump_host="A "))
    reg.update("a", Machine("a", "a.example", user="u", jump_host="me@gw.example"))
    assert MachineRegistry().get("a").jump_host == "me@gw.example"
