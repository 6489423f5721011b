"""One snapshot per run: what the input was when the run opened it, and whether it still is.

A run reads its input many times (the index scan, the table build, every worker's
mapping, sub-call excerpts, the sha256 memory is keyed by). A file that changes in
between (a log appended to, rotated by copytruncate, replaced by a rename) would give
each of those views other bytes. The run records the file's identity when it opens it
and compares it when the views are made and when the run ends: a change is said, the
answer marked as possibly about mixed contents, and nothing of the run is kept as
memory of the file.

The identity is cheap (one stat, three 64 KB reads), never a hash of the whole file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import BinaryIO

from rlm.errors import InputError

__all__ = ["Change", "Identity", "change_of", "fingerprint", "identity_of", "open_same"]

_BLOCK = 64 * 1024


@dataclass(frozen=True)
class Identity:
    """Which file, how big, when written, and a fingerprint of sampled blocks of its first `size` bytes."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    fingerprint: str


def identity_of(path: str) -> Identity | None:
    """The identity of the file at `path` now; None when it cannot be read (gone, no access)."""
    try:
        st = os.stat(path)
        return Identity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, fingerprint(path, st.st_size))
    except OSError:
        return None


def open_same(path: str, device: int, inode: int, display: str) -> BinaryIO:
    """`path` opened for reading, checked to be the file found before (its device and inode, from
    the stat that listed it): one replaced in between is one line (InputError), never its bytes."""
    fh = open(path, "rb")  # noqa: SIM115 (handed to the caller, who closes it)
    st = os.fstat(fh.fileno())
    if device and (st.st_dev, st.st_ino) != (device, inode):
        fh.close()
        raise InputError(f"{display} was replaced while it was being read: ask again once it is stable")
    return fh


def fingerprint(path: str, size: int) -> str:
    """A hash of the blocks at the start, middle and end of the file's first `size` bytes.

    Taken over an old size, it tells a file that only grew (the same blocks) from one
    that was rewritten."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        for off in sorted({0, max(0, size // 2 - _BLOCK // 2), max(0, size - _BLOCK)}):
            fh.seek(off)
            h.update(fh.read(max(0, min(_BLOCK, size - off))))
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Change:
    """How the file differs from the identity it was opened with."""

    how: str  # 'gone', 'replaced', 'truncated', 'appended to' or 'rewritten'
    before: int  # bytes when the run opened it
    now: int | None  # bytes now (None: gone)

    def message(self, display: str) -> str:
        """One line for stderr, the trace's warnings and --json: what changed, and what it means."""
        sizes = f" ({self.before:,} bytes, now {self.now:,})" if self.now not in (None, self.before) else ""
        if self.how == "appended to":
            what = (
                "the answer is about the lines it had when the run began, but a view made after "
                "the change may hold the new lines too"
            )
        else:
            what = "the answer may mix its old and new contents"
        return f"{display} was {self.how} during the run{sizes}: {what}"


def change_of(path: str, before: Identity) -> Change | None:
    """How the file at `path` differs from `before`; None when it is the same."""
    now = identity_of(path)
    if now is None:
        return Change("gone", before.size, None)
    if (now.device, now.inode) != (before.device, before.inode):
        how = "replaced"
    elif now.size < before.size:
        how = "truncated"
    elif now.size > before.size:
        try:
            same_start = fingerprint(path, before.size) == before.fingerprint
        except OSError:
            return Change("gone", before.size, None)
        how = "appended to" if same_start else "rewritten"
    elif now.mtime_ns != before.mtime_ns or now.fingerprint != before.fingerprint:
        how = "rewritten"
    else:
        return None
    return Change(how, before.size, now.size)
