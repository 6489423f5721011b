"""What an MCP client may read: files under the roots it declared (stdio only) or the server's
`--allow` directories, nothing else.

A path is resolved (symlinks followed, `..` folded) before it is checked, so a link inside an
allowed directory that points out of it is refused like the place it points to. The run is
then given the resolved path, not the one the client wrote, with the file's identity (device
and inode) at the time of the check: whoever opens it later (the run's own process, `stats`,
`memory`) checks again and refuses a file that is no longer the one that was checked (a
directory on the path swapped for a symlink in between).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

from rlm.errors import InputError


class Refused(InputError):
    """A path outside every allowed directory (exit 3, as any input rlm may not read)."""


# (st_dev, st_ino): which file a path named when it was checked.
FileId = tuple[int, int]


def root_dirs(uris: Iterable[str]) -> list[str]:
    """The local directories of a client's roots (`file://` URIs; others name no file here).

    A root that holds a NUL byte, names no absolute path (`file:relative/dir`) or opens the
    whole file system (`/`) is left out, with one line on stderr (the client's log)."""
    dirs = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            continue
        path = unquote(parsed.path)
        why = None
        if "\x00" in uri or "\x00" in path:
            why = "it holds a NUL byte"
        elif not os.path.isabs(path):
            why = "it is not an absolute path"
        elif os.path.realpath(path) == os.path.realpath(os.sep):
            why = "it opens the whole file system"
        if why is not None:
            print(f"rlm: warning: the client's root {uri!r} is not used: {why}", file=sys.stderr, flush=True)
            continue
        dirs.append(path)
    return dirs


def confine(path: str, allowed: list[str]) -> str:
    """The real path of `path` when it lies under one of `allowed` (directories, resolved the
    same way); `Refused` otherwise. A relative path is taken from the one allowed directory
    there is, and refused when there are several (which one the client meant is not known)."""
    if "\x00" in path:
        raise Refused("refused: the path holds a NUL byte")
    if "://" in path:
        from rlm.input.remote import is_remote
        from rlm.input.remote import shown as shown_url

        if is_remote(path):
            raise Refused(
                f"refused: {shown_url(path)} is a remote input: this server reads files under its open "
                "directories only (`rlm ask` reads s3://, gs:// and https:// inputs)"
            )
    allowed = [d for d in allowed if "\x00" not in d]
    if not allowed:
        raise Refused(
            "no directory is open to this server: the client declared no roots; start the server "
            "with --allow DIR to open one"
        )
    bases = [os.path.realpath(os.path.expanduser(d)) for d in allowed]
    if not os.path.isabs(path):
        if len(bases) != 1:
            raise Refused(
                f"{path} is a relative path and several directories are open: give an absolute path"
            )
        path = os.path.join(bases[0], path)
    real = os.path.realpath(path)
    for base in bases:
        if real == base or os.path.commonpath([real, base]) == base:
            return real
    shown = path if real == os.path.abspath(path) else f"{path} (which resolves to {real})"
    raise Refused(f"refused: {shown} is outside the directories open to this server ({', '.join(bases)})")


def checked(path: str, allowed: list[str]) -> tuple[str, FileId]:
    """`confine`, and the identity of the file it names now (what a later open must find)."""
    real = confine(path, allowed)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot open {path}: {exc.strerror or exc}") from None
    return real, (st.st_dev, st.st_ino)


def same_file(real: str, allowed: list[str], expected: FileId, opened: FileId | None) -> None:
    """At the time of opening: `real` still confined, and the file opened (`opened`, its device
    and inode) the one that was checked; `Refused` otherwise, in one line."""
    if confine(real, allowed) != real or opened is None or tuple(opened) != tuple(expected):
        raise Refused(
            f"refused: {real} is no longer the file that was checked (a part of its path changed "
            "after the check): nothing of it is used"
        )
