"""A read-only, memory-mapped view of one text file, for the sandbox worker.

The worker imports this module at start-up, so it depends on the standard
library only; numpy is imported lazily, the first time a vectorised scan is
worth it (building a line index, a grep), never at import.

The file is never read into Python objects as a whole: lines, peeks and greps
are cut from the mapped bytes through a line-offset index (an int64 array of
line starts, built by a vectorised scan or loaded from a prebuilt index file).

Conventions: line numbers are 1-based and relative to the window the object
was opened on; lines come without their ending ("\\n" or "\\r\\n"); text is
decoded with errors="replace", so invalid bytes never raise.

Over 400 lines: the index, the mapped view and the lazy text share one mapping and
one index (windows, `Lines` and `LazyText` are views of the same object); a split
along index / view / lazy text is planned (docs/architecture.md).
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import mmap
import os
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, overload

__all__ = [
    "CHAR_BLOCK_BYTES",
    "GrepResult",
    "Lines",
    "MappedText",
    "SCAN_CHUNK_BYTES",
    "LazyPattern",
    "LazyText",
    "ShiftedMatch",
    "TEXT_IN_MEMORY_MAX_BYTES",
    "build_index",
    "detect_encoding",
    "line_starts",
    "re_compile",
    "re_findall",
    "re_finditer",
    "re_fullmatch",
    "re_match",
    "re_search",
    "re_split",
    "re_sub",
    "re_subn",
    "read_index",
    "start_scan_threads",
    "write_index",
]

# Bytes scanned per step by grep, the index builder and LazyText: large enough
# that the per-step Python overhead vanishes, small enough that transient copies
# (a chunk's bytes and its decoded text) stay a few MB.
SCAN_CHUNK_BYTES = 4 * 1024 * 1024
# Bytes decoded per step when iterating over lines: fits in the CPU cache, which
# makes decode + split about 4x faster than on megabytes at once.
ITER_BLOCK_BYTES = 256 * 1024
# peek_lines and grep return lines whole up to this size; a longer line (a
# binary blob, a minified file) is cut there with a note, so that one peek can
# never decode a gigabyte. `lines[i]` always returns the whole line.
SHOWN_LINE_MAX_BYTES = 4 * 1024 * 1024
# Bytes per block of the character-offset table (peek by characters, len of the
# text). A block is decoded whole when a peek lands in it: ~1 ms per block.
CHAR_BLOCK_BYTES = 1024 * 1024

# Threads for vectorised scans (index build, literal grep); numpy drops the GIL.
MAX_SCAN_THREADS = 4
SCAN_THREAD_STACK = 1024 * 1024

INDEX_MAGIC = b"RLMIDX01"
# magic, byte size of the indexed buffer, number of int64 entries, first data byte
_INDEX_HEADER = struct.Struct("<8sQQQ")

_UTF8_BOM = b"\xef\xbb\xbf"
_REGEX_SPECIAL = set(".^$*+?{}[]|()\\")
_LITERAL_ESCAPE = re.compile(r"\\([^A-Za-z0-9])")  # "\." and the like stand for the character
# Encodings whose bytes map one to one onto characters: offsets need no table.
_SINGLE_BYTE = {"latin-1", "iso8859-1", "ascii", "cp1252", "cp1250", "cp1251", "iso8859-15"}
_CONTROL_TO_DOT = {c: "." for c in range(32) if c != 9}
_CONTROL_TO_DOT[127] = "."


def _numpy() -> Any:
    # Imported on first use: the worker's start-up must not pay ~100 ms for it.
    import numpy

    return numpy


@dataclass
class GrepResult:
    """Lines matching a pattern: the exact total and the first few matches."""

    total: int
    matches: list[tuple[int, str]] = field(default_factory=list)


# --------------------------------------------------------------------------- index


def line_starts(buf: Any, first: int = 0, non_ascii: list[tuple[int, int]] | None = None) -> Any:
    """Byte offsets where each line starts, plus a final sentinel (the end).

    Entry i is where line i (0-based) starts; entry n is the buffer's end, so
    line i spans [starts[i], starts[i+1]) including its newline. `first` skips a
    byte-order mark. Returns an int64 numpy array of n_lines + 1 entries.
    With a `non_ascii` list, the same pass appends the (start, end) byte ranges
    that hold a byte >= 0x80 (a cheap reduction on data already in cache).
    """
    np = _numpy()
    size = len(buf)
    if first >= size:
        return np.array([size], dtype=np.int64)

    def newlines(off: int) -> tuple[Any, bool]:
        chunk = np.frombuffer(buf, dtype=np.uint8, count=min(SCAN_CHUNK_BYTES, size - off), offset=off)
        hits = np.flatnonzero(chunk == 10)
        hits += off + 1
        return hits, non_ascii is not None and int(chunk.max()) >= 128

    parts = [np.array([first], dtype=np.int64)]
    offsets = range(first, size, SCAN_CHUNK_BYTES)
    for off, (hits, wide) in zip(offsets, _parallel_map(newlines, offsets), strict=True):
        parts.append(hits)
        if wide and non_ascii is not None:
            non_ascii.append((off, min(off + SCAN_CHUNK_BYTES, size)))
    if buf[size - 1] != 10:
        parts.append(np.array([size], dtype=np.int64))
    return np.concatenate(parts).astype(np.int64, copy=False)


_threads_ok = True  # False once a thread could not start (e.g. RLIMIT_NPROC in the sandbox)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def start_scan_threads(count: int | None = None) -> int:
    """Start the scan threads now and keep them; returns how many run.

    The sandbox worker calls this before lock-down: RLIMIT_NPROC 0 forbids new
    threads afterwards, but threads that already exist keep working, so grep
    and the index scan use every core inside the worker too.
    """
    global _pool
    workers = count or min(MAX_SCAN_THREADS, os.cpu_count() or 1)
    if _pool is not None or workers <= 1:
        return workers if _pool is not None else 1
    global _pool_size
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlm-scan")
    # A pool starts a thread per submit only while none is idle: tasks that wait
    # for each other make it start all of them at once.
    barrier = threading.Barrier(workers)
    # Scans need little stack; the default 8 MB each would come out of the worker's
    # address-space limit.
    previous = threading.stack_size(SCAN_THREAD_STACK)
    try:
        started = [pool.submit(barrier.wait, 10) for _ in range(workers)]
    except RuntimeError:  # "can't start new thread"
        barrier.abort()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        threading.stack_size(previous)
    for future in started:
        future.result()
    _pool, _pool_size = pool, workers
    return workers


def _parallel_map(fn: Any, items: Sequence[Any]) -> Iterator[Any]:
    """map() over the scan threads when there is more than one item and core, results in order.

    numpy's comparisons and searches release the GIL, so the chunks of one scan
    run on all cores. Where threads cannot start (a worker whose threads were
    not started before lock-down), the work runs in the calling thread.
    """
    global _threads_ok
    if len(items) <= 1 or not _threads_ok:
        yield from map(fn, items)
        return
    if _pool is None:
        try:
            start_scan_threads()
        except RuntimeError:  # "can't start new thread"
            _threads_ok = False
    if _pool is None:
        yield from map(fn, items)
        return
    # At most one task per thread in flight ahead of the consumer: results stay in order and
    # a consumer that stops early (grep's first matches) leaves little work behind.
    window = _pool_size
    futures: list[Any] = []
    try:
        for item in items:
            futures.append(_pool.submit(fn, item))
            if len(futures) > window:
                yield futures.pop(0).result()
        while futures:
            yield futures.pop(0).result()
    finally:
        for future in futures:
            future.cancel()


INDEX_FLAG_ASCII = 1  # every byte of the indexed buffer is ASCII


def write_index(starts: Any, out_path: str, buffer_size: int, flags: int = 0) -> None:
    """Write a line-start array to `out_path` atomically (temp file + rename)."""
    np = _numpy()
    arr = np.ascontiguousarray(starts, dtype="<i8")
    tmp = f"{out_path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(_INDEX_HEADER.pack(INDEX_MAGIC, buffer_size, len(arr), flags))
        fh.write(arr.tobytes())
    os.replace(tmp, out_path)


def read_index(index_path: str, buffer_size: int) -> tuple[mmap.mmap, memoryview, int] | None:
    """Map a prebuilt index: (mapping, int64 view, flags); None if missing, corrupt or for other bytes."""
    try:
        with open(index_path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size < _INDEX_HEADER.size + 8:
                return None
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    magic, size, count, flags = _INDEX_HEADER.unpack_from(mm, 0)
    if magic != INDEX_MAGIC or size != buffer_size or len(mm) != _INDEX_HEADER.size + 8 * count:
        mm.close()
        return None
    view = memoryview(mm)[_INDEX_HEADER.size :].cast("q")
    if count < 1 or view[count - 1] != buffer_size:
        view.release()
        mm.close()
        return None
    return mm, view, flags


def build_index(path: str, out_path: str) -> int:
    """Scan the UTF-8 (or single-byte) file at `path` and write its index; returns n_lines."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            starts = line_starts(b"")
        else:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                starts = line_starts(mm, 3 if mm[:3] == _UTF8_BOM else 0)
    write_index(starts, out_path, size)
    return len(starts) - 1


# --------------------------------------------------------------------------- lines


class Lines(Sequence[str]):
    """Read-only list-like view of a MappedText's lines, decoded on demand.

    Slicing gives another view, never a copy: `context_lines[1:]` on a file of
    millions of lines costs nothing until it is read (`list(view)` copies).
    """

    __slots__ = ("_t", "_r")

    # A view this long or shorter echoes like the list it stands for.
    REPR_ITEMS = 1000

    def __init__(self, text: MappedText, rows: range | None = None) -> None:
        self._t = text
        self._r = range(text.n_lines) if rows is None else rows

    def __len__(self) -> int:
        return len(self._r)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Lines: ...

    def __getitem__(self, index: int | slice) -> str | Lines:
        if isinstance(index, slice):
            return Lines(self._t, self._r[index])
        try:
            i = index.__index__()
        except AttributeError:
            raise TypeError(f"line indices must be integers or slices, not {type(index).__name__}") from None
        try:
            return self._t._line(self._r[i])
        except IndexError:
            raise IndexError("line index out of range") from None

    def __iter__(self) -> Iterator[str]:
        r = self._r
        if r.step != 1:
            return (self._t._line(i) for i in r)
        # Blocks small enough to stay in cache (decoding 1 GB at once is 4x slower),
        # chained in C so each line costs no generator step.
        return itertools.chain.from_iterable(
            self._t._decode_lines(i, j) for i, j in self._t._line_blocks(r.start, r.stop)
        )

    def __reversed__(self) -> Iterator[str]:
        for i in reversed(self._r):
            yield self._t._line(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares like a list, so unhashable like one

    def __add__(self, other: Sequence[str]) -> list[str]:
        return [*self, *other]

    def __radd__(self, other: Sequence[str]) -> list[str]:
        return [*other, *self]

    def copy(self) -> list[str]:
        return list(self)

    def __repr__(self) -> str:
        n, name = len(self._r), os.path.basename(self._t.path)
        if self._r == range(self._t.n_lines):
            return f"<{n:,} lines of {name} (read-only)>"
        if n <= self.REPR_ITEMS:
            return repr(list(self))
        head = ", ".join(repr(self[k]) for k in range(3))
        return f"[{head}, ...] <a view of {n:,} of the {self._t.n_lines:,} lines of {name} (read-only)>"


# --------------------------------------------------------------------------- the file


class MappedText:
    """A file (or a window of its lines) mapped read-only, decoded on demand."""

    def __init__(
        self,
        path: str,
        *,
        encoding: str = "utf-8",
        start_line: int | None = None,
        end_line: int | None = None,
        index_path: str | None = None,
    ) -> None:
        self.path = path
        self._mm: mmap.mmap | None = None
        self._index_mm: mmap.mmap | None = None
        self._starts_np: Any = None
        self._char_bytes: list[int] = []
        self._char_offsets: list[int] = []
        self._char_done = False
        self._block_cache: tuple[int, str] | None = None
        self._ascii_ranges: dict[tuple[int, int], bool] = {}
        self._all_ascii: bool | None = None  # None: not known yet
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(4)
            if size:
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.encoding, codec, transcode = detect_encoding(head, encoding)
        buf: Any = self._mm if self._mm is not None else b""
        if transcode:
            # UTF-16/32 and other multi-byte encodings: decoded once and held as
            # UTF-8 bytes, so every other path works on one byte format.
            buf = bytes(buf).decode(codec, errors="replace").encode("utf-8")
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            self._decode_as = "utf-8"
        else:
            self._decode_as = codec
        self._buf = buf
        self._single_byte = codecs.lookup(self._decode_as).name in _SINGLE_BYTE
        self.size_bytes = len(buf)
        self.binary = _looks_binary(buf)

        loaded = read_index(index_path, len(buf)) if index_path else None
        if loaded is not None:
            self._index_mm, self._starts, flags = loaded
            self._all_ascii = bool(flags & INDEX_FLAG_ASCII)
        else:
            first = 3 if (not transcode and buf[:3] == _UTF8_BOM) else 0
            self._starts_np = line_starts(buf, first)
            self._starts = memoryview(self._starts_np)
        total = len(self._starts) - 1
        lo = 1 if start_line is None else max(1, start_line)
        hi = total if end_line is None else min(total, end_line)
        self._first = min(lo - 1, total)
        self.n_lines = max(0, hi - lo + 1)
        self.window_start_line = lo
        self._wstart = self._starts[self._first]
        self._wend = self._starts[self._first + self.n_lines]
        self.lines: Lines = Lines(self)

    # -- basic geometry ---------------------------------------------------

    @property
    def window_bytes(self) -> int:
        return self._wend - self._wstart

    def _bytes_are_chars(self) -> bool:
        """True when byte offsets are character offsets (single-byte or pure ASCII text)."""
        if self._single_byte or self._all_ascii:
            return True
        if self._all_ascii is None:
            # One vectorised pass (~0.1 s per GB), remembered; grep reuses the ranges.
            self._all_ascii = all(self._is_ascii(a, b) for a, b in self._scan_ranges())
        return self._all_ascii

    def char_offset_of_byte(self, pos: int) -> int:
        """Character offset in the window's text of absolute byte `pos` (a character boundary)."""
        if self._bytes_are_chars():
            return pos - self._wstart
        self._extend_char_table(None, byte_target=pos)
        k = min(bisect.bisect_right(self._char_bytes, pos) - 1, len(self._char_offsets) - 1)
        return self._char_offsets[k] + len(self._decode(self._buf[self._char_bytes[k] : pos]))

    @property
    def n_chars(self) -> int:
        """Characters in the window's text (a full pass the first time, unless ASCII)."""
        if self._bytes_are_chars():
            return self.window_bytes
        self._extend_char_table(None)
        return self._char_offsets[-1]

    def __enter__(self) -> MappedText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the mapping. Views handed out earlier become unusable."""
        self._block_cache = None
        self._starts_np = None
        starts = getattr(self, "_starts", None)
        if isinstance(starts, memoryview):
            starts.release()
        for name in ("_index_mm", "_mm"):
            mm = getattr(self, name, None)
            if mm is not None:
                try:
                    mm.close()
                except BufferError:
                    pass  # a numpy view is still alive; the mapping goes with it
                setattr(self, name, None)
        self._buf = b""

    # -- lines ---------------------------------------------------------------

    def _decode(self, data: bytes) -> str:
        return data.decode(self._decode_as, errors="replace")

    def _decode_range(self, a: int, b: int) -> str:
        """Decode buffer bytes [a, b) straight from the mapping (no bytes copy)."""
        with memoryview(self._buf) as whole, whole[a:b] as part:
            return str(part, self._decode_as, "replace")

    def _line(self, i: int) -> str:
        """Line i of the window (0-based), without its ending."""
        g = self._first + i
        a, b = self._starts[g], self._starts[g + 1]
        data = self._buf[a:b]
        if data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        return self._decode(data)

    def _decode_lines(self, i: int, j: int) -> list[str]:
        """Window lines i..j-1 (0-based), decoded in one call."""
        if j <= i:
            return []
        a, b = self._starts[self._first + i], self._starts[self._first + j]
        text = self._decode_range(a, b)
        parts = text.split("\n")
        if self._buf[b - 1] == 10:
            parts.pop()
        if "\r" in text:
            parts = [p[:-1] if p.endswith("\r") else p for p in parts]
        return parts

    def _line_blocks(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, int]]:
        """(i, j) window line ranges of about ITER_BLOCK_BYTES each over lines lo..hi-1, in order."""
        starts, first = self._starts, self._first
        end = first + (self.n_lines if hi is None else min(hi, self.n_lines))
        g = first + max(0, lo)
        while g < end:
            h = bisect.bisect_left(starts, starts[g] + ITER_BLOCK_BYTES, g + 1, end)
            h = max(h, g + 1)
            yield g - first, h - first
            g = h

    def line_head(self, i: int, max_bytes: int) -> str:
        """Line i of the window (0-based) without its ending, cut to at most `max_bytes` bytes
        at a character boundary: reading the start of a gigabyte-long line costs its start only."""
        g = self._first + i
        a, b = self._starts[g], self._starts[g + 1]
        if b - a > max_bytes:
            cut = a + max_bytes
            while cut > a and self._buf[cut] & 0xC0 == 0x80:
                cut -= 1  # never split a UTF-8 sequence
            return self._decode_range(a, cut)
        return self._line(i)

    def display(self, s: str) -> str:
        # Binary files: control bytes become dots so the printable content reads.
        return s.translate(_CONTROL_TO_DOT) if self.binary else s

    def peek_lines(self, start: int, length: int, max_bytes: int | None = None) -> list[tuple[int, str]]:
        """Lines start .. start+length-1 (1-based), clipped to the window and, with
        `max_bytes`, to the lines that fit in that many bytes (at least one)."""
        lo = max(1, start)
        hi = min(self.n_lines, start + length - 1)
        if hi < lo:
            return []
        if max_bytes is not None:
            limit = self._starts[self._first + lo - 1] + max_bytes
            fits = bisect.bisect_right(self._starts, limit, self._first + lo, self._first + hi + 1) - 1
            hi = max(lo, min(hi, fits - self._first))
        span = self._starts[self._first + hi] - self._starts[self._first + lo - 1]
        if span <= SHOWN_LINE_MAX_BYTES:
            return [(lo + k, self.display(s)) for k, s in enumerate(self._decode_lines(lo - 1, hi))]
        return [(n, self.shown_line(n)) for n in range(lo, hi + 1)]

    def shown_line(self, number: int) -> str:
        """Line `number` (1-based) for display: whole unless longer than SHOWN_LINE_MAX_BYTES."""
        g = self._first + number - 1
        a, b = self._starts[g], self._starts[g + 1]
        if b - a <= SHOWN_LINE_MAX_BYTES:
            return self.display(self._line(number - 1))
        cut = a + SHOWN_LINE_MAX_BYTES
        while cut > a and self._buf[cut] & 0xC0 == 0x80:
            cut -= 1  # never split a UTF-8 sequence
        head = self.display(self._decode_range(a, cut))
        return (
            f"{head} …[line cut: it is {b - a:,} bytes long; read it with peek(start, length, unit='chars')]"
        )

    def line_of_byte(self, pos: int) -> int:
        """1-based window line containing absolute byte offset `pos`."""
        g = bisect.bisect_right(self._starts, pos, 0, len(self._starts) - 1) - 1
        return g - self._first + 1

    # -- characters ------------------------------------------------------------

    def _extend_char_table(self, char_target: int | None, byte_target: int | None = None) -> None:
        """Grow the block table to cover `char_target` or `byte_target` (both None: the whole window)."""
        if not self._char_offsets:
            self._char_bytes = [self._wstart]
            self._char_offsets = [0]
        buf = self._buf
        while not self._char_done and (
            (char_target is None and byte_target is None)
            or (char_target is not None and self._char_offsets[-1] <= char_target)
            or (byte_target is not None and self._char_bytes[-1] <= byte_target)
        ):
            a = self._char_bytes[-1]
            b = min(a + CHAR_BLOCK_BYTES, self._wend)
            # Never split a UTF-8 sequence: move the cut past continuation bytes
            # (at most 3 of them can belong to the sequence before the cut).
            for _ in range(3):
                if b < self._wend and buf[b] & 0xC0 == 0x80:
                    b += 1
            data = buf[a:b]
            count = len(data) if data.isascii() else len(self._decode(data))
            self._char_bytes.append(b)
            self._char_offsets.append(self._char_offsets[-1] + count)
            if b >= self._wend:
                self._char_done = True

    def _char_block(self, k: int) -> str:
        cached = self._block_cache
        if cached is not None and cached[0] == k:
            return cached[1]
        text = self._decode(self._buf[self._char_bytes[k] : self._char_bytes[k + 1]])
        self._block_cache = (k, text)
        return text

    def char_slice(self, start: int, stop: int) -> str:
        """Characters [start, stop) of the window's text (0-based, clipped)."""
        start = max(0, start)
        if stop <= start:
            return ""
        if self._bytes_are_chars():
            a = self._wstart + start
            b = min(self._wstart + stop, self._wend)
            return self._decode(self._buf[a:b]) if a < b else ""
        self._extend_char_table(stop)
        offs = self._char_offsets
        k = bisect.bisect_right(offs, start) - 1
        out: list[str] = []
        pos = start
        while k < len(offs) - 1 and pos < stop:
            block = self._char_block(k)
            lo = pos - offs[k]
            hi = min(stop - offs[k], len(block))
            out.append(block[lo:hi])
            pos = offs[k] + hi
            k += 1
            if k >= len(offs) - 1 and not self._char_done:
                self._extend_char_table(stop)
                offs = self._char_offsets
        return "".join(out)

    def peek_chars(self, start: int, length: int) -> str:
        """`length` characters from character offset `start` (0-based) of the text."""
        return self.display(self.char_slice(start, start + max(0, length)))

    def text(self) -> str | LazyText:
        """What model code sees as `context`: a str, or above TEXT_IN_MEMORY_MAX_BYTES a LazyText."""
        if self.window_bytes > TEXT_IN_MEMORY_MAX_BYTES:
            return LazyText(self)
        return self._decode_range(self._wstart, self._wend)

    def lazy_text(self) -> LazyText:
        """The window's text as a LazyText whatever its size."""
        return LazyText(self)

    # -- grep ------------------------------------------------------------------

    def grep(self, pattern: str, max_matches: int = 50, ignore_case: bool = False) -> GrepResult:
        """Lines matching a Python regex; `total` counts every matching line exactly.

        Raises re.error for an invalid pattern. `^`/`$` anchor at line ends.
        """
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        compiled = re.compile(pattern, flags)
        needle = self._literal_needle(pattern, ignore_case)
        if needle is not None:
            lines = self._grep_literal(needle, ignore_case, compiled)
        else:
            lines = self._grep_ranges(compiled, self._bytes_pattern(pattern, flags))
        total = 0
        shown: list[int] = []
        for line_numbers in lines:
            total += len(line_numbers)
            if len(shown) < max_matches:
                shown.extend(line_numbers[: max_matches - len(shown)])
        matches = [(ln, self.shown_line(ln)) for ln in shown]
        return GrepResult(total=total, matches=matches)

    def _literal_needle(self, pattern: str, ignore_case: bool) -> bytes | None:
        """The bytes to look for when `pattern` is a plain string (escapes allowed).

        Such a pattern is found by vectorised byte comparisons instead of the
        regex engine; byte matches are exactly text matches for UTF-8 and
        single-byte text (a character's encoding never starts inside another's).
        """
        text = _LITERAL_ESCAPE.sub(r"\1", pattern)
        if not pattern or "\\" in text or any(c in _REGEX_SPECIAL for c in _LITERAL_ESCAPE.sub("", pattern)):
            return None
        if "\n" in text or "\r" in text or (ignore_case and not text.isascii()):
            return None
        if self._decode_as != "utf-8" and not self._single_byte:
            return None
        try:
            return text.encode(self._decode_as)
        except UnicodeEncodeError:
            return None

    def _needle_order(self, needle: bytes, ignore_case: bool) -> list[int]:
        """Needle positions, rarest byte first (frequencies sampled from the window's start)."""
        np = _numpy()
        sample = np.frombuffer(self._buf, np.uint8, min(65536, self.window_bytes), self._wstart)
        freq = np.bincount(sample, minlength=256)
        if ignore_case:
            freq = freq.copy()
            for c in range(65, 91):
                freq[c] = freq[c + 32] = freq[c] + freq[c + 32]
        return sorted(range(len(needle)), key=lambda k: (int(freq[needle[k]]), k))

    def _grep_literal(self, needle: bytes, ignore_case: bool, pat: re.Pattern[str]) -> Iterator[list[int]]:
        """Distinct matching line numbers for a literal, by vectorised comparisons on all cores."""
        np = _numpy()
        starts_np = self._starts_array()
        order = self._needle_order(needle, ignore_case)
        size, buf = len(needle), self._buf
        # Unicode case folding lets "k"/"s" match non-ASCII letters (K, ſ): exact
        # on ASCII ranges only; other ranges take the decoded-text path.
        folds_wide = ignore_case and any(c in b"kKsS" for c in needle)

        def equal(arr: Any, c: int) -> Any:
            if ignore_case and 65 <= (c | 0x20) - 32 <= 90:
                return (arr | 0x20) == (c | 0x20)
            return arr == c

        def scan(rng: tuple[int, int]) -> Any:
            a, b = rng
            if folds_wide and not self._is_ascii(a, b):
                return np.asarray(self._grep_text_range(pat, a, b), dtype=np.int64) + (self._first - 1)
            arr = np.frombuffer(buf, np.uint8, b - a, a)
            j = order[0]
            cand = np.flatnonzero(equal(arr, needle[j]))
            cand -= j
            cand = cand[(cand >= 0) & (cand <= len(arr) - size)]
            for k in order[1:]:
                if not len(cand):
                    break
                cand = cand[equal(arr[cand + k], needle[k])]
            if not len(cand):
                return cand
            g = np.searchsorted(starts_np, cand + a, side="right") - 1
            return g[np.concatenate(([True], g[1:] != g[:-1]))]

        last = -1
        for g in _parallel_map(scan, list(self._scan_ranges())):
            if len(g) and g[0] == last:
                g = g[1:]
            if len(g):
                last = int(g[-1])
                yield (g - (self._first - 1)).tolist()

    def _bytes_pattern(self, pattern: str, flags: int) -> re.Pattern[bytes] | None:
        """The pattern compiled for the raw bytes, when that gives the same lines.

        Used only on ranges whose bytes are all ASCII, where bytes and text
        agree exactly (`.` or `\\W` would see a UTF-8 sequence as several bytes).
        """
        if not pattern.isascii():
            return None
        if self._decode_as != "utf-8" and not self._single_byte:
            return None
        raw = pattern.encode("ascii")
        try:
            # Consuming the rest of the line keeps it to about one match per line.
            return re.compile(b"(?:" + raw + b")[^\n]*", flags)
        except re.error:
            pass  # e.g. global inline flags, which must lead the pattern
        try:
            return re.compile(raw, flags)
        except re.error:
            return None

    def _scan_ranges(self) -> Iterator[tuple[int, int]]:
        """(start, end) byte ranges covering the window, about SCAN_CHUNK_BYTES each.

        Cuts fall at line starts; a single line longer than a chunk is cut inside
        (at a UTF-8 character boundary), which only matters to a match that would
        straddle the cut.
        """
        starts, end_g = self._starts, self._first + self.n_lines
        g = self._first
        while g < end_g:
            h = bisect.bisect_right(starts, starts[g] + SCAN_CHUNK_BYTES, g + 1, end_g + 1) - 1
            if h > g:
                yield starts[g], starts[h]
                g = h
                continue
            a, line_end = starts[g], starts[g + 1]
            while a < line_end:
                b = min(a + SCAN_CHUNK_BYTES, line_end)
                for _ in range(3):
                    if b < line_end and self._buf[b] & 0xC0 == 0x80:
                        b += 1
                yield a, b
                a = b
            g += 1

    def _is_ascii(self, a: int, b: int) -> bool:
        if self._all_ascii:
            return True
        key = (a, b)
        known = self._ascii_ranges.get(key)
        if known is None:
            np = _numpy()
            known = b <= a or int(np.frombuffer(self._buf, dtype=np.uint8, count=b - a, offset=a).max()) < 128
            self._ascii_ranges[key] = known
        return known

    def _grep_ranges(self, pat: re.Pattern[str], bpat: re.Pattern[bytes] | None) -> Iterator[list[int]]:
        """Distinct matching line numbers (window-relative), range by range, in order."""
        last = 0
        for a, b in self._scan_ranges():
            if bpat is not None and self._is_ascii(a, b):
                found = self._grep_bytes_range(bpat, a, b)
            else:
                found = self._grep_text_range(pat, a, b)
            if found and found[0] == last:
                found = found[1:]
            if found:
                last = found[-1]
                yield found

    def _grep_bytes_range(self, pat: re.Pattern[bytes], a: int, b: int) -> list[int]:
        np = _numpy()
        buf = self._buf
        end_g = self._first + self.n_lines
        if a == self._wstart and a > 0 and buf[a - 1] != 10:
            # After a byte-order mark: search a copy so that `^` sees a line start.
            pos = [m.start() + a for m in pat.finditer(buf[a:b])]
        else:
            pos = [m.start() for m in pat.finditer(buf, a, b)]
        if pos and pos[-1] >= b and buf[b - 1] == 10:
            pos.pop()  # an empty match after the range's last "\n" belongs to the next line
        if not pos:
            return []
        g = np.searchsorted(self._starts_array(), np.asarray(pos, dtype=np.int64), side="right") - 1
        g = np.minimum(g, end_g - 1)  # the end of an unterminated last line
        g = g[np.concatenate(([True], g[1:] != g[:-1]))] - (self._first - 1)
        found: list[int] = g.tolist()
        return found

    def _grep_text_range(self, pat: re.Pattern[str], a: int, b: int) -> list[int]:
        text = self._decode(self._buf[a:b])
        line = self.line_of_byte(a)
        found: list[int] = []
        nl_pos = 0
        ends_with_newline = text.endswith("\n")
        for m in pat.finditer(text):
            s = m.start()
            if s == len(text) and ends_with_newline:
                break  # an empty match after the last "\n" belongs to the next range
            line += text.count("\n", nl_pos, s)
            nl_pos = s
            if line > self.n_lines:
                break
            if not found or found[-1] != line:
                found.append(line)
        return found

    def _starts_array(self) -> Any:
        if self._starts_np is None:
            self._starts_np = _numpy().frombuffer(self._starts, dtype=_numpy().int64)
        return self._starts_np

    def __repr__(self) -> str:
        return f"<MappedText {self.path!r} lines={self.n_lines} bytes={self.window_bytes}>"


def detect_encoding(head: bytes, requested: str = "utf-8") -> tuple[str, str, bool]:
    """(name to report, codec to decode with, transcode?) from the first bytes.

    A UTF-16/32 byte-order mark wins over the requested encoding; the BOM codecs
    ("utf-16", "utf-32") read and drop the mark whatever its byte order.
    """
    if head.startswith(b"\xff\xfe\x00\x00"):
        return "utf-32-le", "utf-32", True
    if head.startswith(b"\x00\x00\xfe\xff"):
        return "utf-32-be", "utf-32", True
    if head.startswith(b"\xff\xfe"):
        return "utf-16-le", "utf-16", True
    if head.startswith(b"\xfe\xff"):
        return "utf-16-be", "utf-16", True
    name = codecs.lookup(requested).name
    if name in ("utf-8", "utf-8-sig"):
        return "utf-8", "utf-8", False
    if name in _SINGLE_BYTE:
        return name, name, False
    return name, name, True


def _looks_binary(buf: Any) -> bool:
    """NUL bytes in the first 64 KiB: the usual test (git, grep) for binary data."""
    return b"\x00" in buf[:65536]


# --------------------------------------------------------------------------- lazy text

# Above this many bytes, MappedText.text() returns a LazyText instead of a str.
#
# What the choice costs (measured with bench/huge_file.py and on a 32 MiB slice
# of the same log, 2 shared cores): a str of the whole window costs a full
# decode (~60 ms and 32 MB for 32 MiB of ASCII; up to 4x the bytes for wide
# text) on top of the mapping; for 1 GiB it is ~1 s and +1 GiB, which breaks the
# worker's goal of peak memory <= 1.3x the file size. A LazyText costs nothing
# up front and answers count / `in` / re_findall within ~1.3x of the same call
# on a str (it works on 4 MiB chunks: bytes.count and mmap.find for substrings,
# the regex engine per decoded chunk), with a few MB of transient memory. Below
# the threshold the absolute cost of a str is small, and model code gets a real
# str (isinstance checks, every method); above it memory wins.
TEXT_IN_MEMORY_MAX_BYTES = 32 * 1024 * 1024


class LazyText:
    """The text of a MappedText window as a read-only, str-like object.

    Results equal those of the same operation on the decoded str, with two
    documented limits: `splitlines()` splits on "\\n" (dropping a "\\r" before
    it), as `context_lines` does; regexes run chunk by chunk (chunks end at line
    ends), so a match spanning two 16 MiB chunks is not found, and a
    non-MULTILINE `$`/`\\Z` also matches at the end of each chunk. Operations
    that would copy the whole text (lower(), replace(), ...) raise with advice
    instead; `str(text)` makes the full copy when it is really wanted.
    """

    __slots__ = ("_t",)

    def __init__(self, text: MappedText) -> None:
        self._t = text

    # -- size and slicing --------------------------------------------------

    def __len__(self) -> int:
        return self._t.n_chars

    def __bool__(self) -> bool:
        return self._t.window_bytes > 0

    def __getitem__(self, index: int | slice) -> str:
        if isinstance(index, slice):
            start, stop, step = index.start, index.stop, index.step
            if step is None or step == 1:
                if (start is None or start >= 0) and (stop is not None and stop >= 0):
                    return self._t.char_slice(start or 0, stop)  # no length needed
                a, b, _ = index.indices(len(self))
                return self._t.char_slice(a, b)
            a, b, s = index.indices(len(self))
            lo, hi = (a, b) if s > 0 else (b + 1, a + 1)
            return self._t.char_slice(lo, hi)[::s] if hi > lo else ""
        try:
            i = index.__index__()
        except AttributeError:
            raise TypeError(f"string indices must be integers, not '{type(index).__name__}'") from None
        if i < 0:
            i += len(self)
        ch = self._t.char_slice(i, i + 1) if i >= 0 else ""
        if not ch:
            raise IndexError("string index out of range")
        return ch

    def __iter__(self) -> Iterator[str]:
        for chunk, _ in self._chunks():
            yield from chunk

    def __str__(self) -> str:
        return self._t._decode_range(self._t._wstart, self._t._wend)

    def __repr__(self) -> str:
        size = self._t.window_bytes
        return (
            f"<context: {self._t.n_lines:,} lines, {size:,} bytes of text, read lazily; "
            f"works like a read-only str (len, slicing, in, count, find, splitlines, re.*)>"
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyText):
            other = str(other) if other._t is not self._t else None
            if other is None:
                return True
        if not isinstance(other, str):
            return NotImplemented
        if len(other) != len(self):
            return False
        pos = 0
        for chunk, _ in self._chunks():
            if other[pos : pos + len(chunk)] != chunk:
                return False
            pos += len(chunk)
        return True

    def __hash__(self) -> int:
        return hash(str(self))

    def __add__(self, other: str) -> str:
        return str(self) + other

    def __radd__(self, other: str) -> str:
        return other + str(self)

    # -- searching ------------------------------------------------------------

    def _needle_bytes(self, sub: str) -> bytes | None:
        """`sub` as it appears in the raw bytes, when byte search is exact for it."""
        if "\ufffd" in sub:
            return None  # a replacement character stands for bytes we cannot predict
        try:
            return sub.encode(self._t._decode_as)
        except UnicodeEncodeError:
            return None

    def _char_range(self, start: int | None, end: int | None) -> tuple[int, int] | None:
        if start is None and end is None:
            return None
        a, b, _ = slice(start, end).indices(len(self))
        return a, b

    def __contains__(self, sub: object) -> bool:
        if not isinstance(sub, str):
            raise TypeError(f"'in <context>' requires string as left operand, not {type(sub).__name__}")
        return self.find(sub) >= 0

    def count(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        rng = self._char_range(start, end)
        if rng is not None:
            a, b = rng
            if sub == "":
                return max(0, b - a) + 1 if a <= len(self) else 0
            if b - a <= SCAN_CHUNK_BYTES:
                return self._t.char_slice(a, b).count(sub)
            return sum(1 for _ in _find_all(self._slice_chunks(a, b), sub))
        if sub == "":
            return len(self) + 1
        needle = self._needle_bytes(sub)
        if needle is None:
            return sum(1 for _ in _find_all(self._chunks(), sub))
        t = self._t
        if b"\n" not in needle:
            # Chunks end at line ends, so no match straddles two of them.
            return sum(t._buf[a:b].count(needle) for a, b in t._scan_ranges())
        n, pos, find = 0, t._wstart, t._buf.find
        while True:
            i = find(needle, pos, t._wend)
            if i < 0:
                return n
            n += 1
            pos = i + len(needle)

    def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        t = self._t
        rng = self._char_range(start, end)
        if rng is not None:
            if sub == "":
                return rng[0] if rng[0] <= len(self) and rng[0] <= rng[1] else -1
            for i in _find_all(self._slice_chunks(*rng), sub):
                return i
            return -1
        if sub == "":
            return 0
        needle = self._needle_bytes(sub)
        if needle is None:
            for i in _find_all(self._chunks(), sub):
                return i
            return -1
        i = t._buf.find(needle, t._wstart, t._wend)
        return -1 if i < 0 else t.char_offset_of_byte(i)

    def rfind(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        t = self._t
        rng = self._char_range(start, end)
        needle = self._needle_bytes(sub)
        if rng is not None or needle is None or sub == "":
            a, b = rng if rng is not None else (0, len(self))
            if sub == "":
                return b if a <= b else -1
            last = -1
            for i in _find_all(self._slice_chunks(a, b), sub, overlapping=True):
                last = i
            return last
        i = t._buf.rfind(needle, t._wstart, t._wend)
        return -1 if i < 0 else t.char_offset_of_byte(i)

    def index(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        i = self.find(sub, start, end)
        if i < 0:
            raise ValueError("substring not found")
        return i

    def rindex(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        i = self.rfind(sub, start, end)
        if i < 0:
            raise ValueError("substring not found")
        return i

    def startswith(self, prefix: str | tuple[str, ...], start: int = 0) -> bool:
        options = (prefix,) if isinstance(prefix, str) else prefix
        return any(self._t.char_slice(start, start + len(p)) == p for p in options)

    def endswith(self, suffix: str | tuple[str, ...]) -> bool:
        options = (suffix,) if isinstance(suffix, str) else suffix
        n = len(self)
        return any(self._t.char_slice(n - len(s), n) == s if len(s) <= n else False for s in options)

    # -- splitting --------------------------------------------------------------

    def splitlines(self, keepends: bool = False) -> Sequence[str]:
        """The lines; without keepends this is `context_lines` itself (no copy)."""
        if not keepends:
            return self._t.lines
        out: list[str] = []
        for chunk, _ in self._chunks():
            out.extend(chunk.splitlines(True))
        return out

    def split(self, sep: str | None = None, maxsplit: int = -1) -> list[str]:
        """As str.split; builds the list (its memory is the caller's choice)."""
        if sep == "":
            raise ValueError("empty separator")
        if maxsplit >= 0:
            if sep is None:
                return str(self).split(None, maxsplit)
            cuts: list[int] = []
            for i in _find_all(self._chunks(), sep):
                if len(cuts) == maxsplit:
                    break
                cuts.append(i)
            edges = [0, *(x for c in cuts for x in (c, c + len(sep))), len(self)]
            return [self._t.char_slice(edges[k], edges[k + 1]) for k in range(0, len(edges), 2)]
        out: list[str] = []
        carry = ""
        for chunk, _ in self._chunks():
            buf = carry + chunk
            if sep is not None:
                parts = buf.split(sep)
                carry = parts.pop()
            else:
                parts = buf.split()
                # The last word may go on in the next chunk unless whitespace ends this one.
                carry = "" if not buf or buf[-1].isspace() or not parts else parts.pop()
            out.extend(parts)
        if sep is not None or carry:
            out.append(carry)
        return out

    # -- chunks -------------------------------------------------------------------

    def _chunks(self) -> Iterator[tuple[str, int]]:
        """(decoded chunk, its character offset), chunks ending at line ends."""
        for text, at, skip in self._prefixed_chunks():
            yield (text[skip:] if skip else text), at

    def _prefixed_chunks(self) -> Iterator[tuple[str, int, int]]:
        """(text, offset of text[skip], skip): each chunk decoded with the character
        before it in front (skip = 1), so a regex searched from `skip` sees the
        true context at the seam (`^`, `\\b`, lookbehind) without a copy."""
        t = self._t
        buf, pos = t._buf, 0
        for a, b in t._scan_ranges():
            lead = a
            if a > t._wstart:
                lead -= 1
                while lead > t._wstart and a - lead < 4 and buf[lead] & 0xC0 == 0x80:
                    lead -= 1
            text = t._decode_range(lead, b)
            skip = 0
            if lead < a:
                # The bytes before `a` decode to one character (or, if invalid, a few).
                skip = len(text) - len(t._decode_range(a, b)) if buf[lead] >= 0x80 else 1
            yield text, pos, skip
            pos += len(text) - skip

    def _slice_chunks(self, a: int, b: int) -> Iterator[tuple[str, int]]:
        pos = a
        while pos < b:
            hi = min(b, pos + SCAN_CHUNK_BYTES)
            yield self._t.char_slice(pos, hi), pos
            pos = hi

    def __getattr__(self, name: str) -> Any:
        if hasattr(str, name):
            raise AttributeError(
                f"context.{name}() would copy the whole {self._t.window_bytes:,}-byte text; "
                f"call it on a slice (context[a:b].{name}()) or on lines (context_lines), "
                f"or use grep()/re.findall(...) which read the file lazily"
            )
        raise AttributeError(f"'context' has no attribute {name!r}")


def _find_all(chunks: Iterator[tuple[str, int]], sub: str, overlapping: bool = False) -> Iterator[int]:
    """Offsets of a non-empty `sub` across chunks; non-overlapping as str.count counts."""
    keep = len(sub) - 1
    step = 1 if overlapping else len(sub)
    carry = ""
    next_ok = 0  # absolute offset before which the next match may not start
    for chunk, at in chunks:
        buf = carry + chunk
        base = at - len(carry)
        i = buf.find(sub, max(0, next_ok - base))
        while i >= 0:
            yield base + i
            next_ok = base + i + step
            i = buf.find(sub, i + step)
        carry = buf[max(len(buf) - keep, next_ok - base, 0) :] if keep > 0 else ""


# --------------------------------------------------------------------------- re over lazy text
#
# The sandbox routes its `re` module's compile, search, match, fullmatch,
# findall, finditer, sub, subn and split through these. With a str they are
# exactly `re`'s; with a LazyText they run chunk by chunk (see LazyText's
# docstring for the two limits), and match objects report offsets in the
# whole text.


class ShiftedMatch:
    """A match found in one chunk, reporting positions in the whole text."""

    __slots__ = ("_m", "_d")

    def __init__(self, m: re.Match[str], delta: int) -> None:
        self._m = m
        self._d = delta

    def group(self, *groups: int | str) -> Any:
        return self._m.group(*groups)

    def __getitem__(self, g: int | str) -> Any:
        return self._m[g]

    def groups(self, default: Any = None) -> tuple[Any, ...]:
        return self._m.groups(default)

    def groupdict(self, default: Any = None) -> dict[str, Any]:
        return self._m.groupdict(default)

    def expand(self, template: str) -> str:
        return self._m.expand(template)

    def start(self, group: int | str = 0) -> int:
        s = self._m.start(group)
        return s + self._d if s >= 0 else -1

    def end(self, group: int | str = 0) -> int:
        e = self._m.end(group)
        return e + self._d if e >= 0 else -1

    def span(self, group: int | str = 0) -> tuple[int, int]:
        return self.start(group), self.end(group)

    @property
    def re(self) -> re.Pattern[str]:
        return self._m.re

    @property
    def lastindex(self) -> int | None:
        return self._m.lastindex

    @property
    def lastgroup(self) -> str | None:
        return self._m.lastgroup

    @property
    def string(self) -> str:
        """The chunk the match was found in (not the whole text)."""
        return self._m.string

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<re.Match object; span={self.span()!r}, match={self._m.group()!r}>"


def _as_pattern(pattern: Any, flags: int) -> re.Pattern[str]:
    if isinstance(pattern, LazyPattern):
        pattern = pattern.pattern_object
    if isinstance(pattern, re.Pattern):
        if flags:
            raise ValueError("cannot process flags argument with a compiled pattern")
        return pattern
    return re.compile(pattern, flags)


def _chunk_matches(p: re.Pattern[str], text: LazyText) -> Iterator[tuple[re.Match[str], int]]:
    """(match, delta to add to its offsets) over the chunks of `text`, in order."""
    for buf, at, skip in text._prefixed_chunks():
        for m in p.finditer(buf, skip):
            yield m, at - skip


def _wrap(m: re.Match[str], delta: int) -> re.Match[str] | ShiftedMatch:
    return m if delta == 0 else ShiftedMatch(m, delta)


def re_findall(pattern: Any, string: Any, flags: int = 0) -> list[Any]:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.findall(string)
    out: list[Any] = []
    for buf, _, skip in string._prefixed_chunks():
        out.extend(p.findall(buf, skip))
    return out


def re_finditer(pattern: Any, string: Any, flags: int = 0) -> Iterator[Any]:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.finditer(string)
    return (_wrap(m, d) for m, d in _chunk_matches(p, string))


def re_search(pattern: Any, string: Any, flags: int = 0) -> Any:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.search(string)
    for m, d in _chunk_matches(p, string):
        return _wrap(m, d)
    return None


def re_match(pattern: Any, string: Any, flags: int = 0) -> Any:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.match(string)
    for chunk, _ in string._chunks():
        return p.match(chunk)  # at the start of the text: the first chunk decides
    return p.match("")


def re_fullmatch(pattern: Any, string: Any, flags: int = 0) -> Any:
    p = _as_pattern(pattern, flags)
    # A full match must see all of the text: this one really decodes it whole.
    return p.fullmatch(str(string))


def re_subn(pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> tuple[str, int]:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.subn(repl, string, count)
    out: list[str] = []
    n = 0
    last = 0  # offset in the whole text up to which output has been written
    for m, d in _chunk_matches(p, string):
        if count and n >= count:
            break
        s, e = m.start() + d, m.end() + d
        out.append(string[last:s])
        out.append(repl(_wrap(m, d)) if callable(repl) else m.expand(repl))
        last = e
        n += 1
    out.append(string._t.char_slice(last, len(string)))
    return "".join(out), n


def re_sub(pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> str:
    if not isinstance(string, LazyText):
        return _as_pattern(pattern, flags).sub(repl, string, count)
    return re_subn(pattern, repl, string, count, flags)[0]


def re_split(pattern: Any, string: Any, maxsplit: int = 0, flags: int = 0) -> list[Any]:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.split(string, maxsplit)
    out: list[Any] = []
    last = 0
    n = 0
    for m, d in _chunk_matches(p, string):
        if maxsplit and n >= maxsplit:
            break
        out.append(string._t.char_slice(last, m.start() + d))
        out.extend(m.groups())
        last = m.end() + d
        n += 1
    out.append(string._t.char_slice(last, len(string)))
    return out


def re_compile(pattern: Any, flags: int = 0) -> LazyPattern:
    return LazyPattern(_as_pattern(pattern, flags))


class LazyPattern:
    """A compiled pattern whose methods also accept a LazyText."""

    __slots__ = ("pattern_object",)

    def __init__(self, p: re.Pattern[str]) -> None:
        self.pattern_object = p

    def _plain(self, string: Any, pos: int, endpos: int | None) -> bool:
        return not isinstance(string, LazyText) or pos != 0 or endpos is not None

    def _str(self, string: Any) -> Any:
        return str(string) if isinstance(string, LazyText) else string

    def search(self, string: Any, pos: int = 0, endpos: int | None = None) -> Any:
        if self._plain(string, pos, endpos):
            return self.pattern_object.search(self._str(string), pos, *(() if endpos is None else (endpos,)))
        return re_search(self.pattern_object, string)

    def match(self, string: Any, pos: int = 0, endpos: int | None = None) -> Any:
        if self._plain(string, pos, endpos):
            return self.pattern_object.match(self._str(string), pos, *(() if endpos is None else (endpos,)))
        return re_match(self.pattern_object, string)

    def fullmatch(self, string: Any, pos: int = 0, endpos: int | None = None) -> Any:
        args = () if endpos is None else (endpos,)
        return self.pattern_object.fullmatch(self._str(string), pos, *args)

    def findall(self, string: Any, pos: int = 0, endpos: int | None = None) -> list[Any]:
        if self._plain(string, pos, endpos):
            return self.pattern_object.findall(self._str(string), pos, *(() if endpos is None else (endpos,)))
        return re_findall(self.pattern_object, string)

    def finditer(self, string: Any, pos: int = 0, endpos: int | None = None) -> Iterator[Any]:
        if self._plain(string, pos, endpos):
            return self.pattern_object.finditer(
                self._str(string), pos, *(() if endpos is None else (endpos,))
            )
        return re_finditer(self.pattern_object, string)

    def sub(self, repl: Any, string: Any, count: int = 0) -> str:
        return re_sub(self.pattern_object, repl, string, count)

    def subn(self, repl: Any, string: Any, count: int = 0) -> tuple[str, int]:
        return re_subn(self.pattern_object, repl, string, count)

    def split(self, string: Any, maxsplit: int = 0) -> list[Any]:
        return re_split(self.pattern_object, string, maxsplit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pattern_object, name)  # pattern, flags, groups, groupindex

    def __repr__(self) -> str:
        return repr(self.pattern_object)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyPattern):
            other = other.pattern_object
        return self.pattern_object == other

    def __hash__(self) -> int:
        return hash(self.pattern_object)
