"""What the screenshot and benchmark scripts share: this checkout on the path, a sandbox for
the app's files, the event loop run while a widget settles, and a widget saved as a PNG.

A screenshot script imports it as `shots` (its own folder is first on sys.path; a benchmark puts it there). It imports
nothing of dtgui: `sandbox()` has to set the app's folders before dtgui is imported.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Qt is not imported for a benchmark that has no window
    from PySide6.QtWidgets import QApplication, QWidget

    from dtgui.ui.main_window import MainWindow
    from dtgui.ui.pages.sweep_view import SweepView

ROOT = Path(__file__).resolve().parents[2]


def use_checkout(tests: bool = False) -> None:
    """Import dtgui from this checkout (and with `tests`, the test helpers: sshhosts...)."""
    sys.path.insert(0, str(ROOT))
    if tests:
        sys.path.insert(0, str(ROOT / "tests"))


def sandbox() -> Path:
    """A fresh temporary folder for the app's configuration, data and HOME (so the user's
    machines, keys and ~/.ssh are never read), no ssh-agent; the folder."""
    use_checkout(tests=True)
    tmp = Path(tempfile.mkdtemp(prefix="dtgui-shots-"))
    os.environ["DTGUI_CONFIG_DIR"] = str(tmp / "config")
    os.environ["DTGUI_DATA_DIR"] = str(tmp / "data")
    os.environ["HOME"] = str(tmp / "home")
    os.environ.pop("SSH_AUTH_SOCK", None)
    return tmp


def base_env() -> dict[str, str]:
    """The environment a benchmark runs a bundle in: no TF_CONFIG or PYTHONPATH of ours, no
    GPU, TensorFlow quiet, this Python as the bundle's."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable)
    return env


def wait_for(app: QApplication, condition: Callable[[], object], timeout: float) -> bool:
    """Run the event loop until `condition()` is true (True) or `timeout` seconds (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.processEvents()
        if condition():
            return True
        time.sleep(0.02)
    return False


def settle(app: QApplication, seconds: float = 0.0, rounds: int = 5) -> None:
    """Run the event loop `rounds` times at least, and for `seconds` (timers, threads' results)."""
    deadline = time.monotonic() + seconds
    while True:
        for _ in range(rounds):
            app.processEvents()
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def save(app: QApplication, widget: QWidget, path: Path) -> bool:
    """`widget` painted now and saved as `path` (PNG); says where, or that it could not."""
    widget.repaint()
    app.processEvents()
    ok = widget.grab().save(str(path))
    print(f"wrote {path}" if ok else f"could not write {path}", flush=True)
    return ok


def shrink(path: Path) -> None:
    """The PNG in 256 colours, when Pillow is there (TensorFlow's dependencies bring it): a
    screen of flat colours and text loses nothing to see, and the file 60 % of its size."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as image:
        fewer = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                              dither=Image.Dither.NONE)
    fewer.save(path, optimize=True)


def shoot(app: QApplication, widget: QWidget, out: Path, name: str, seconds: float = 0.0,
          rounds: int = 5) -> bool:
    """`widget`, settled (`settle`'s `seconds` and `rounds`), saved as OUT/NAME.png."""
    settle(app, seconds, rounds)
    return save(app, widget, out / f"{name}.png")


def sweep_view(app: QApplication, window: MainWindow, folder: Path) -> SweepView | None:
    """The sweep in `folder` opened in `window`, once its view shows a trial (None: it showed
    none in a minute, said on stderr)."""
    window.open_sweep(folder)
    view = window.sweep_view
    if view is None or not wait_for(app, lambda: view.table.rowCount() > 0, 60):
        print("the sweep view shows no trial", file=sys.stderr)
        return None
    return view


def out_dir(argv: list[str]) -> Path | None:
    """A script's one argument, OUTDIR, made; None after the usage line when it is missing."""
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return None
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    return out


def wait_until(app: QApplication, condition: Callable[[], object], timeout: float = 60.0) -> None:
    """`wait_for`, raising TimeoutError when `condition()` is not true within `timeout`."""
    if not wait_for(app, condition, timeout):
        raise TimeoutError("waited too long")
