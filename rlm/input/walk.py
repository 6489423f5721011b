"""A directory given as an input, walked as a code base or a log folder would want.

`rlm ask src/ "..."` or `rlm ask /var/log/nginx/ "..."` reads the files under the directory
as parts (rlm.input.parts), in natural order of their paths in it (`a2` before `a10`; a
rotated set is then put oldest first by rlm.input.order). Left out on the way:

- what git would ignore: every `.gitignore` from the directory down applies to the files
  under its own folder, as git reads them (pathspec's git-wildmatch), and `.git/` itself;
- what `--include` does not name, or `--exclude` names: comma-separated globs, each matched
  against the file's path in the directory (`logs/*.gz`) and against its name (`*.gz`);
- binary files (a NUL in the first 8 KiB, unless the first bytes are those of a compressed
  file, which is read decompressed), and files larger than `--max-file-mb`: these are
  skipped and counted, said on stderr and to the model as any skipped part is;
- anything that is not a regular file (a socket, a FIFO), and symbolic links: a link in a
  tree can point anywhere, and reading the tree should not leave it.

Nothing is read but the first 8 KiB of each candidate file, to tell text from binary.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass

from rlm.input.compressed import codec_of
from rlm.input.order import natural_key

__all__ = ["WalkRules", "walk_directory"]

_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class WalkRules:
    """What of a directory is read: include/exclude globs (none: everything not ignored) and
    the largest file read, in bytes (None: no limit)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_file_bytes: int | None = None

    @classmethod
    def parse(cls, include: str | None, exclude: str | None, max_file_mb: float | None) -> WalkRules:
        def globs(text: str | None) -> tuple[str, ...]:
            return tuple(g.strip() for g in (text or "").split(",") if g.strip())

        limit = None if not max_file_mb else int(max_file_mb * (1 << 20))
        return cls(globs(include), globs(exclude), limit)


def _matches(globs: tuple[str, ...], relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(relative, g) or fnmatch.fnmatchcase(name, g) for g in globs)


def _ignore_spec(folder: str) -> object | None:
    """The `.gitignore` of `folder` as pathspec reads it, or None when there is none (or it
    cannot be read: then nothing is ignored on its account)."""
    path = os.path.join(folder, ".gitignore")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(specs: list[tuple[str, object]], path: str, is_dir: bool) -> bool:
    """Whether any `.gitignore` above `path` (each relative to its own folder) ignores it."""
    for folder, spec in specs:
        relative = os.path.relpath(path, folder).replace(os.sep, "/")
        if relative.startswith("../"):
            continue
        if spec.match_file(relative + ("/" if is_dir else "")):  # type: ignore[attr-defined]
            return True
    return False


def _binary(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False  # unreadable: the part's own opening says why, in one line
    return codec_of(head) is None and b"\x00" in head


def walk_directory(root: str, rules: WalkRules) -> tuple[list[str], list[dict[str, str]]]:
    """The files of `root` to read, in natural order of their paths in it, and those skipped
    (name and why: binary, too large); what git ignores and what the globs leave out is
    neither, as a file never given."""
    files: list[tuple[str, str]] = []
    skipped: list[dict[str, str]] = []
    specs: list[tuple[str, object]] = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        spec = _ignore_spec(folder)
        if spec is not None:
            specs.append((folder, spec))
        dirs[:] = sorted(
            (d for d in dirs if d != ".git" and not _ignored(specs, os.path.join(folder, d), True)),
            key=natural_key,
        )
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if name == ".gitignore" or _ignored(specs, path, False):
                continue
            if rules.include and not _matches(rules.include, relative):
                continue
            if rules.exclude and _matches(rules.exclude, relative):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone since the listing
            if not stat.S_ISREG(st.st_mode):
                continue
            if rules.max_file_bytes is not None and st.st_size > rules.max_file_bytes:
                limit = rules.max_file_bytes / (1 << 20)
                skipped.append({"name": path, "why": f"larger than --max-file-mb {limit:g}"})
                continue
            if _binary(path):
                skipped.append({"name": path, "why": "a binary file"})
                continue
            files.append((relative, path))
    files.sort(key=lambda f: natural_key(f[0]))
    return [path for _, path in files], skipped
