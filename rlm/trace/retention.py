"""The trace folder's bound: the newest traces are kept, the rest deleted.

Every run leaves a trace, so without a bound the folder only grows. The newest
KEEP_TRACES traces and at most KEEP_TRACE_BYTES of them are kept (newest by
modification time: a name can be made to sort last, a write time cannot be
made newer than the runs that follow it). Only what rlm can show it wrote is
ever deleted: regular files of the user's own, not symlinks, whose names are
exactly a run id's (`2026-11-21T07-40-12-ab12.json`, rlm.trace.writer, or the
`.jsonl` event log of a run that is going or died before its end), in the
folder the caller names (rlm's own per-user trace folder). Anything else in
that folder is left alone and not counted. A run going on appends to its log,
so its log is the newest file and is kept.

`sweep_if_due` is what a run calls: it sweeps at most once a day, remembered by
the modification time of a stamp file in the folder.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

KEEP_TRACES = 1000
KEEP_TRACE_BYTES = 500 * 1024 * 1024
TRACE_NAME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-[0-9a-f]{4}\.jsonl?")
STAMP = ".rlm-trace-sweep"
SWEEP_EVERY_SECONDS = 86400.0


@dataclass
class Swept:
    """What one sweep removed."""

    removed: list[Path] = field(default_factory=list)
    freed_bytes: int = 0


def sweep(
    directory: str | os.PathLike[str], keep: int = KEEP_TRACES, max_bytes: int = KEEP_TRACE_BYTES
) -> Swept:
    """Delete the traces in `directory` past the newest `keep` and past `max_bytes` in all."""
    folder = Path(directory)
    found: list[tuple[float, int, Path]] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return Swept()
    uid = os.getuid()
    for name in names:
        if not TRACE_NAME.fullmatch(name):
            continue
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            found.append((st.st_mtime, st.st_size, folder / name))
    found.sort(key=lambda t: (t[0], t[2].name), reverse=True)  # newest first
    swept = Swept()
    total = 0
    for index, (_, size, path) in enumerate(found):
        total += size
        if index == 0 or (index < keep and total <= max_bytes):  # the newest is the run going on
            continue
        try:
            path.unlink()
        except OSError:
            continue
        swept.removed.append(path)
        swept.freed_bytes += size
    return swept


def sweep_if_due(directory: str | os.PathLike[str], now: float | None = None) -> Swept | None:
    """`sweep`, at most once a day per folder; None when it was not due (or the folder is absent)."""
    folder = Path(directory)
    if not folder.is_dir():
        return None
    now = time.time() if now is None else now
    stamp = folder / STAMP
    try:
        if 0 <= now - os.lstat(stamp).st_mtime < SWEEP_EVERY_SECONDS:
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.utime(fd, (now, now))
        finally:
            os.close(fd)
    except OSError:
        return None  # a folder rlm cannot write: nothing to sweep there either
    return sweep(folder)
