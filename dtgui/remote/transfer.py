"""Copying files to and from a connected machine: one archive, or directory trees, over SFTP.

Byte-exact remote commands are in `dtgui.remote.commands` (`run_bytes`). Every call blocks:
use a background thread.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import paramiko

from dtgui.remote.commands import run_bytes
from dtgui.remote.hostkeys import ConnectError

CopyProgress = Callable[[int, int], None]  # (bytes copied, bytes in all)


def local_files(root: Path, skip: Iterable[str] = ()) -> list[tuple[str, Path]]:
    """(relative posix path, file) of every regular file under root, minus `skip` (relative
    paths of files or directories), sorted."""
    skipped = {s.strip("/") for s in skip}
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        dirnames[:] = sorted(d for d in dirnames if posixpath.join(rel_dir, d) not in skipped
                             and d != "__pycache__")
        for name in sorted(filenames):
            rel = posixpath.join(rel_dir, name)
            if rel not in skipped and not name.endswith(".pyc"):
                out.append((rel, Path(dirpath) / name))
    return out


def make_archive(root: Path, skip: Iterable[str] = (), empty_dirs: Iterable[str] = ()) -> bytes:
    """The files under `root` (minus `skip`) as a gzip'd tar in memory, modes kept, owners
    dropped; `empty_dirs` are added as directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name in empty_dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        for rel, path in local_files(root, skip):
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def upload_bytes(client: paramiko.SSHClient, data: bytes, remote_path: str,
                 progress: CopyProgress | None = None) -> None:
    """Write `data` to `remote_path` with SFTP (its directory must exist)."""
    sftp = client.open_sftp()
    try:
        sftp.putfo(io.BytesIO(data), remote_path, file_size=len(data), callback=progress,
                   confirm=False)
    finally:
        sftp.close()


def upload_tree(client: paramiko.SSHClient, root: Path, remote_dir: str, *,
                skip: Iterable[str] = (), extra_dirs: Iterable[str] = (),
                progress: CopyProgress | None = None) -> int:
    """Copy the files under `root` into `remote_dir` (absolute) with SFTP, keeping their modes.
    Directories are made with one `mkdir -p` call. Returns the bytes copied."""
    files = local_files(root, skip)
    dirs = sorted({posixpath.dirname(rel) for rel, _ in files} | set(extra_dirs) | {""})
    targets = [posixpath.join(remote_dir, d) if d else remote_dir for d in dirs]
    code, _, err = run_bytes(client, ["mkdir", "-p", "--", *targets], 30)
    if code != 0:
        raise ConnectError(f"Could not make {remote_dir}: "
                           f"{err.decode('utf-8', 'replace').strip()[-300:]}")
    total = sum(path.stat().st_size for _, path in files)
    done = 0
    sftp = client.open_sftp()
    try:
        for rel, path in files:
            target = posixpath.join(remote_dir, rel)
            with open(path, "rb") as f:
                sftp.putfo(f, target, confirm=False)
            sftp.chmod(target, stat.S_IMODE(path.stat().st_mode))
            done += path.stat().st_size
            if progress is not None:
                progress(done, total)
    finally:
        sftp.close()
    return done


def download_tree(client: paramiko.SSHClient, remote_dir: str, root: Path,
                  skip_prefixes: Iterable[str] = ()) -> int:
    """Copy a remote directory tree into `root` (files and directories whose name starts
    with one of `skip_prefixes` are left out). Returns the files copied (0: none there)."""
    skipped = tuple(skip_prefixes)
    sftp = client.open_sftp()
    count = 0
    try:
        def walk(remote: str, local: Path) -> None:
            nonlocal count
            try:
                entries = sftp.listdir_attr(remote)
            except OSError:
                return
            local.mkdir(parents=True, exist_ok=True)
            for entry in entries:
                if skipped and entry.filename.startswith(skipped):
                    continue
                src = posixpath.join(remote, entry.filename)
                if stat.S_ISDIR(entry.st_mode or 0):
                    walk(src, local / entry.filename)
                elif stat.S_ISREG(entry.st_mode or 0):
                    sftp.get(src, str(local / entry.filename))
                    count += 1

        walk(remote_dir, root)
    finally:
        sftp.close()
    return count

