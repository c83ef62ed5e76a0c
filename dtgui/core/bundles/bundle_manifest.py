"""What a run's bundle held when the run started: `bundle.sha256`, one line a file in
`sha256sum` format (`sha256sum -c bundle.sha256` checks it by hand), written when the run is
recorded. A resume compares the bundle with it, so a run is never continued with code or a
plan other than those its checkpoints were trained with.

The run's output (`output/`), its record and the manifest itself are not listed, nor
Python's byte-code caches; files added since are not counted as an edit (a script may write
beside itself), files changed or removed are.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dtgui.core.runs.records import RECORD_NAME
from dtgui.core.settings import atomic_write_text
from dtgui.worker.layout import BUNDLE_ARCHIVE, OUTPUT_DIR

MANIFEST_NAME = "bundle.sha256"
_SKIPPED_TOP = {OUTPUT_DIR, RECORD_NAME, MANIFEST_NAME, BUNDLE_ARCHIVE}
_CHUNK = 1 << 20


def _listed(root: Path) -> list[str]:
    """The bundle's files the manifest lists, "/"-separated, sorted."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[0] in _SKIPPED_TOP or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        if path.is_file():
            out.append(rel.as_posix())
    return sorted(out)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(root: Path) -> None:
    """List every file of the bundle at `root` with its SHA-256 (reads every file: not on a
    UI thread)."""
    lines = [f"{_digest(root / rel)}  {rel}\n" for rel in _listed(root)]
    atomic_write_text(root / MANIFEST_NAME, "".join(lines))


def has_manifest(root: Path) -> bool:
    return (root / MANIFEST_NAME).is_file()


def edited_files(root: Path) -> list[str]:
    """The files of the bundle at `root` changed or removed since its manifest was written
    (none when it has no manifest: a run of an older dtgui)."""
    try:
        text = (root / MANIFEST_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    edited = []
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        if not rel:
            continue
        path = root / rel
        try:
            same = _digest(path) == digest
        except OSError:
            same = False
        if not same:
            edited.append(rel)
    return edited
