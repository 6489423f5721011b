"""Files only their user can read: 0600 files in 0700 folders, written whole, never through a symlink.

What rlm writes about an input (its line index, facts, a UTF-8 copy, the table and its
description, spooled stdin) and every trace hold the input's text or facts drawn from it:
another user of the machine must not read them, and a symlink planted where rlm writes
(a repository can ship one at a predictable cache name) must not turn the write onto a
file of the user's. So every file is made under a random temporary name with
O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, then renamed over its final name (a rename
replaces a symlink, it never follows it); a file a library writes itself (DuckDB) is
written in a private folder and made 0600 before it is renamed into place.

A work folder holds a lock for as long as its process lives, so that a sweep can tell a
killed build's leftovers from a running build's files.

Imports nothing of rlm: every package may use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import BinaryIO

__all__ = [
    "FILE_MODE",
    "DIR_MODE",
    "make_private_dirs",
    "unsafe_dir",
    "replace_private",
    "write_private",
    "read_private",
    "publish_private",
    "private_workdir",
    "sweep_workdirs",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
_LOCK_NAME = ".lock"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def make_private_dirs(path: str) -> None:
    """Create `path` and its missing parents, each 0700 whatever the umask (a folder that
    already exists keeps its mode: it is the user's). Raises OSError."""
    path = os.path.abspath(path)
    missing: list[str] = []
    probe = path
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
            continue  # made by a concurrent run: its maker chmods it
        os.chmod(folder, DIR_MODE)  # a umask can narrow mkdir's mode: it is exactly 0700


def unsafe_dir(path: str) -> str | None:
    """Why `path` is no place for private files, or None when it is one: it must be a real
    folder (not a symlink), the user's own, writable by nobody else."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return "belongs to another user"
    if st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _temp_name(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f"{name}.{secrets.token_hex(6)}.tmp")


@contextlib.contextmanager
def replace_private(path: str) -> Iterator[BinaryIO]:
    """A new 0600 file that takes `path`'s place when the block ends without an error (and is
    removed when it does not). Raises OSError."""
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fd = -1
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private(path: str, data: bytes | str) -> None:
    """Write `data` to `path` as a new 0600 file, atomically. Raises OSError."""
    with replace_private(path) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def read_private(path: str) -> bytes:
    """The bytes of a file rlm wrote, refusing a symlink or anything but a regular file of the
    user's (an entry planted by someone else is not read). Raises OSError."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a file of this user's")
        return fh.read()


def publish_private(src: str, dest: str, mode: int = FILE_MODE) -> None:
    """Move a finished file another library wrote (with its own mode) to `dest`, made 0600
    (or `mode`) first, so it is never readable by others at its final name. Raises OSError."""
    os.chmod(src, mode, follow_symlinks=False)
    os.replace(src, dest)


@contextlib.contextmanager
def private_workdir(parent: str | None, prefix: str) -> Iterator[str]:
    """A fresh 0700 folder in `parent` (the temp dir when None), locked by this process while
    the block runs, then removed with everything in it."""
    work = tempfile.mkdtemp(prefix=prefix, dir=parent)  # 0700, a name no one can guess
    lock = -1
    try:
        lock = os.open(
            os.path.join(work, _LOCK_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, FILE_MODE
        )
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if lock >= 0:
            os.close(lock)


def sweep_workdirs(
    parent: str, prefix: str, *, older_than: float = 3600.0, now: float | None = None
) -> list[str]:
    """Remove the work folders `prefix`* in `parent` that a killed process left: untouched for
    `older_than` seconds and whose lock no live process holds. Returns the folders removed;
    never raises (a folder that cannot be swept only takes room)."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return removed
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or now - st.st_mtime < older_than:
                continue
            if _held(os.path.join(entry.path, _LOCK_NAME)):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _held(lock_path: str) -> bool:
    """Whether a live process holds the lock (a folder without one belonged to a killed process)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
