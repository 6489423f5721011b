"""The cache folder: a folder rlm made and marked, the only place its sweep deletes anything.

The cache (line index, facts, UTF-8 copies, tables, copies of remote objects: see
rlm.input.source, rlm.input.tables and rlm.input.remote) is swept of entries unused for a
month. A sweep must never touch a file rlm did not write, so the cache is a folder rlm can
prove is its own:

- it holds the marker `.rlm-cache` (a regular file of the user's with rlm's tag), written
  when rlm made the folder (made under a temporary name, marked, then renamed into place,
  so no run ever sees it unmarked);
- a folder the user names (`RLM_CACHE_DIR`, `cache_dir`) that exists and is not marked is
  the user's: rlm's entries go in a subfolder `rlm-cache/` it makes and marks there. The
  setting is honoured (the cache is where the user wants it) and nothing of the folder's
  own is ever considered for removal: no guess about which of its files look like rlm's;
- the per-user default folder (platformdirs) is rlm's by its name, and is marked on use;
- the sweep removes only names of the exact shapes rlm writes (a 32-hex key and a known
  suffix), work folders whose lock no live process holds, and only in a marked folder.

A marked folder that is a symlink, another user's, or writable by others is not used:
`resolve` says why, and the run keeps its files in private temp files.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

from rlm.privatefiles import make_private_dirs, read_private, sweep_workdirs, unsafe_dir, write_private

__all__ = [
    "MARKER",
    "SUBFOLDER",
    "WORK_PREFIX",
    "CACHE_KEEP_DAYS",
    "platform_cache_dir",
    "resolve",
    "is_marked",
    "prune_cache",
]

MARKER = ".rlm-cache"
_TAG = b"rlm cache folder: every entry here was written by rlm, which may remove it.\n"
SUBFOLDER = "rlm-cache"
WORK_PREFIX = "rlm-build-"  # a table build's work folder (rlm.input.tables)
# Cache entries unused this long are removed; the folder is swept at most once a day.
CACHE_KEEP_DAYS = 30
_SWEEP_MARK = ".swept"
_STALE_SECONDS = 3600.0  # a temp file or work folder this old with no live owner is a killed run's
_ENTRY = re.compile(
    r"([0-9a-f]{32})\.(?:json|idx|utf8|plain|parts|obj|obj\.json|t\d+\.duckdb|t\d+\.duckdb\.wal|t\d+\.json)"
)
_TEMP = re.compile(r"[0-9a-f]{32}\.[\w.]+\.[0-9a-f]{12}\.tmp")  # rlm.privatefiles.replace_private's names


def platform_cache_dir() -> str:
    """The per-user default: platformdirs' cache folder for rlm + `/index`."""
    from platformdirs import user_cache_dir

    return os.path.join(user_cache_dir("rlm", appauthor=False), "index")


def is_marked(folder: str) -> bool:
    """Whether `folder` is a real folder holding rlm's marker (a file of the user's, not a link)."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    try:
        return read_private(os.path.join(folder, MARKER)).startswith(_TAG)
    except OSError:
        return False


def resolve(directory: str) -> tuple[str | None, str | None]:
    """(the folder to keep cache entries in, or None; a warning to say, or None).

    None without a warning: the folder cannot be made (an unwritable place), which only
    costs a rescan. None with a warning: the folder is not safe for private files."""
    try:
        directory = os.path.abspath(directory)
        if not os.path.lexists(directory):
            _make_marked(directory)
            folder = directory
        elif is_marked(directory):
            folder = directory
        elif directory == os.path.abspath(platform_cache_dir()) and unsafe_dir(directory) is None:
            write_private(os.path.join(directory, MARKER), _TAG)  # the default folder is rlm's by name
            folder = directory
        else:
            folder = os.path.join(directory, SUBFOLDER)
            if not os.path.lexists(folder):
                _make_marked(folder)
            elif not is_marked(folder):
                return None, (
                    f"the cache folder {folder} exists and is not rlm's (no {MARKER} marker): "
                    "not used; this run keeps its index and table in private temp files"
                )
    except OSError:
        return None, None
    why = unsafe_dir(folder)
    if why is not None:
        return None, (
            f"the cache folder {folder} {why}: not used; this run keeps its index and table in private temp files"
        )
    return folder, None


def _make_marked(folder: str) -> None:
    """Make `folder` (0700) with its marker already in it: made and marked under a temporary
    name beside it, then renamed, so a concurrent run finds it marked or absent."""
    parent = os.path.dirname(folder)
    make_private_dirs(parent)
    tmp = tempfile.mkdtemp(prefix=".rlm-cache-new-", dir=parent)
    try:
        write_private(os.path.join(tmp, MARKER), _TAG)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not is_marked(folder):  # another run made it first: its folder stands
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prune_cache(directory: str, *, keep_days: float = CACHE_KEEP_DAYS, now: float | None = None) -> list[str]:
    """Remove the entries of a marked cache folder unused for `keep_days`, and what killed
    runs left (temp files and work folders an hour old that no live process holds); returns
    the keys removed. An entry is every file `<key>.<suffix>` of rlm's shapes; it counts as
    used when any of its files was modified (a hit refreshes its facts file's time). An
    unmarked folder is never swept. Never raises: a cache that cannot be swept is only bigger."""
    now = time.time() if now is None else now
    if not is_marked(directory):
        return []
    mark = os.path.join(directory, _SWEEP_MARK)
    try:
        if now - os.lstat(mark).st_mtime < 86_400:
            return []
    except OSError:
        pass
    newest: dict[str, float] = {}
    files: dict[str, list[str]] = {}
    stale_temps: list[str] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.is_file(follow_symlinks=False):
                    continue
                mtime = entry.stat(follow_symlinks=False).st_mtime
                if _TEMP.fullmatch(entry.name):
                    if now - mtime > _STALE_SECONDS:
                        stale_temps.append(entry.path)
                    continue
                match = _ENTRY.fullmatch(entry.name)
                if match is None:
                    continue  # not a name rlm writes: not rlm's to remove
                key = match.group(1)
                files.setdefault(key, []).append(entry.path)
                newest[key] = max(newest.get(key, 0.0), mtime)
    except OSError:
        return []
    removed = [key for key, t in newest.items() if now - t > keep_days * 86_400]
    for path in [p for key in removed for p in files[key]] + stale_temps:
        try:
            os.unlink(path)
        except OSError:
            pass
    sweep_workdirs(directory, WORK_PREFIX, older_than=_STALE_SECONDS, now=now)
    try:
        write_private(mark, b"")
        os.utime(mark, (now, now), follow_symlinks=False)
    except OSError:
        pass
    return removed
