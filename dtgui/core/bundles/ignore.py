"""Which files of a user's project folder go into a bundle.

Always left out: `.git` and other version-control folders, Python caches, virtualenvs (a
folder holding `pyvenv.cfg`), and symbolic links to folders (data that stays on each machine).
Then the patterns of `.dtguiignore`, else `.gitignore`, at the folder's top, matched with git's
rules by `pathspec`: the last matching pattern wins, and nothing inside an ignored folder can be
re-included (git does not look inside it either, and neither does the walk below).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

IGNORE_FILES = (".dtguiignore", ".gitignore")
ALWAYS_SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".ipynb_checkpoints", ".tox", ".nox", ".eggs",
})
ALWAYS_SKIPPED_SUFFIXES = (".pyc", ".pyo")

Rules = pathspec.GitIgnoreSpec


def _git_line(line: str) -> str:
    """`abc/**` matches everything inside `abc` but, in git, not `abc` itself (so a later
    `!abc/keep` re-includes a file there); pathspec reads it as `abc/`. `abc/**/*` is what git
    means."""
    stripped = line.rstrip()
    if stripped.endswith("/**"):
        return stripped + "/*"
    return line


def parse_rules(text: str) -> Rules:
    """The rules of a gitignore file's text."""
    return pathspec.GitIgnoreSpec.from_lines(_git_line(line) for line in text.splitlines())


def is_ignored(rules: Rules, relpath: str, is_dir: bool) -> bool:
    """Whether the last matching rule ignores `relpath` (posix, relative to the top)."""
    return rules.match_file(relpath + "/" if is_dir else relpath)


def read_rules(root: Path) -> tuple[Rules, str]:
    """The rules of the first ignore file found at the top of `root`, and its name."""
    for name in IGNORE_FILES:
        path = root / name
        try:
            return parse_rules(path.read_text(encoding="utf-8", errors="replace")), name
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
    return parse_rules(""), ""


def is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


@dataclass
class ProjectFiles:
    """The files of a project folder that a bundle holds (posix paths relative to `root`)."""

    root: Path
    files: list[str] = field(default_factory=list)
    total_bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # folders left out, with why
    rules_from: str = ""  # the ignore file used ("" = none)


def list_project(root: Path, max_files: int = 200_000) -> ProjectFiles:
    """Walk `root` applying the rules above. Reads the disk: not on a UI thread."""
    root = Path(root).expanduser().resolve()
    rules, rules_from = read_rules(root)
    result = ProjectFiles(root, rules_from=rules_from)
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        rel_dir = here.relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for name in sorted(dirs):
            rel = prefix + name
            path = here / name
            if name in ALWAYS_SKIPPED_DIRS:
                continue
            if path.is_symlink():
                result.skipped.append(f"{rel}/ (a link to a folder: stays on each machine)")
            elif is_virtualenv(path):
                result.skipped.append(f"{rel}/ (a virtualenv)")
            elif is_ignored(rules, rel, True):
                result.skipped.append(f"{rel}/ ({rules_from})")
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            rel = prefix + name
            if name.endswith(ALWAYS_SKIPPED_SUFFIXES) or is_ignored(rules, rel, False):
                continue
            try:
                size = (here / name).stat().st_size  # follows a file link: its content is copied
            except OSError:
                continue
            result.files.append(rel)
            result.total_bytes += size
            if len(result.files) > max_files:
                raise ValueError(f"{root} holds more than {max_files} files: list what is not "
                                 "code in a .dtguiignore at its top.")
    result.files.sort()
    return result


def copy_project(listing: ProjectFiles, destination: Path) -> None:
    """Copy the listed files (contents of linked files, modes and times kept)."""
    destination.mkdir(parents=True, exist_ok=True)
    for rel in listing.files:
        target = destination / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(listing.root / rel, target)


def human_size(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
