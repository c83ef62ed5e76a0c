"""The runs that hold their machines, wherever their records are.

A run's record may sit outside the runs directory: a bundle started with `dtgui run BUNDLE`
keeps it in the bundle, a sweep's trial in its sweep's folder, a resumed run wherever its
folder is. So that every run holds its machines against the run queue and the wizard however
it was started, each record saved while its run is active is noted in
`<data dir>/live-runs/` (a small file naming its bundle, `RunRecord.save` writes it), and the
note is removed when the record is saved ended. `RunHistory.live()` reads the runs
directory's active records and every noted one still active (a note whose record is gone or
ended is removed as it is read).

Reads and writes small files: not on a UI thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from dtgui.core.settings import atomic_write_text, data_dir

LIVE_DIR = "live-runs"


def live_dir() -> Path:
    return data_dir() / LIVE_DIR


def _note_path(bundle: Path) -> Path:
    key = hashlib.sha256(str(bundle.absolute()).encode()).hexdigest()[:20]
    return live_dir() / f"{key}.json"


def note_bundle(bundle: Path, active: bool) -> None:
    """Note the run of `bundle` as active, or forget it (ended). A note that cannot be
    written leaves the run to the runs directory's reading alone: the run goes on."""
    path = _note_path(bundle)
    with contextlib.suppress(OSError):
        if not active:
            path.unlink(missing_ok=True)
        elif not path.is_file():
            atomic_write_text(path, json.dumps({"bundle": str(bundle.absolute())}) + "\n")


def noted_bundles() -> list[Path]:
    """The bundles of the runs noted active (their records say whether they still are)."""
    found = []
    try:
        notes = sorted(live_dir().glob("*.json"))
    except OSError:
        return []
    for note in notes:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            found.append(Path(str(json.loads(note.read_text(encoding="utf-8"))["bundle"])))
    return found
