"""Opening the input: a path or stdin, profiled once, its line index cached.

The parent process calls `open_source`; the worker later maps `profile.path`
and loads `profile.index_path` (see rlm.text.textfile), so the file is scanned once
per content, not once per question: the index and the slow parts of the
profile (sha256, invalid lines, longest line) are cached in `cache_dir`, keyed
by size, mtime and a fingerprint of sampled blocks.

Over 400 lines: opening (path, stdin, FIFO), profiling and the cache share the open
file, its temporary copies and their clean-up.
"""

from __future__ import annotations

import atexit
import codecs
import functools
import hashlib
import json
import mmap
import os
import select
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, fields, replace
from typing import Any, BinaryIO

from rlm.errors import InputError
from rlm.input.cachedir import CACHE_KEEP_DAYS, platform_cache_dir, prune_cache, resolve
from rlm.input.compressed import codec_of, decompress, name_without_suffix
from rlm.input.detect import FORMAT_HINTS, detect_format
from rlm.input.digest import Digest
from rlm.input.glance import Glance, glance
from rlm.input.mixedformat import Segment
from rlm.input.snapshot import Identity, change_of
from rlm.input.snapshot import fingerprint as snapshot_fingerprint
from rlm.input.tablejob import TableJob, TableOutcome
from rlm.input.tables import (
    BUILD_PREFIX,
    LINE_CUT_BYTES,
    TableError,
    columns_ahead,
    describe_table,
    early_only_if,
    ensure_table,
    table_cached,
    table_paths,
)
from rlm.privatefiles import private_workdir, publish_private, read_private, replace_private, sweep_workdirs
from rlm.text.index import INDEX_CHUNK_BYTES, read_index
from rlm.text.textcap import human_size
from rlm.text.textfile import INDEX_FLAG_ASCII, MappedText, detect_encoding, dotted, line_starts, write_index
from rlm.text.visible import visible

__all__ = [
    "Indexed",
    "Profile",
    "Source",
    "open_source",
    "open_built",
    "input_key",
    "cache_entry_base",
    "private_temp",
    "default_cache_dir",
    "prune_cache",
    "CACHE_KEEP_DAYS",
    "HEAD_LINES",
    "TAIL_LINES",
]

HEAD_LINES = 5
TAIL_LINES = 5
SAMPLE_LINE_CHARS = 200  # each head/tail line is cut to this many characters
# Bytes of a line the profile reads: a 100 MB single-line JSON costs 64 KB, not its size.
PROFILE_LINE_BYTES = 64 * 1024
# From this size on, a table the cache does not hold is built while the run starts, when the
# caller asks for that (rlm.input.tablejob): below it a build takes about a second.
BACKGROUND_TABLE_BYTES = 64 << 20
# From this size on, a file whose line index the cache does not hold is profiled from its two
# ends (rlm.input.glance) and indexed while the run starts, when the caller asks for a table in
# the background: the scan takes about 0.5 s a gigabyte alone, more beside the run's start.
DEFERRED_INDEX_BYTES = 256 << 20
# The longest the line index of a big file waits for the run's start (litellm's import, ~2 s).
_INDEX_AFTER_WAIT_S = 5.0
# Lines read for the table's sample (its dialect, the columns a format gives ahead).
TABLE_SAMPLE_LINES = 200

# Lines longer than this are cut to it in the table (rlm.input.tables); a file most of whose
# lines are longer gets no table.
TABLE_LINE_MAX_BYTES = LINE_CUT_BYTES
_HASH_CHUNK = 16 * 1024 * 1024
_SPOOL_CHUNK = 1024 * 1024
_FINGERPRINT_BLOCK = 64 * 1024
_VALIDATE_BYTES = 4 * 1024 * 1024
_CACHE_VERSION = 3
# How long a FIFO may stay silent before we call it empty (a writer that has
# opened it but not written yet gets this long).
FIFO_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Profile:
    """What the model is told about the input, and what the worker needs to map it."""

    path: str
    display_name: str
    size: int
    lines: int
    encoding: str
    format: str
    # The sha256, computed in the background: hashing a gigabyte takes about a second on one
    # core, several times the index scan, and nothing needs it until the trace is finished.
    digest: Future[str] = field(repr=False, compare=False)
    invalid_lines: int
    binary: bool
    head: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    longest_line: int = 0  # bytes, line ending included
    index_path: str | None = None
    # What the worker maps: the input itself, or for UTF-16/32 input its UTF-8 copy,
    # transcoded once into the cache (every worker and window then reads UTF-8).
    work_path: str = ""
    work_encoding: str = "utf-8"
    # The parsed table (rlm.input.tables): its description, and the DuckDB file the worker opens.
    table: dict[str, Any] | None = field(default=None, compare=False)
    table_path: str | None = None
    table_error: str | None = None  # why no table was built, when its build failed
    # The table still being built in the background (rlm.input.tablejob): `table` is None until
    # `with_table()` takes the outcome.
    table_job: TableJob | None = field(default=None, compare=False, repr=False)
    # The columns that table will have, where its format names them before the build (a log's).
    columns_ahead: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # What the run says once about its cache (a damaged entry rebuilt, a folder not used).
    warnings: list[str] = field(default_factory=list, compare=False)
    # The file's identity when the run opened it (rlm.input.snapshot), and whether the run reads
    # a private copy of its first bytes (it grew as it was read).
    identity: Identity | None = field(default=None, compare=False)
    snapshot: bool = False
    # gzip, bzip2, xz or zstd for a compressed input (`size` is then the compressed file's), and
    # the size of its plain bytes, which the run reads (rlm.input.compressed).
    compression: str | None = None
    plain_size: int = 0
    # Several inputs read as one (rlm.input.parts): each part read (name, path, size, compression,
    # plain_size, first_line, last_line, sha256), in reading order, and those skipped (name, why).
    parts: list[dict[str, Any]] | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    # The lines kept are those of a time range (--since/--until; rlm.input.rangeplan): its
    # resolved bounds, what it holds in words (`said`), the parts with no line in it.
    time_range: dict[str, Any] | None = None
    # What `rlm stats` says of it, for the first turn (rlm.input.summary): set by the ask.
    summary: str | None = field(default=None, compare=False)
    # The line index still being made in the background (a big file, rlm.input.glance): `lines`
    # is an estimate, `index_path` None and the facts of the scan unknown until `with_index()`.
    index_job: Future[Indexed] | None = field(default=None, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        """The input's sha256; waits for the background hash of a file seen for the first time."""
        try:
            return self.digest.result()
        except OSError as exc:
            return f"unavailable ({exc.strerror or exc})"
        except Exception as exc:  # noqa: BLE001 (said in the trace, never a hang or a crash)
            return f"unavailable ({type(exc).__name__}: {exc})"

    def hash_now(self) -> None:
        """Start the sha256 now, not after the table's build: a run that will wait for it
        before the model's first turn (a memory that may be of this file) waits for it alone."""
        if isinstance(self.digest, Digest):
            self.digest.start()

    def with_index(self) -> Profile:
        """This profile with its line index: waits for one still being made. Raises InputError
        when the file was rewritten while it was indexed, or could not be read."""
        if self.index_job is None:
            return self
        done = self.index_job.result()
        return replace(
            self,
            lines=done.lines,
            index_path=done.index_path,
            work_path=os.path.abspath(done.work_path),
            invalid_lines=done.invalid_lines,
            longest_line=done.longest_line,
            snapshot=done.snapshot,
            index_job=None,
        )

    def with_table(self) -> Profile:
        """This profile with its line index and its table's outcome: waits for a table still being built."""
        profile = self.with_index()
        if profile.table_job is None:
            return profile
        table, error = profile.table_job.result()
        return replace(
            profile,
            table=table,
            table_path=table["path"] if table else None,
            table_error=error,
            table_job=None,
        )

    def appended_note(self) -> str:
        """What the run says of a file written to while it was read (`snapshot`)."""
        return (
            f"{self.display_name} was written to while it was read: this run reads its first "
            f"{self.lines:,} lines ({self.size:,} bytes when opened), as they were indexed"
        )

    def to_dict(self, *, wait: bool = True) -> dict[str, Any]:
        """The profile as JSON; with wait=False, sha256 is None while it is still being computed."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_RECORDED}
        out["sha256"] = self.sha256 if wait or self.digest.done() else None
        if self.parts is None:  # one input: its trace is as it always was
            del out["parts"], out["skipped"]
        if self.time_range is None:
            del out["time_range"]
        if self.index_job is not None:  # `lines` is the estimate; the run records the count once made
            out["lines_estimated"] = True
            del out["invalid_lines"], out["longest_line"]
        return out

    def prompt_block(self, max_chars: int = 1500) -> str:
        """A compact description for a prompt, never longer than `max_chars`."""
        size = human_size(self.size)
        if self.compression:
            size = f"{size} {self.compression}-compressed, {human_size(self.plain_size)} decompressed"
        facts = [size, f"{self.lines:,} lines", f"format: {self.format}", f"encoding: {self.encoding}"]
        if self.index_job is None:
            facts.append(f"longest line: {self.longest_line:,} bytes")
        else:
            facts[1] = f"about {self.lines:,} lines (an estimate: they are being counted)"
        out = [f"File: {visible(self.display_name)} ({', '.join(facts)})"]
        if self.time_range is not None:
            out.append(
                f"Only the lines of a time range are here ({visible(self.time_range['said'])}); "
                "each file's lines keep their own numbers in peek and grep"
            )
        if self.parts is not None:
            out.extend(_parts_block(self.parts, self.skipped, self.table))
        hint = FORMAT_HINTS.get(self.format)
        # A table with parsed fields names them: a split() hint would only compete with it.
        columns = self.table["columns"] if self.table else self.columns_ahead
        if hint and len(columns) <= 2:
            out.append(f"Hint: {hint}")
        if self.binary:
            out.append(
                "Binary data (NUL bytes found): peek and grep show the printable content, "
                "control bytes as '.'."
            )
        if self.invalid_lines and not self.binary:
            out.append(f"{self.invalid_lines:,} lines hold invalid bytes (shown as U+FFFD).")
        if self.table:
            out.append(describe_table(self.table))
        elif self.table_job is not None:
            out.append(table_building(self.columns_ahead))
        if self.summary:
            out.append(visible(self.summary))
        budget = max_chars - sum(len(x) + 1 for x in out)
        sample = self._sample_lines()
        if sample and budget > 40:
            per_line = max(20, budget // (len(sample) + 2) - 8)
            for label, rows in sample:
                out.append(label)
                for number, text in rows:  # a line number, or "…" before the lines are counted
                    cut = text if len(text) <= per_line else text[: per_line - 1] + "…"
                    out.append(f"{number:>7}: {cut}")
        text = "\n".join(out)
        if len(text) > max_chars:
            text = text[: max(0, max_chars - 1)] + "…"
        return text

    def _sample_lines(self) -> list[tuple[str, list[tuple[int | str, str]]]]:
        if not self.lines:
            return []
        head: list[tuple[int | str, str]] = list(enumerate(self.head, start=1))
        if self.index_job is not None:
            # The ends of a big file, read apart: the last lines' numbers are not known yet.
            return [("First lines:", head), ("Last lines:", [("…", text) for text in self.tail])]
        tail_start = max(len(self.head) + 1, self.lines - len(self.tail) + 1)
        skipped = len(self.tail) - (self.lines - tail_start + 1)
        tail: list[tuple[int | str, str]] = list(enumerate(self.tail[skipped:], start=tail_start))
        parts = [("First lines:", head)]
        if tail:
            parts.append(("Last lines:", tail))
        return parts


def table_building(columns: Sequence[tuple[str, str]] = ()) -> str:
    """What the prompt says of a table still being built (rlm.input.tablejob), with the
    columns its format gives where they are known before the build."""
    said = "Table: being built in the background. sql() over `log` waits for it"
    if not columns:
        return (
            said
            + " (its columns are named once it is ready); peek, grep and code that does not query run now."
        )
    names = ", ".join(f"{name} {typ}" for name, typ in columns)
    return (
        f"{said}; peek, grep and code that does not query run now. Its columns, as the format of the "
        f"first lines gives them: {names} (what each holds is said once it is ready)."
    )


# Parts listed one a line up to this many; more are summed up by their first and last.
PARTS_LISTED = 8


def _parts_block(
    parts: list[dict[str, Any]], skipped: list[dict[str, str]], table: dict[str, Any] | None
) -> list[str]:
    """What the prompt says of a several-file input: the parts, their line ranges, what was skipped."""
    total = sum(int(p["size"]) for p in parts)
    out = [
        f"Read as one text: {len(parts)} files, {human_size(total)} on disk, in this order "
        "(context_files lists each with its line range; file_of(n) names line n's file; "
        "lines_of(name) gives a file's lines"
        + ("; the table's column `file` names each row's" if table else "")
        + "; peek and grep head each file's lines with `── name:its line number ──`):"
    ]

    def row(p: dict[str, Any]) -> str:
        packed = f", {p['compression']}" if p.get("compression") else ""
        return f"  {visible(p['name'])}: lines {p['first_line']:,}-{p['last_line']:,}{packed}"

    if len(parts) <= PARTS_LISTED:
        out.extend(row(p) for p in parts)
    else:
        out.extend([row(parts[0]), f"  … {len(parts) - 2:,} more …", row(parts[-1])])
    if skipped:
        shown = "; ".join(f"{visible(s['name'])} ({s['why']})" for s in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        out.append(f"Skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''}: {shown}{more}")
    return out


_NOT_RECORDED = (
    "digest",
    "work_path",
    "work_encoding",
    "table",
    "table_path",
    "table_job",
    "columns_ahead",
    "warnings",
    "identity",
    "summary",
    "index_job",
)


class Source:
    """An opened input. Closing it removes a spooled stdin copy (and a private index).

    Files it owns that are never closed are removed at interpreter exit, not
    when the object is collected: a worker may still be reading them.
    """

    def __init__(self, profile: Profile, *, owned_paths: list[str] | None = None) -> None:
        self.profile = profile
        self.path = profile.path
        self._owned = list(owned_paths or [])

    def close(self) -> None:
        if self.profile.table_job is not None:
            self.profile.table_job.stop()  # before its files go
        for p in self._owned:
            _remove_quietly(p)
            _PENDING.discard(p)
        self._owned.clear()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        job = self.profile.table_job
        try:
            if job is not None and exc_type is None:
                # A run that ended well without needing its table still leaves it built, cached
                # for the next question: no later than when the table was built before the run.
                # (A file changed under the build is then said, exit 3, as it was then.)
                job.result()
        finally:
            self.close()


# Spooled files still on disk; removed at interpreter exit if close() never ran.
_PENDING: set[str] = set()


@atexit.register
def _cleanup_pending() -> None:
    for p in list(_PENDING):
        _remove_quietly(p)


def default_cache_dir() -> str:
    """`$RLM_CACHE_DIR`, else the per-user cache directory (platformdirs) + `/index`.

    Entries go in this folder when rlm made it, else in its subfolder `rlm-cache/`
    (rlm.input.cachedir: the sweep deletes only what rlm can prove it wrote)."""
    env = os.environ.get("RLM_CACHE_DIR")
    if env:
        return env
    return platform_cache_dir()


def open_source(
    arg: str,
    *,
    cache_dir: str | None = None,
    stdin: BinaryIO | None = None,
    display: str | None = None,
    owned: list[str] | None = None,
    background_table: bool = False,
    build_after: threading.Event | None = None,
) -> Source:
    """Open a path, or stdin for "-", and profile it. Raises InputError in one line.

    `display` names the input where it is not its path (a remote object's local copy is named
    by its URL: rlm.input.remote); `owned` are temp files the Source removes with its own.
    `background_table`: a big file's table is built while the caller goes on (the profile's
    `table_job`; rlm.input.tablejob), the Source stopping it when closed, and starting it once
    `build_after` is set (TableJob's `after`)."""
    owned = list(owned or [])
    try:
        if arg == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            if _is_tty(stream):
                raise InputError("stdin is a terminal: pipe the input in, or give a file path")
            spooled: tuple[str, str | None] = _spool(stream, what="stdin")
            path, digest = spooled
            owned.append(path)
            display = "<stdin>"
        else:
            path, digest = _open_path(arg, owned)
            display = display or arg
        profile = _profile(
            path,
            display,
            digest,
            cache_dir,
            owned,
            background_table=background_table,
            build_after=build_after,
        )
    except BaseException:
        _remove_owned(owned)
        raise
    return Source(profile, owned_paths=owned)


def _remove_owned(owned: list[str]) -> None:
    """What a Source would have removed, when opening fails before there is one."""
    for p in owned:
        _remove_quietly(p)
        _PENDING.discard(p)


# --------------------------------------------------------------------------- opening


def _open_path(arg: str, owned: list[str]) -> tuple[str, str | None]:
    """Resolve `arg` to a regular file to map (spooling a pipe); (path, sha256 if known)."""
    try:
        st = os.stat(arg)
    except FileNotFoundError:
        raise InputError(f"no such file: {arg}") from None
    except PermissionError:
        raise InputError(f"permission denied: {arg}") from None
    except OSError as exc:
        raise InputError(f"cannot open {arg}: {exc.strerror or exc}") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise InputError(f"{arg} is a directory, not a file")
    if stat.S_ISFIFO(mode):
        path, digest = _spool_fifo(arg)
        owned.append(path)
        return path, digest
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise InputError(f"{arg} is a device, not a regular file")
    if stat.S_ISSOCK(mode):
        raise InputError(f"{arg} is a socket, not a regular file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{arg} is not a regular file")
    try:
        with open(arg, "rb") as fh:
            fh.read(1)
    except PermissionError:
        raise InputError(f"permission denied: {arg}") from None
    except OSError as exc:
        raise InputError(f"cannot read {arg}: {exc.strerror or exc}") from None
    if st.st_size == 0:
        raise InputError(f"{arg} is empty: there is nothing to ask about")
    return os.path.abspath(arg), None


def _spool_fifo(arg: str) -> tuple[str, str]:
    """Copy a named pipe to a temp file; an empty or writer-less pipe is an error."""
    try:
        fd = os.open(arg, os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError:
        raise InputError(f"permission denied: {arg}") from None
    except OSError as exc:
        raise InputError(f"cannot open {arg}: {exc.strerror or exc}") from None
    try:
        ready, _, _ = select.select([fd], [], [], FIFO_WAIT_SECONDS)
        if not ready:
            raise InputError(f"{arg} is a pipe with no data (nothing written within {FIFO_WAIT_SECONDS:g} s)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as stream:
            fd = -1
            return _spool(stream, what=arg)
    finally:
        if fd >= 0:
            os.close(fd)


def _spool(stream: BinaryIO, *, what: str) -> tuple[str, str]:
    """Copy a stream to a private temp file, hashing as it goes: (path, sha256)."""
    fd, path = tempfile.mkstemp(prefix="rlm-stdin-", suffix=".txt")
    _PENDING.add(path)
    h = hashlib.sha256()
    total = 0
    try:
        with os.fdopen(fd, "wb") as out:
            read = getattr(stream, "read1", stream.read)
            while True:
                block = read(_SPOOL_CHUNK)
                if not block:
                    break
                h.update(block)
                out.write(block)
                total += len(block)
    except OSError as exc:
        _remove_quietly(path)
        _PENDING.discard(path)
        raise InputError(f"cannot read {what}: {exc.strerror or exc}") from None
    if total == 0:
        _remove_quietly(path)
        _PENDING.discard(path)
        noun = "stdin" if what == "stdin" else f"{what} (a pipe)"
        raise InputError(f"{noun} is empty: there is nothing to ask about")
    return path, h.hexdigest()


def _is_tty(stream: BinaryIO) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False


# --------------------------------------------------------------------------- profiling


def input_key(path: str, st: os.stat_result, digest: str | None = None) -> str:
    """The cache key of the file at `path` (stat `st`): its size, mtime and sampled blocks."""
    fingerprint = _fingerprint(path, st.st_size)
    return hashlib.sha256(
        f"v{_CACHE_VERSION}|{st.st_size}|{st.st_mtime_ns}|{fingerprint}|{digest or ''}".encode()
    ).hexdigest()[:32]


def cache_entry_base(directory: str, key: str) -> str | None:
    """`<cache folder>/<key>`, the stem of an entry's files; None with no usable cache folder."""
    folder, _ = resolve(directory)
    return os.path.join(folder, key) if folder is not None else None


def private_temp(prefix: str, suffix: str, owned: list[str]) -> str:
    """A new 0600 temp file the Source owning `owned` removes."""
    return _private_temp(prefix, suffix, owned)


def open_built(
    path: str,
    display: str,
    *,
    key: str,
    cache_dir: str | None,
    owned: list[str],
    parts: Sequence[tuple[int, int, str]] = (),
    finish: Callable[[Profile], Profile] = lambda profile: profile,
) -> Source:
    """Profile a file rlm built itself (several inputs concatenated: rlm.input.parts), its index
    and table cached under `key`, the key of what it was built from. `owned` are the temp files
    the Source removes. `parts`: (first line, last line, name) of each file in it, whose
    formats the table parses each by its own when they differ. `finish`: what the caller adds
    to the profile (the parts read) before the Source is made of it."""
    try:
        profile = finish(_profile(path, display, None, cache_dir, owned, key=key, parts=parts))
    except BaseException:
        _remove_owned(owned)
        raise
    return Source(profile, owned_paths=owned)


def _profile(
    path: str,
    display: str,
    digest: str | None,
    cache_dir: str | None,
    owned: list[str],
    *,
    key: str | None = None,
    parts: Sequence[tuple[int, int, str]] = (),
    background_table: bool = False,
    build_after: threading.Event | None = None,
) -> Profile:
    """The input's profile; its table built now, or with `background_table` (a big file whose
    table is not cached) in a thread of its own, the profile's `table_job`, started once
    `build_after` is set."""
    st = os.stat(path)
    opened = Identity(
        st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, snapshot_fingerprint(path, st.st_size)
    )
    key = key or input_key(path, st, digest)
    cache = _Cache(cache_dir if cache_dir is not None else default_cache_dir(), key)
    with open(path, "rb") as fh:
        head_bytes = fh.read(8)
    # A compressed input (rlm.input.compressed) is read from its plain bytes, decompressed once
    # into the cache under the compressed file's key: everything below reads those.
    compression = codec_of(head_bytes)
    plain_path = path
    if compression is not None:
        plain_path = cache.decompressed(path, compression, owned, display)
        with open(plain_path, "rb") as fh:
            head_bytes = fh.read(8)
    encoding, codec, transcode = detect_encoding(head_bytes[:4])
    work_path = cache.transcoded(plain_path, codec, owned) if transcode else plain_path
    facts = cache.load()
    index_path: str | None = None
    fresh = facts is None or not cache.index_ok(os.path.getsize(work_path))
    if fresh and background_table and not parts and os.path.getsize(work_path) >= DEFERRED_INDEX_BYTES:
        seen = glance(
            work_path,
            "utf-8" if transcode else codec,
            head_lines=TABLE_SAMPLE_LINES,
            tail_lines=TAIL_LINES,
            max_bytes=PROFILE_LINE_BYTES,
        )
        if seen is not None:
            return _profile_before_index(
                seen,
                _Opened(path, display, st, opened, encoding, work_path, compression, plain_path, head_bytes),
                digest,
                cache,
                owned,
                known_sha=(facts or {}).get("sha256"),
                build_after=build_after,
            )
    if facts is None or fresh:
        facts, starts_info = _scan(work_path)
        index_path = cache.store(*starts_info, owned=owned)
        cache.store_facts(facts)
    else:
        index_path = cache.index_path
    with MappedText(work_path, index_path=index_path) as text:
        n, indexed_bytes = text.n_lines, text.size_bytes
        if n == 0:  # a byte-order mark and nothing after it: no line to read, nor to build a table of
            raise InputError(f"{display} holds nothing but a byte-order mark: there is nothing to ask about")

        def first_bytes(i: int) -> str:  # a profile reads the start of each line only
            return text.line_head(i, PROFILE_LINE_BYTES)

        head = [_cap(text.display(first_bytes(i))) for i in range(min(n, HEAD_LINES))]
        tail = [_cap(text.display(first_bytes(i))) for i in range(max(HEAD_LINES, n - TAIL_LINES), n)]
        binary = text.binary
        sample = [first_bytes(i) for i in range(min(n, 50))]
        table_sample = [first_bytes(i) for i in range(min(n, TABLE_SAMPLE_LINES))]
        segments = [
            Segment(first - 1, last, [first_bytes(i) for i in range(first - 1, min(last, first + 199))], name)
            for first, last, name in parts
        ]
    named = name_without_suffix(display) if compression else display  # access.log.gz: an access log
    fmt = "binary" if binary else detect_format(sample, named, head_bytes[:4])
    table = None
    table_error: str | None = None
    # A file of records gets a table, its few lines over TABLE_LINE_MAX_BYTES cut there (one
    # huge line must not cost the whole file its sql()); a file most of whose lines are longer
    # (a one-line JSON document, a minified file) is not records: a table would only copy it.
    long_lines: list[tuple[int, int]] | None = []
    if facts["longest_line"] > TABLE_LINE_MAX_BYTES:
        long_lines = _long_lines(index_path, indexed_bytes)
    tabular = long_lines is not None and len(long_lines) * 2 <= n
    wanted = tabular and not binary and os.environ.get("RLM_TABLES", "").lower() not in ("0", "off", "no")

    table_of = functools.partial(
        _table_of,
        fmt=fmt,
        cache=cache,
        n_lines=n,
        cut=long_lines,
        invalid_lines=facts["invalid_lines"],
        sample=table_sample,
        owned=owned,
        segments=segments,
    )

    background = (
        wanted
        and background_table
        and indexed_bytes >= BACKGROUND_TABLE_BYTES
        and not table_cached(cache.base)
    )
    if wanted and not background:
        table, table_error = table_of(work_path)
    # One snapshot per run (rlm.input.snapshot): the index, the table and every worker's view
    # are of the same bytes. A file rewritten while it was read is refused; a log appended to
    # is read as it was indexed, from a private copy of those bytes (its table built again
    # from the copy when the growth broke the build).
    changed = change_of(path, opened)
    _refuse_rewritten(changed, compression, cache, display)
    snapshot = changed is not None and work_path == path
    if snapshot:
        work_path = _snapshot(path, indexed_bytes, owned)
        if wanted and table is None and not background:
            table, table_error = table_of(work_path)
        if table is not None:
            table = _grown(table, n)
    # The sha256 starts once the table is built: hashing beside the build's threads took a core
    # from it (1 GB access log, 2 cores, back to back: 10.7 s against 7.3 s), and nothing waits
    # for the digest before the model's first turn unless a memory may match, whose wait starts
    # it at once (rlm.input.digest).
    job: TableJob | None = None
    if "sha256" in facts:
        sha = Digest.known(facts["sha256"])
    else:
        known = facts
        sha = _hasher(
            work_path if snapshot else path,
            digest,
            lambda value: cache.store_facts({**known, "sha256": value}),
        )
    hashing = None if sha.done() else sha.compute_once
    if background:
        job = TableJob(
            functools.partial(
                _table_while_run_starts,
                table_of,
                work_path,
                path,
                opened,
                indexed_bytes,
                n,
                owned,
                grown=snapshot,
                cache_base=cache.base,
                display=display,
            ),
            then=hashing,
            after=build_after,
        )
    elif hashing is not None:
        threading.Thread(target=hashing, name="rlm-sha256", daemon=True).start()
    return Profile(
        path=os.path.abspath(path),
        display_name=display,
        size=st.st_size,
        lines=n,
        encoding=encoding,
        format=fmt,
        digest=sha,
        invalid_lines=facts["invalid_lines"],
        binary=binary,
        head=head,
        tail=tail,
        longest_line=facts["longest_line"],
        index_path=index_path,
        work_path=os.path.abspath(work_path),
        table=table,
        table_path=table["path"] if table else None,
        table_error=table_error,
        table_job=job,
        columns_ahead=tuple(columns_ahead(fmt, table_sample)) if job is not None else (),
        warnings=cache.warnings,
        identity=opened,
        snapshot=snapshot,
        compression=compression,
        plain_size=os.path.getsize(plain_path),
    )


def _table_of(
    work_path: str,
    *,
    fmt: str,
    cache: _Cache,
    n_lines: int,
    cut: list[tuple[int, int]] | None,
    invalid_lines: int,
    sample: list[str],
    owned: list[str],
    segments: Sequence[Segment] = (),
) -> TableOutcome:
    """The input's table built from `work_path` (or found cached), or why there is none: the
    investigation goes on without sql(), and says why."""
    try:
        return ensure_table(
            work_path,
            fmt,
            cache_base=cache.base,
            n_lines=n_lines,
            cut=cut or None,
            warnings=cache.warnings,
            encoding="utf-8",  # the worker's copy: UTF-16/32 input is transcoded first
            invalid_lines=invalid_lines,
            sample=sample,
            owned=owned,
            segments=segments,
        ), None
    except TableError as exc:
        return None, str(exc)


def _refuse_rewritten(changed: Any, compression: str | None, cache: _Cache, display: str) -> None:
    """Raise InputError (exit 3) for a file rewritten or replaced while it was indexed, what was
    built of it going with it; a log appended to is read from a snapshot instead. A compressed
    file that changed as it was read was decompressed from bytes of both versions: refused too."""
    if changed is None or (changed.how == "appended to" and compression is None):
        return
    # What was built under the opened identity's key may hold the new bytes in part: it goes,
    # so that the old file, were it put back, gets a table of its own bytes.
    if cache.base is not None:
        for built in (cache.index_path, cache.facts_path, cache.plain_path, *table_paths(cache.base)):
            _remove_quietly(built)
    raise InputError(f"{display} was {changed.how} while it was being read: ask again once it is stable")


@dataclass(frozen=True)
class _Opened:
    """What _profile learned of the input before its lines: passed on to the profile made before its index."""

    path: str
    display: str
    st: os.stat_result
    identity: Identity
    encoding: str
    work_path: str
    compression: str | None
    plain_path: str
    head_bytes: bytes


@dataclass(frozen=True)
class Indexed:
    """A big file's line index made while the run starts, and what its scan found (Profile.with_index)."""

    lines: int
    index_path: str
    work_path: str  # a snapshot of the bytes indexed, when the file was appended to as it was read
    invalid_lines: int
    longest_line: int
    snapshot: bool
    indexed_bytes: int
    facts: dict[str, Any]
    seconds: float


def _profile_before_index(
    seen: Glance,
    opened: _Opened,
    digest: str | None,
    cache: _Cache,
    owned: list[str],
    *,
    known_sha: str | None,
    build_after: threading.Event | None,
) -> Profile:
    """A big file's profile from its two ends (`seen`), its line index made in a thread of its
    own (the profile's `index_job`), its table built once the index is made and `build_after`
    is set, and its sha256 after that: the run's first model turn waits for none of them."""
    path, display, work_path = opened.path, opened.display, opened.work_path
    named = name_without_suffix(display) if opened.compression else display
    fmt = "binary" if seen.binary else detect_format(seen.head[:50], named, opened.head_bytes[:4])
    indexed: Future[Indexed] = Future()

    def make_index() -> None:
        if build_after is not None:
            # litellm's import, which the model's first request waits for, runs 0.6-0.9 s
            # longer beside a 3 GB file's scan (2 cores; a scan in a process of its own: 0.55 s).
            build_after.wait(_INDEX_AFTER_WAIT_S)
        began = time.monotonic()
        try:
            facts, starts_info = _scan(work_path)
            index_path = cache.store(*starts_info, owned=owned)
            cache.store_facts(facts)
            with MappedText(work_path, index_path=index_path) as text:
                n, indexed_bytes = text.n_lines, text.size_bytes
            changed = change_of(path, opened.identity)
            _refuse_rewritten(changed, opened.compression, cache, display)
            snapshot = changed is not None and work_path == path
            work = _snapshot(path, indexed_bytes, owned) if snapshot else work_path
            done = Indexed(
                n,
                index_path,
                work,
                facts["invalid_lines"],
                facts["longest_line"],
                snapshot,
                indexed_bytes,
                facts,
                time.monotonic() - began,
            )
        except InputError as exc:
            indexed.set_exception(exc)
        except OSError as exc:
            indexed.set_exception(InputError(f"cannot read {display}: {exc.strerror or exc}"))
        except BaseException as exc:  # noqa: BLE001 (handed to whoever waits: never a hang)
            indexed.set_exception(exc)
        else:
            indexed.set_result(done)

    threading.Thread(target=make_index, name="rlm-line-index", daemon=True).start()

    def sha256_once_indexed() -> str:
        # Hashed beside the scan (a wait started it early: rlm.input.digest), and again from
        # the run's own copy when the file grew as it was indexed: the digest is of the bytes read.
        value = digest or _sha256_of(path)
        done = indexed.result()  # raises what the index met: the digest says why it is unavailable
        if done.snapshot and digest is None:
            value = _sha256_of(done.work_path)
        cache.store_facts({**done.facts, "sha256": value})  # before whoever waits finds it
        return value

    sha = Digest.known(known_sha) if known_sha is not None else Digest(sha256_once_indexed)
    hashing = sha.compute_once

    wanted = not seen.binary and os.environ.get("RLM_TABLES", "").lower() not in ("0", "off", "no")
    job: TableJob | None = None
    if wanted:

        def build() -> TableOutcome:
            done = indexed.result()  # InputError: the file changed as it was indexed (TableJob says so)
            long_lines: list[tuple[int, int]] | None = []
            if done.longest_line > TABLE_LINE_MAX_BYTES:
                long_lines = _long_lines(done.index_path, done.indexed_bytes)
            if long_lines is None or len(long_lines) * 2 > done.lines:
                return (
                    None,
                    f"most of its lines are over {human_size(TABLE_LINE_MAX_BYTES)}: they are not records",
                )

            table_of = functools.partial(
                _table_of,
                fmt=fmt,
                cache=cache,
                n_lines=done.lines,
                cut=long_lines,
                invalid_lines=done.invalid_lines,
                sample=seen.head,
                owned=owned,
            )
            return _table_while_run_starts(
                table_of,
                done.work_path,
                path,
                opened.identity,
                done.indexed_bytes,
                done.lines,
                owned,
                grown=done.snapshot,
                cache_base=cache.base,
                display=display,
            )

        job = TableJob(build, then=hashing, after=build_after)
    else:
        threading.Thread(target=hashing, name="rlm-sha256", daemon=True).start()
    shown = dotted if seen.binary else str
    return Profile(
        path=os.path.abspath(path),
        display_name=display,
        size=opened.st.st_size,
        lines=seen.estimated_lines,
        encoding=opened.encoding,
        format=fmt,
        digest=sha,
        invalid_lines=0,
        binary=seen.binary,
        head=[_cap(shown(line)) for line in seen.head[:HEAD_LINES]],
        tail=[_cap(shown(line)) for line in seen.tail],
        index_path=None,
        work_path=os.path.abspath(work_path),
        table_job=job,
        columns_ahead=tuple(columns_ahead(fmt, seen.head)) if job is not None else (),
        warnings=cache.warnings,
        identity=opened.identity,
        compression=opened.compression,
        plain_size=os.path.getsize(opened.plain_path),
        index_job=indexed,
    )


def _snapshot(path: str, size: int, owned: list[str]) -> str:
    """A private copy of the first `size` bytes of `path` (a log still being written to)."""
    copy = _private_temp("rlm-snapshot-", ".txt", owned)
    with open(path, "rb") as src, open(copy, "wb") as out:
        left = size
        while left > 0 and (block := src.read(min(_SPOOL_CHUNK * 16, left))):
            out.write(block)
            left -= len(block)
    return copy


def _long_lines(index_path: str, size: int) -> list[tuple[int, int]] | None:
    """(start, end) byte offsets of the lines longer than TABLE_LINE_MAX_BYTES, from the line
    index, read a million lines at a time; None when the index cannot be read."""
    import numpy as np

    loaded = read_index(index_path, size)
    if loaded is None:
        return None
    mm, view, _ = loaded
    spans: list[tuple[int, int]] = []
    step = 1 << 20
    try:
        for lo in range(0, len(view) - 1, step):
            starts = np.asarray(view[lo : lo + step + 1], dtype=np.int64)
            for i in np.nonzero(np.diff(starts) > TABLE_LINE_MAX_BYTES)[0]:
                spans.append((int(starts[i]), int(starts[i + 1])))
            del starts
    finally:
        view.release()
        mm.close()
    return spans


def _hasher(path: str, known: str | None, on_done: Any) -> Digest:
    """The file's sha256 (`known`, or computed once by whoever needs it first: rlm.input.digest;
    hashlib drops the GIL on big buffers); the facts are cached once it is known, so a second
    question skips the scan."""
    if known is not None:
        on_done(known)
        return Digest.known(known)

    def compute() -> str:
        value = _sha256_of(path)
        on_done(value)  # cached first, so whoever waits on the digest finds it stored
        return value

    return Digest(compute)


def _sha256_of(path: str) -> str:
    # Not hashlib.file_digest: its 256 KiB reads take the GIL back thousands of times a
    # gigabyte, each a wait of up to the switch interval beside the run's Python threads
    # (litellm's import, which an early hash runs beside); a few big reads wait a few times.
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _grown(table: dict[str, Any], n_lines: int) -> dict[str, Any]:
    """The table of a file that grew as it was read, its note saying so."""
    grown = f"the file grew while it was read: the table holds its first {n_lines:,} lines, as indexed"
    return {**table, "note": "; ".join(x for x in (table.get("note"), grown) if x)}


def _table_while_run_starts(
    table_of: Callable[[str], TableOutcome],
    work_path: str,
    path: str,
    opened: Identity,
    indexed_bytes: int,
    n_lines: int,
    owned: list[str],
    *,
    grown: bool,
    cache_base: str | None,
    display: str,
) -> TableOutcome:
    """The table of a big file, built while the run starts (rlm.input.tablejob). The file was
    checked unchanged once indexed; one appended to during the build is built again from a
    private copy of the bytes indexed (its lines then differ from the index); one rewritten or
    replaced ends the run (InputError, exit 3) and its table goes, as when that is seen before
    the run starts."""
    # An early table (rlm.input.tables.build_early) only of a file not rewritten meanwhile.
    with early_only_if(lambda: work_path != path or change_of(path, opened) is None):
        table, error = table_of(work_path)
    if work_path == path:
        changed = change_of(path, opened)
        if changed is not None and changed.how != "appended to":
            if cache_base is not None:
                for built in table_paths(cache_base):
                    _remove_quietly(built)
            raise InputError(
                f"{display} was {changed.how} while it was being read: ask again once it is stable"
            )
        if changed is not None and table is None:
            table, error = table_of(_snapshot(path, indexed_bytes, owned))
            grown = True
    return (_grown(table, n_lines) if grown else table) if table is not None else None, error


def _scan(path: str) -> tuple[dict[str, Any], tuple[Any, int, int]]:
    """One pass over the bytes (UTF-8 or single-byte): line starts, invalid lines, the longest line."""
    size = os.path.getsize(path)
    if size == 0:
        starts = line_starts(b"")
        return {"invalid_lines": 0, "longest_line": 0}, (starts, 0, INDEX_FLAG_ASCII)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        first = 3 if mm[:3] == b"\xef\xbb\xbf" else 0
        wide: list[tuple[int, int]] = []
        measured: list[int] = []
        starts = line_starts(mm, first, non_ascii=wide, chunk_bytes=INDEX_CHUNK_BYTES, longest=measured)
        invalid, all_ascii = _count_invalid_lines(mm, starts, wide), not wide
        longest = measured[0]
    return {"invalid_lines": invalid, "longest_line": longest}, (
        starts,
        size,
        INDEX_FLAG_ASCII if all_ascii else 0,
    )


def _count_invalid_lines(mm: Any, starts: Any, ranges: list[tuple[int, int]]) -> int:
    """Lines holding bytes that are not valid UTF-8, looking only at the non-ASCII `ranges`."""
    import numpy as np

    bad_lines: set[int] = set()
    view = memoryview(mm)
    try:
        for off, end in ranges:
            # Widen to whole lines so that no character straddles a cut.
            line = int(np.searchsorted(starts, off, side="right")) - 1
            lo = int(starts[line])
            k = int(np.searchsorted(starts, end, side="left"))
            hi = int(starts[k]) if k < len(starts) else len(mm)
            pos = lo
            while pos < hi:
                # Decoded a few MB at a time, cut at a character boundary: one huge line
                # must not become one huge string.
                stop = end_of_piece = min(hi, pos + _VALIDATE_BYTES)
                while pos < stop < hi and mm[stop] & 0xC0 == 0x80:
                    stop -= 1
                if stop <= pos:  # nothing but continuation bytes: invalid, and reported as such
                    stop = end_of_piece
                try:
                    str(view[pos:stop], "utf-8")
                    pos = stop
                except UnicodeDecodeError as exc:
                    if exc.reason == "unexpected end of data" and stop < hi:
                        pos = pos + exc.start if exc.start else stop  # a sequence cut at `stop`: resume at it
                        continue
                    bad = pos + exc.start
                    line = int(np.searchsorted(starts, bad, side="right")) - 1
                    bad_lines.add(line)
                    pos = max(int(starts[line + 1]) if line + 1 < len(starts) else hi, bad + 1)
    finally:
        view.release()
    return len(bad_lines)


def _fingerprint(path: str, size: int) -> str:
    """Hash of a few sampled blocks (start, middle, end): cheap, catches most edits."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        for off in sorted(
            {0, max(0, size // 2 - _FINGERPRINT_BLOCK // 2), max(0, size - _FINGERPRINT_BLOCK)}
        ):
            fh.seek(off)
            h.update(fh.read(_FINGERPRINT_BLOCK))
    return h.hexdigest()[:16]


def _transcode(path: str, codec: str, out: BinaryIO) -> None:
    decoder = codecs.getincrementaldecoder(codec)(errors="replace")
    with open(path, "rb") as src:
        while block := src.read(_SPOOL_CHUNK * 4):
            out.write(decoder.decode(block).encode("utf-8"))
        out.write(decoder.decode(b"", final=True).encode("utf-8"))


def _private_temp(prefix: str, suffix: str, owned: list[str]) -> str:
    """A new 0600 temp file (mkstemp) the Source removes: where entries go with no usable cache."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(fd)
    owned.append(path)
    _PENDING.add(path)
    return path


def _is_own_file(path: str) -> bool:
    """A regular file of this user's: a symlink or another user's file at an entry's name was
    not written by rlm and is neither read nor trusted."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


class _Cache:
    """`<key>.json` (profile facts), `<key>.idx` (line starts), `<key>.utf8` (a UTF-8 copy) in the
    cache folder (rlm.input.cachedir), each a 0600 file written whole under a temporary name.

    With no usable folder (unwritable, or not safe: `warnings` says why) every entry is a private
    temp file the Source removes. A damaged entry is said once in `warnings` and rebuilt."""

    def __init__(self, directory: str, key: str) -> None:
        self.warnings: list[str] = []
        folder, problem = resolve(directory)
        if problem:
            self.warnings.append(problem)
        self.directory = folder
        if folder is not None:
            prune_cache(folder)
            sweep_workdirs(folder, BUILD_PREFIX)  # a killed build's folder, an hour old, goes now
        self.base = os.path.join(folder, key) if folder is not None else None
        self.facts_path = f"{self.base}.json" if self.base else ""
        self.index_path = f"{self.base}.idx" if self.base else ""
        self.plain_path = f"{self.base}.plain" if self.base else ""

    def _damaged(self, what: str, why: str) -> None:
        self.warnings.append(f"a damaged cache entry of this input was rebuilt ({what}: {why})")

    def load(self) -> dict[str, Any] | None:
        if not self.base or not os.path.lexists(self.facts_path):
            return None
        try:
            facts = json.loads(read_private(self.facts_path))
            os.utime(self.facts_path, follow_symlinks=False)  # used now: kept by the sweep
        except (OSError, ValueError) as exc:
            self._damaged("facts", _why(exc))
            return None
        if not isinstance(facts, dict) or not {"invalid_lines", "longest_line"} <= facts.keys():
            self._damaged("facts", "not rlm's facts")
            return None
        if not all(isinstance(facts[k], int) and facts[k] >= 0 for k in ("invalid_lines", "longest_line")):
            self._damaged("facts", "not rlm's facts")
            return None
        return facts

    def index_ok(self, size: int) -> bool:
        """Whether the cached index is whole and of these bytes (a missing one is only rebuilt)."""
        if not self.base or not os.path.lexists(self.index_path):
            return False
        loaded = read_index(self.index_path, size) if _is_own_file(self.index_path) else None
        if loaded is None:
            self._damaged("line index", "not a line index of this file")
            return False
        mm, view, _ = loaded
        view.release()
        mm.close()
        return True

    def store_facts(self, facts: dict[str, Any]) -> None:
        if not self.base:
            return
        try:
            with replace_private(self.facts_path) as fh:
                fh.write(json.dumps(facts).encode("utf-8"))
        except OSError:
            pass  # an unwritable cache only costs a rescan next time

    def transcoded(self, path: str, codec: str, owned: list[str]) -> str:
        """A UTF-8 copy of a UTF-16/32 input, made once (streamed, a few MB at a time)."""
        if self.base:
            target = f"{self.base}.utf8"
            if _is_own_file(target):
                return target
            try:
                with replace_private(target) as out:
                    _transcode(path, codec, out)
                return target
            except OSError:
                pass
        private = _private_temp("rlm-utf8-", ".txt", owned)
        with open(private, "wb") as out:
            _transcode(path, codec, out)
        return private

    def decompressed(self, path: str, codec: str, owned: list[str], display: str) -> str:
        """The plain bytes of a compressed input, decompressed once (streamed, a chunk at a
        time); a later question finds them. Raises InputError when the input is damaged."""
        if self.plain_path:
            if _is_own_file(self.plain_path):
                return self.plain_path
            try:
                with replace_private(self.plain_path) as out:
                    decompress(path, codec, out, display=display)
                return self.plain_path
            except OSError:
                pass  # an unwritable cache: a private temp file instead
        private = _private_temp("rlm-plain-", ".txt", owned)
        with open(private, "wb") as out:
            decompress(path, codec, out, display=display)
        return private

    def store(self, starts: Any, size: int, flags: int, *, owned: list[str]) -> str:
        """Write the index; falls back to a private temp index the Source removes.
        The facts follow once the file's sha256 is known (store_facts)."""
        if self.base:
            try:
                _write_index_private(starts, size, flags, self.index_path)
                return self.index_path
            except OSError:
                pass
        tmp = _private_temp("rlm-index-", ".idx", owned)
        _write_index_private(starts, size, flags, tmp)
        return tmp


def _write_index_private(starts: Any, size: int, flags: int, dest: str) -> None:
    """write_index in a private work folder beside `dest`, then the file made 0600 and renamed
    onto `dest`: never a file others can read, never a write through a planted symlink."""
    with private_workdir(os.path.dirname(dest) or None, BUILD_PREFIX) as work:
        built = os.path.join(work, "index.idx")
        write_index(starts, built, size, flags)
        publish_private(built, dest)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    return "not JSON"


# --------------------------------------------------------------------------- helpers


def _cap(s: str, n: int = SAMPLE_LINE_CHARS) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
