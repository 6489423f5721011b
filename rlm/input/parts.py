"""Several inputs as one view: rotated, compressed and plain files read as one text.

`rlm ask a.log.2.gz a.log.1 a.log "..."` reads its parts as one `context`: their plain
bytes (each decompressed if compressed, a final newline added to a part that lacks one)
concatenated once into a cache entry keyed by the parts' own cache keys
(rlm.input.source.input_key: size, mtime, sampled blocks), so a second question over the
same files finds it and pays nothing. Beside it, `<key>.parts` (the manifest) says of
each part its plain size, its line range in the whole, its sha256, and whether it was
skipped and why; the names come from the command line of each run (the cache entry is
of the bytes, whatever the files are called or wherever they are asked from).

Order: a rotated set (`x.log.14.gz` ... `x.log.1`, `x.log`) is read oldest first, where
its first member was given; other files in the order given, a glob's matches sorted
naturally (`a2` before `a10`). `--order name|mtime|given` overrides that.

A remote part (`s3://`, `gs://`, `https://`: rlm.input.remote) is its object's local copy in
the cache, named by its URL: a pattern in its key is matched against the bucket's listing,
and what follows is as for a local file.

A missing, unreadable or damaged part is one line naming it (InputError, exit 3), unless
skip_bad: then the part is left out, and the profile and the stderr line say so.

With a time range (`--since` / `--until`, rlm.input.timerange) the view holds only the lines
in it, even of one file: a part wholly outside it is not read at all (its first time, and its
last, or the next part's first, tell), and of the others rlm.input.rangecopy copies the
lines in range, each part keeping its own line numbers (`runs` in its record). The view is
cached under its own key (the parts' keys and the range's resolved bounds).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, BinaryIO

from rlm.errors import InputError, UsageError
from rlm.input.compressed import check_room, codec_of, decompress
from rlm.input.objectprune import outside_range
from rlm.input.order import ORDERS, Part, natural_key, order_paths
from rlm.input.rangecopy import Kept
from rlm.input.rangeplan import RangePlan, plan_range
from rlm.input.remote import RemoteError, fetch, is_remote, unsupported_scheme
from rlm.input.remote import objects as remote_objects
from rlm.input.snapshot import open_same
from rlm.input.source import (
    Profile,
    Source,
    default_cache_dir,
    input_key,
    open_built,
    open_source,
)
from rlm.input.timerange import TimeRange
from rlm.input.walk import WalkRules, walk_directory
from rlm.privatefiles import read_private, replace_private
from rlm.text.textcap import human_size
from rlm.text.visible import visible

__all__ = ["changed_parts", "expand", "open_inputs", "read_summary"]

_MANIFEST_VERSION = 1
_COPY_CHUNK = 1 << 20
_ROOM_EVERY = 64 << 20  # bytes the combined copy writes between two looks at the disk's free space
_GLOB_CHARS = re.compile(r"[*?\[]")


def expand(args: Sequence[str], *, skip_bad: bool, skipped: list[dict[str, str]]) -> list[str]:
    """The paths the arguments name: a glob's matches sorted naturally, other paths as given
    (a path that exists is never read as a glob, whatever characters its name holds)."""
    out: list[str] = []
    for arg in args:
        if arg == "-":
            raise UsageError("stdin (-) can only be the one input: give files, or pipe one input alone")
        if _GLOB_CHARS.search(arg) and not os.path.lexists(arg):
            matches = sorted(glob.glob(arg), key=natural_key)
            if not matches:
                _bad(arg, "no file matches this pattern", skip_bad, skipped)
            out.extend(matches)
        else:
            out.append(arg)
    seen: set[str] = set()
    unique = []
    for p in out:  # a file named twice (a glob and its own name) is read once
        if os.path.abspath(p) not in seen:
            seen.add(os.path.abspath(p))
            unique.append(p)
    return unique


def open_inputs(
    args: Sequence[str],
    *,
    cache_dir: str | None = None,
    stdin: BinaryIO | None = None,
    order: str = "auto",
    skip_bad: bool = False,
    names: dict[str, str] | None = None,
    walk: WalkRules | None = None,
    time_range: TimeRange | None = None,
    background_table: bool = False,
    build_after: threading.Event | None = None,
) -> Source:
    """One input as today (rlm.input.source.open_source); several, or any with a `time_range`,
    as one view whose profile carries `parts` and `skipped` (each part named by `names`,
    path -> name, else as given). Raises InputError (exit 3) or UsageError in one line."""
    if time_range is not None and "-" in args:
        raise UsageError("--since/--until read the times of files: give the file, not stdin (-)")
    if list(args) == ["-"] or (
        time_range is None
        and len(args) == 1
        and not _GLOB_CHARS.search(args[0])
        and not is_remote(args[0])
        and unsupported_scheme(args[0]) is None
        and not os.path.isdir(args[0])
    ):
        return open_source(
            args[0],
            cache_dir=cache_dir,
            stdin=stdin,
            background_table=background_table,
            build_after=build_after,
        )
    if order not in ORDERS:
        raise UsageError(f"--order must be one of {', '.join(ORDERS)}, not {order!r}")
    owned: list[str] = []  # remote objects' private copies when the cache cannot keep them
    try:
        return _open_parts(args, cache_dir, order, skip_bad, names, owned, walk or WalkRules(), time_range)
    except BaseException:
        for path in owned:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise


def _open_parts(
    args: Sequence[str],
    cache_dir: str | None,
    order: str,
    skip_bad: bool,
    names: dict[str, str] | None,
    owned: list[str],
    walk: WalkRules,
    time_range: TimeRange | None,
) -> Source:
    skipped: list[dict[str, str]] = []
    found: list[Part] = []
    pruned: list[dict[str, str]] = []  # remote objects a time range leaves out unfetched
    for arg in args:
        if os.path.isdir(arg):  # its files, as rlm.input.walk chooses them
            files, passed = walk_directory(arg, walk)
            skipped.extend(passed)
            if not files and not passed:
                _bad(
                    arg,
                    "a directory with no file to read (after .gitignore, --include, --exclude)",
                    skip_bad,
                    skipped,
                )
            found.extend(p for p in (_stat_part(f, skip_bad, skipped) for f in files) if p is not None)
            continue
        if is_remote(arg):
            found.extend(_remote_parts(arg, cache_dir, skip_bad, skipped, owned, time_range, pruned))
            continue
        unsupported = unsupported_scheme(arg)
        if unsupported is not None and not os.path.lexists(arg):
            _bad(arg, unsupported, skip_bad, skipped)
            continue
        for path in expand([arg], skip_bad=skip_bad, skipped=skipped):
            part = _stat_part(path, skip_bad, skipped)
            if part is not None:
                found.append(part)
    found = _unique(found)
    if not found and pruned and time_range is not None:
        raise InputError(f"no line is in the time range ({time_range.describe()}): {pruned[0]['why']}")
    if not found:
        raise InputError("none of the inputs could be read" + _skipped_note(skipped))
    if len(found) == 1 and not skipped and time_range is None:  # a glob that matched one file: as today
        only = found[0]
        if is_remote(only.name):  # its local copy, named by its URL
            return open_source(only.path, cache_dir=cache_dir, display=only.name, owned=owned)
        return open_source(only.name, cache_dir=cache_dir)
    if names:  # what the parts were called when first read (`rlm replay --verify` reads them
        # again by their resolved paths, and its steps must see the same names)
        found = [replace(p, name=names.get(p.name, p.name)) for p in found]
    parts = order_paths(found, order)
    keyed = "multi|v1|" + "|".join(p.key for p in parts)
    ranged: RangePlan | None = None
    if time_range is not None:
        ranged = plan_range(parts, time_range, left_out=pruned)
        parts = [p for p in parts if p.key in ranged.clocks]
        if not parts:
            raise InputError(f"no line is in the time range ({ranged.profile([], 0)['said']})")
        keyed = f"range|v1|{ranged.key}|" + "|".join(p.key for p in parts)
    key = hashlib.sha256(keyed.encode()).hexdigest()[:32]
    combined, manifest = _combined(parts, key, cache_dir, owned, skip_bad, ranged)
    records, more_skipped = _records(parts, manifest)
    skipped.extend(more_skipped)
    if not records:
        if ranged is not None and manifest["parts"]:
            raise InputError(f"no line is in the time range ({ranged.profile([], 0)['said']})")
        raise InputError("none of the inputs could be read" + _skipped_note(skipped))
    display = records[0]["name"] if len(records) == 1 else f"{records[0]['name']} … {records[-1]['name']}"
    ranges = [(int(r["first_line"]), int(r["last_line"]), str(r["name"])) for r in records]

    def finish(profile: Profile) -> Profile:
        said = ranged.profile(records, profile.lines) if ranged is not None else None
        return replace(profile, parts=records, skipped=skipped, time_range=said)

    return open_built(
        combined, display, key=key, cache_dir=cache_dir, owned=owned, parts=ranges, finish=finish
    )


def read_summary(profile: Profile) -> str | None:
    """The one stderr line of a several-file input: what was read and what was skipped, why."""
    if profile.parts is None:
        return None
    parts = profile.parts
    total = sum(int(p["size"]) for p in parts)
    names = parts[0]["name"] if len(parts) == 1 else f"{parts[0]['name']} … {parts[-1]['name']}"
    line = (
        f"read {len(parts)} file{'s' if len(parts) != 1 else ''} ({human_size(total)} on disk, "
        f"{human_size(profile.size)} of text, {profile.lines:,} lines): {names}"
    )
    if profile.time_range is not None:
        line += f"; {profile.time_range['said']}"
    return visible(line + _skipped_note(profile.skipped))


def changed_parts(profile: Profile) -> list[str]:
    """A line for each part that is not as it was read (its size or mtime changed, or it is
    gone): the run's findings are then not kept as memory of the text."""
    said: list[str] = []
    for p in profile.parts or []:
        try:
            st = os.stat(p["path"])
        except OSError:
            said.append(f"{p['name']} is gone or unreadable since it was read")
            continue
        if st.st_size != p["size"] or st.st_mtime_ns != p["mtime_ns"]:
            said.append(f"{p['name']} changed while the run read it")
    return said


# --------------------------------------------------------------------------- finding the parts


def _bad(name: str, why: str, skip_bad: bool, skipped: list[dict[str, str]]) -> None:
    if not skip_bad:
        raise InputError(f"{name}: {why}")
    skipped.append({"name": name, "why": why})


def _skipped_note(skipped: Sequence[dict[str, str]]) -> str:
    if not skipped:
        return ""
    shown = "; ".join(f"{s['name']} ({s['why']})" for s in skipped[:5])
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return f"; skipped {len(skipped)}: {shown}{more}"


def _unique(found: list[Part]) -> list[Part]:
    """Each file once (a glob and its own name, an object named twice), where first given."""
    seen: set[str] = set()
    out = []
    for part in found:
        if part.path not in seen:
            seen.add(part.path)
            out.append(part)
    return out


def _remote_parts(
    arg: str,
    cache_dir: str | None,
    skip_bad: bool,
    skipped: list[dict[str, str]],
    owned: list[str],
    time_range: TimeRange | None = None,
    pruned: list[dict[str, str]] | None = None,
) -> list[Part]:
    """The objects `arg` names (rlm.input.remote), each copied once into the cache and read as
    a local part named by its URL; those that cannot be read are said in `skipped`, those a
    time range leaves out by their names or last change (rlm.input.objectprune) in `pruned`,
    never fetched."""
    from rlm.input.cachedir import resolve

    try:
        objects = remote_objects(arg)
    except RemoteError as exc:
        _bad(exc.name, exc.why, skip_bad, skipped)
        return []
    folder, _ = resolve(cache_dir if cache_dir is not None else default_cache_dir())
    parts = []
    for obj in objects:
        why = outside_range(obj.name, obj.modified_ns, time_range) if time_range is not None else None
        if why is not None:
            if pruned is not None:
                pruned.append({"name": obj.name, "why": why})
            continue
        try:
            path = fetch(obj, folder, owned)
        except RemoteError as exc:
            _bad(exc.name, exc.why, skip_bad, skipped)
            continue
        part = _stat_part(path, skip_bad, skipped, name=obj.name)
        if part is not None:
            parts.append(part)
    return parts


def _stat_part(
    path: str, skip_bad: bool, skipped: list[dict[str, str]], *, name: str | None = None
) -> Part | None:
    """The part at `path` (called `name`, else its path), keyed; None (said in `skipped`) when
    it is skipped."""
    name = name or path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _bad(name, "no such file", skip_bad, skipped)
        return None
    except OSError as exc:
        _bad(name, f"cannot open it: {exc.strerror or exc}", skip_bad, skipped)
        return None
    if stat.S_ISDIR(st.st_mode):
        _bad(name, "is a directory, not a file", skip_bad, skipped)
        return None
    if not stat.S_ISREG(st.st_mode):
        _bad(name, "is not a regular file", skip_bad, skipped)
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        _bad(name, f"cannot read it: {exc.strerror or exc}", skip_bad, skipped)
        return None
    if st.st_size == 0:
        skipped.append({"name": name, "why": "empty"})  # nothing to read is not an error
        return None
    return Part(
        name=name,
        path=os.path.abspath(path),
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        key=input_key(path, st),
        compression=codec_of(head),
        device=st.st_dev,
        inode=st.st_ino,
    )


# --------------------------------------------------------------------------- the combined bytes


class _Counting:
    """The combined file's writer: counts the bytes and lines of the part being written and
    remembers its last byte (a part that does not end in a newline is given one). Every
    _ROOM_EVERY bytes it looks at the disk's free space: the combined copy stops with a message
    before it fills the disk (rlm.input.compressed.check_room), whatever the part is."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.bytes = 0
        self.lines = 0
        self.last = b"\n"
        self.name = ""
        self._unchecked = _ROOM_EVERY  # the first look at the room comes with the first bytes

    def start(self, name: str = "") -> None:
        self.bytes, self.lines, self.last, self.name = 0, 0, b"\n", name

    def fileno(self) -> int:
        return self.out.fileno()

    def write(self, block: bytes) -> int:
        if block:
            self._unchecked += len(block)
            if self._unchecked >= _ROOM_EVERY:
                check_room(self.out, self.bytes, self.name)
                self._unchecked = 0
            self.out.write(block)
            self.bytes += len(block)
            self.lines += block.count(b"\n")
            self.last = block[-1:]
        return len(block)


def _combined(
    parts: list[Part],
    key: str,
    cache_dir: str | None,
    owned: list[str],
    skip_bad: bool,
    ranged: RangePlan | None,
) -> tuple[str, dict[str, Any]]:
    """(the combined file, its manifest): from the cache when both are whole, else built."""
    from rlm.input.source import cache_entry_base, private_temp

    base = cache_entry_base(cache_dir if cache_dir is not None else default_cache_dir(), key)
    if base is not None:
        plain, listed = f"{base}.plain", f"{base}.parts"
        manifest = _load_manifest(listed, plain, parts)
        if manifest is not None:
            _refuse_bad(parts, manifest, skip_bad)
            return plain, manifest
        try:
            with replace_private(plain) as out:
                manifest = _write_combined(parts, out, skip_bad, ranged)
            with replace_private(listed) as fh:
                fh.write(json.dumps(manifest).encode("utf-8"))
            return plain, manifest
        except OSError:
            pass  # an unwritable cache: a private temp file the Source removes
    private = private_temp("rlm-parts-", ".txt", owned)
    with open(private, "wb") as out:
        manifest = _write_combined(parts, out, skip_bad, ranged)
    return private, manifest


def _write_combined(
    parts: list[Part], out: BinaryIO, skip_bad: bool, ranged: RangePlan | None
) -> dict[str, Any]:
    writer = _Counting(out)
    listed: list[dict[str, Any]] = []
    total = 0
    for part in parts:
        writer.start(part.name)
        entry: dict[str, Any] = {"key": part.key, "status": "ok"}
        kept: Kept | None = None
        try:
            if ranged is None:
                digest = _copy_part(part, writer)
            else:
                kept = ranged.copy(part, writer.write, functools.partial(_rewind, out, total, writer))
                digest = kept.sha256
        except InputError as exc:
            if part.compression and writer.bytes == 0 and "empty once decompressed" in exc.message:
                entry.update(status="empty", why="empty once decompressed")
            elif not skip_bad:
                raise
            else:
                entry.update(status="bad", why=_reason(exc.message, part.name))
            out.seek(total)  # what the part wrote before it failed is not kept
            out.truncate()
            listed.append(entry)
            continue
        added = writer.bytes > 0 and writer.last != b"\n"
        if added:
            out.write(b"\n")
        lines = writer.lines + (1 if added else 0)
        plain = writer.bytes + (1 if added else 0)
        total += plain
        entry.update(plain_size=plain, lines=lines, sha256=digest, compression=part.compression)
        if kept is not None:
            entry.update(runs=[list(r) for r in kept.runs], ordered=kept.ordered)
        listed.append(entry)
    return {"version": _MANIFEST_VERSION, "size": total, "parts": listed}


def _rewind(out: BinaryIO, total: int, writer: _Counting) -> None:
    """Forget what the part being written wrote (it is read again from its start)."""
    out.seek(total)
    out.truncate()
    writer.start(writer.name)


def _copy_part(part: Part, writer: _Counting) -> str:
    """Write the plain bytes of `part`; the sha256 of the file as it is on disk."""
    h = hashlib.sha256()
    try:
        with open_same(part.path, part.device, part.inode, part.name) as src:
            if part.compression is None:
                while block := src.read(_COPY_CHUNK):
                    h.update(block)
                    writer.write(block)
                return h.hexdigest()
            while block := src.read(_COPY_CHUNK):
                h.update(block)
    except OSError as exc:
        raise InputError(f"cannot read {part.name}: {exc.strerror or exc}") from None
    decompress(part.path, part.compression, writer, display=part.name, identity=(part.device, part.inode))  # type: ignore[arg-type]
    return h.hexdigest()


def _reason(message: str, name: str) -> str:
    """An InputError's message without the part's name it starts with (the skip names it)."""
    return message[len(name) :].lstrip(" :") if message.startswith(name) else message


def _load_manifest(listed: str, plain: str, parts: list[Part]) -> dict[str, Any] | None:
    """The cached manifest when it and the combined file are whole and of these parts."""
    try:
        manifest = json.loads(read_private(listed))
        st = os.lstat(plain)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return None
    if not isinstance(manifest, dict) or manifest.get("version") != _MANIFEST_VERSION:
        return None
    entries = manifest.get("parts")
    if not isinstance(entries, list) or [e.get("key") for e in entries if isinstance(e, dict)] != [
        p.key for p in parts
    ]:
        return None
    if manifest.get("size") != st.st_size:
        return None
    for e in entries:
        if e.get("status") == "ok" and not all(
            isinstance(e.get(k), int) and e[k] >= 0 for k in ("plain_size", "lines")
        ):
            return None
        if e.get("status") == "ok" and "runs" in e and not _runs_ok(e["runs"], e["lines"]):
            return None
    try:
        os.utime(listed, follow_symlinks=False)  # used now: kept by the cache's sweep
    except OSError:
        pass
    return manifest


def _runs_ok(runs: Any, lines: int) -> bool:
    """A cached part's runs (first, count) of its own line numbers: rising, adding up to its lines."""
    if not isinstance(runs, list):
        return False
    end = 0
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and all(type(x) is int for x in run)):
            return False
        if run[0] <= end or run[1] <= 0:
            return False
        end = run[0] + run[1] - 1
    return bool(sum(r[1] for r in runs) == lines)


def _refuse_bad(parts: list[Part], manifest: dict[str, Any], skip_bad: bool) -> None:
    """A cached build that left a damaged part out serves only a run that skips it too."""
    if skip_bad:
        return
    for part, entry in zip(parts, manifest["parts"], strict=True):
        if entry.get("status") == "bad":
            raise InputError(f"{part.name}: {entry.get('why', 'damaged')}")


def _records(
    parts: list[Part], manifest: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The parts read (what the profile and the trace carry), and those skipped once read."""
    records: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    line = 0
    for part, entry in zip(parts, manifest["parts"], strict=True):
        if entry.get("status") != "ok":
            skipped.append({"name": part.name, "why": str(entry.get("why") or entry.get("status"))})
            continue
        lines = int(entry["lines"])
        if entry.get("runs") is not None and not lines:
            continue  # no line of this part is in the time range
        records.append(
            {
                "name": part.name,
                "path": part.path,
                "size": part.size,
                "mtime_ns": part.mtime_ns,
                "compression": part.compression,
                "plain_size": int(entry["plain_size"]),
                "first_line": line + 1,
                "last_line": line + lines,
                "sha256": str(entry.get("sha256") or ""),
                # the file read (rlm.input.snapshot.open_same): what `rlm mcp` checks a run read
                "device": part.device,
                "inode": part.inode,
            }
        )
        if entry.get("runs") is not None:  # its own line numbers: (first, count) runs kept
            records[-1].update(runs=entry["runs"], ordered=bool(entry.get("ordered", True)))
        line += lines
    return records, skipped
