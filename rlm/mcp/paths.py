"""What an MCP client may read: files under the roots it declared or the server's `--allow`
directories, nothing else.

A path is resolved (symlinks followed, `..` folded) before it is checked, so a link inside an
allowed directory that points out of it is refused like the place it points to. The run is
then given the resolved path, not the one the client wrote.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

from rlm.errors import InputError


class Refused(InputError):
    """A path outside every allowed directory (exit 3, as any input rlm may not read)."""


def root_dirs(uris: Iterable[str]) -> list[str]:
    """The local directories of a client's roots (`file://` URIs; others name no file here)."""
    dirs = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
            dirs.append(unquote(parsed.path))
    return dirs


def confine(path: str, allowed: list[str]) -> str:
    """The real path of `path` when it lies under one of `allowed` (directories, resolved the
    same way); `Refused` otherwise. A relative path is taken from the one allowed directory
    there is, and refused when there are several (which one the client meant is not known)."""
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
