"""Which files of a user's project folder go into a bundle: gitignore rules in pure Python.

Always left out: `.git` and other version-control folders, Python caches, virtualenvs (a
folder holding `pyvenv.cfg`), and symbolic links to folders (data that stays on each machine).
Then the patterns of `.dtguiignore`, else `.gitignore`, at the folder's top, with git's rules:
`#` comments, `!` re-includes, a trailing `/` matches folders only, a pattern with a `/`
before its end is anchored at the top (else it matches at any depth), `*` and `?` stop at `/`,
`[a-z]` classes, `**/` (any leading folders), `/**` (everything inside), `/**/` (zero or more
folders), `\\` escapes; the last matching pattern wins, and nothing inside an ignored folder
can be re-included (git does not look inside it either).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

IGNORE_FILES = (".dtguiignore", ".gitignore")
ALWAYS_SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".ipynb_checkpoints", ".tox", ".nox", ".eggs",
})
ALWAYS_SKIPPED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Rule:
    pattern: str
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def _translate(glob: str) -> str:
    """A gitignore glob (no leading/trailing slash handling) to a regex body."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
            continue
        if c == "*":
            if glob.startswith("**", i):
                before = i == 0 or glob[i - 1] == "/"
                after = i + 2 == n or glob[i + 2] == "/"
                if before and after:
                    if i + 2 == n:  # trailing /** : everything inside
                        out.append(".*")
                        i += 2
                    else:  # **/ : zero or more folders
                        out.append("(?:.*/)?")
                        i += 3
                    continue
            out.append("[^/]*")
            i += 1
            while i < n and glob[i] == "*":
                i += 1
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1: i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1: end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_rule(line: str) -> Rule | None:
    """One line of a gitignore file; None for blanks and comments."""
    line = line.rstrip("\n").rstrip("\r")
    stripped = line
    while stripped.endswith(" ") and not stripped.endswith("\\ "):
        stripped = stripped[:-1]
    if not stripped or stripped.startswith("#"):
        return None
    negated = stripped.startswith("!")
    if negated or stripped.startswith("\\!") or stripped.startswith("\\#"):
        stripped = stripped[1:]
    dir_only = stripped.endswith("/") and not stripped.endswith("\\/")
    body = stripped.rstrip("/") if dir_only else stripped
    if not body:
        return None
    anchored = "/" in body
    body = body.lstrip("/")
    regex = _translate(body)
    if not anchored:
        regex = "(?:.*/)?" + regex
    return Rule(line, re.compile(regex + r"\Z", re.DOTALL), negated, dir_only)


def parse_rules(text: str) -> list[Rule]:
    return [r for r in (parse_rule(line) for line in text.splitlines()) if r is not None]


def is_ignored(rules: list[Rule], relpath: str, is_dir: bool) -> bool:
    """Whether the last matching rule ignores `relpath` (posix, relative to the top)."""
    ignored = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.match(relpath):
            ignored = not rule.negated
    return ignored


def read_rules(root: Path) -> tuple[list[Rule], str]:
    """The rules of the first ignore file found at the top of `root`, and its name."""
    for name in IGNORE_FILES:
        path = root / name
        try:
            return parse_rules(path.read_text(encoding="utf-8", errors="replace")), name
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
    return [], ""


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
