"""The kinds of target, found as plugins: the entry-point group `dtgui.targets`.

Each entry point names a kind's registration, a `Kind`: its name, its driver and the optional
hooks of the other layers, each as "module:attribute", loaded only by the layer that uses it
(the launch layer loads drivers, the UI boxes and Machines-panel fields, the command line its
options, `dtgui.core.machines.registry` the settings a registered machine of the kind keeps). The three
built-in kinds (this machine, SSH machines, a Slurm cluster) are registered the same way, in
dtgui's own pyproject.toml.

Pure Python (no Qt, no paramiko, no TensorFlow): every layer may ask it. A plugin that fails
to load, or whose registration lacks a hook, is reported by its entry point's name
(`problems()`: the app shows them at start, the command line writes them to stderr) and the
other kinds keep working.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUP = "dtgui.targets"
# dtgui's own kinds, as its pyproject.toml registers them: loaded from here too when dtgui runs
# from a source tree that is not installed (PYTHONPATH), which has no entry points of its own
BUILT_IN = {"local": "dtgui.kinds.local:TARGET_KIND", "ssh": "dtgui.kinds.ssh:TARGET_KIND",
            "slurm": "dtgui.kinds.slurm:TARGET_KIND"}


@dataclass(frozen=True)
class Kind:
    """One kind of target as a plugin registers it. A hook is "module:attribute" ("" = the
    kind has none)."""

    name: str  # the kind (its driver's `kind`, the records' `kind`)
    driver: str  # a `dtgui.launch.drivers.base.Driver` subclass
    box: str = ""  # its wizard box: a `dtgui.ui.wizard.target_box.TargetBox` subclass
    fields: str = ""  # its Add-machine fields: a `dtgui.ui.machines.kind_fields.KindFields`
    options: str = ""  # its command-line options: a `dtgui.cli.kind_options.KindOptions`
    settings: str = ""  # a registered machine's settings read from machines.toml: a
    # callable (the table as a dict) -> an object with `problems()` and `to_dict()`
    over_ssh: bool = True  # its registered machines are reached over SSH (a login node)
    machine_title: str = ""  # how the Add-machine dialog offers its machines ("" = none)


_kinds: dict[str, Kind] | None = None
_problems: list[str] = []


def _entry_points() -> list[Any]:
    found = list(entry_points(group=GROUP))
    names = {point.name for point in found}
    return found + [EntryPoint(name, value, GROUP) for name, value in BUILT_IN.items()
                    if name not in names]


def _load() -> dict[str, Kind]:
    found: dict[str, Kind] = {}
    for point in sorted(_entry_points(), key=lambda p: p.name):
        try:
            kind = point.load()
        except Exception as exc:  # noqa: BLE001 - any plugin's failure is reported by name
            report_plugin(point.name, f"it failed to load ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(kind, Kind):
            report_plugin(point.name, "it names no target kind (a dtgui.kinds.Kind)")
            continue
        if not kind.name or not kind.driver:
            report_plugin(point.name, "its registration lacks the hook 'driver'")
            continue
        if kind.name in found:
            report_plugin(point.name, f"the kind {kind.name!r} is registered already")
            continue
        found[kind.name] = kind
    return found


def kinds() -> dict[str, Kind]:
    """The registered kinds by name (loaded once)."""
    global _kinds
    if _kinds is None:
        _kinds = _load()
    return _kinds


def report_plugin(plugin: str, why: str) -> None:
    """A plugin that cannot be used, said once (`problems`)."""
    line = f"The target plugin {plugin!r} is not available: {why}."
    if line not in _problems:
        _problems.append(line)


def problems() -> list[str]:
    """Why plugins are not available, one sentence each, by name ([] = all loaded)."""
    kinds()
    return list(_problems)


def load_hook(kind: Kind, hook: str) -> Any:
    """The object a kind's hook names (None when the kind has none, or it failed to load:
    then reported by the kind's name)."""
    spec = getattr(kind, hook)
    if not spec:
        return None
    module, _, attribute = spec.partition(":")
    try:
        found = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as exc:  # noqa: BLE001 - any plugin's failure is reported by name
        report_plugin(kind.name, f"its hook {hook!r} ({spec}) failed to load "
                          f"({type(exc).__name__}: {exc})")
        return None
    return found


def hooks(hook: str) -> dict[str, Any]:
    """Every kind's `hook` that loads, by the kind's name."""
    out = {}
    for name, kind in kinds().items():
        found = load_hook(kind, hook)
        if found is not None:
            out[name] = found
    return out


def kind_reached_over_ssh(name: str) -> bool:
    """Whether a registered machine of this kind is reached over SSH (an unknown kind's is:
    it is kept as it was written)."""
    kind = kinds().get(name)
    return kind is None or kind.over_ssh
