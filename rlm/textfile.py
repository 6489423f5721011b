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
"""

from __future__ import annotations

import bisect
import codecs
import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

__all__ = [
    "CHAR_BLOCK_BYTES",
    "GrepResult",
    "Lines",
    "MappedText",
    "SCAN_CHUNK_BYTES",
    "build_index",
    "detect_encoding",
    "line_starts",
    "read_index",
    "write_index",
]

# Bytes scanned per step by grep and the index builder: large enough that the
# per-step Python overhead vanishes, small enough that transient copies stay a
# few percent of the worker's memory goal.
SCAN_CHUNK_BYTES = 16 * 1024 * 1024
# Bytes per block of the character-offset table (peek by characters, len of the
# text). A block is decoded whole when a peek lands in it: ~1 ms per block.
CHAR_BLOCK_BYTES = 1024 * 1024

INDEX_MAGIC = b"RLMIDX01"
# magic, byte size of the indexed buffer, number of int64 entries, first data byte
_INDEX_HEADER = struct.Struct("<8sQQQ")

_UTF8_BOM = b"\xef\xbb\xbf"
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


def line_starts(buf: Any, first: int = 0) -> Any:
    """Byte offsets where each line starts, plus a final sentinel (the end).

    Entry i is where line i (0-based) starts; entry n is the buffer's end, so
    line i spans [starts[i], starts[i+1]) including its newline. `first` skips a
    byte-order mark. Returns an int64 numpy array of n_lines + 1 entries.
    """
    np = _numpy()
    size = len(buf)
    if first >= size:
        return np.array([size], dtype=np.int64)
    parts = [np.array([first], dtype=np.int64)]
    for off in range(first, size, SCAN_CHUNK_BYTES):
        n = min(SCAN_CHUNK_BYTES, size - off)
        chunk = np.frombuffer(buf, dtype=np.uint8, count=n, offset=off)
        hits = np.flatnonzero(chunk == 10)
        del chunk
        hits += off + 1
        parts.append(hits.astype(np.int64, copy=False))
    if buf[size - 1] != 10:
        parts.append(np.array([size], dtype=np.int64))
    return np.concatenate(parts)


def write_index(starts: Any, out_path: str, buffer_size: int) -> None:
    """Write a line-start array to `out_path` atomically (temp file + rename)."""
    np = _numpy()
    arr = np.ascontiguousarray(starts, dtype="<i8")
    tmp = f"{out_path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(_INDEX_HEADER.pack(INDEX_MAGIC, buffer_size, len(arr), 0))
        fh.write(arr.tobytes())
    os.replace(tmp, out_path)


def read_index(index_path: str, buffer_size: int) -> tuple[mmap.mmap, memoryview] | None:
    """Map a prebuilt index; None when it is missing, corrupt or for other bytes."""
    try:
        with open(index_path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size < _INDEX_HEADER.size + 8:
                return None
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    magic, size, count, _ = _INDEX_HEADER.unpack_from(mm, 0)
    if magic != INDEX_MAGIC or size != buffer_size or len(mm) != _INDEX_HEADER.size + 8 * count:
        mm.close()
        return None
    view = memoryview(mm)[_INDEX_HEADER.size :].cast("q")
    if count < 1 or view[count - 1] != buffer_size:
        view.release()
        mm.close()
        return None
    return mm, view


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
    """Read-only list-like view of a MappedText's lines, decoded on demand."""

    __slots__ = ("_t",)

    def __init__(self, text: MappedText) -> None:
        self._t = text

    def __len__(self) -> int:
        return self._t.n_lines

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        n = self._t.n_lines
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._t._decode_lines(start, max(start, stop))
            return [self._t._line(i) for i in range(start, stop, step)]
        try:
            i = index.__index__()
        except AttributeError:
            raise TypeError(f"line indices must be integers or slices, not {type(index).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("line index out of range")
        return self._t._line(i)

    def __iter__(self) -> Iterator[str]:
        t = self._t
        i, n = 0, t.n_lines
        while i < n:
            j = t._block_end(i)
            yield from t._decode_lines(i, j)
            i = j

    def __reversed__(self) -> Iterator[str]:
        for i in range(self._t.n_lines - 1, -1, -1):
            yield self._t._line(i)

    def __repr__(self) -> str:
        return f"<{self._t.n_lines} lines of {os.path.basename(self._t.path)} (read-only)>"


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
        self._all_ascii = False
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
            self._index_mm, self._starts = loaded
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

    @property
    def n_chars(self) -> int:
        """Characters in the window's text (a full pass the first time, unless single-byte)."""
        if self._single_byte:
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
        data = self._buf[a:b]
        text = self._decode(data)
        parts = text.split("\n")
        if data.endswith(b"\n"):
            parts.pop()
        if "\r" in text:
            parts = [p[:-1] if p.endswith("\r") else p for p in parts]
        return parts

    def _block_end(self, i: int) -> int:
        """First line index after i such that lines i.. span about one char block."""
        g = self._first + i
        target = self._starts[g] + CHAR_BLOCK_BYTES
        j = bisect.bisect_left(self._starts, target, g + 1, self._first + self.n_lines)
        return max(j, g + 1) - self._first

    def display(self, s: str) -> str:
        # Binary files: control bytes become dots so the printable content reads.
        return s.translate(_CONTROL_TO_DOT) if self.binary else s

    def peek_lines(self, start: int, length: int) -> list[tuple[int, str]]:
        """Lines start .. start+length-1 (1-based), clipped to the window."""
        lo = max(1, start)
        hi = min(self.n_lines, start + length - 1)
        if hi < lo:
            return []
        return [(lo + k, self.display(s)) for k, s in enumerate(self._decode_lines(lo - 1, hi))]

    def line_of_byte(self, pos: int) -> int:
        """1-based window line containing absolute byte offset `pos`."""
        g = bisect.bisect_right(self._starts, pos, 0, len(self._starts) - 1) - 1
        return g - self._first + 1

    # -- characters ------------------------------------------------------------

    def _extend_char_table(self, char_target: int | None) -> None:
        """Grow the block table until it covers `char_target` (None: the whole window)."""
        if not self._char_offsets:
            self._char_bytes = [self._wstart]
            self._char_offsets = [0]
        buf = self._buf
        while not self._char_done and (char_target is None or self._char_offsets[-1] <= char_target):
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
        if self._single_byte:
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

    def text(self) -> str:
        """The window's whole text as one str (decodes all of it: costs its size in memory)."""
        return self._decode(self._buf[self._wstart : self._wend])

    # -- grep ------------------------------------------------------------------

    def grep(self, pattern: str, max_matches: int = 50, ignore_case: bool = False) -> GrepResult:
        """Lines matching a Python regex; `total` counts every matching line exactly.

        Raises re.error for an invalid pattern. `^`/`$` anchor at line ends.
        """
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        compiled = re.compile(pattern, flags)
        lines = self._grep_ranges(compiled, self._bytes_pattern(pattern, flags))
        total = 0
        shown: list[int] = []
        for line_numbers in lines:
            total += len(line_numbers)
            if len(shown) < max_matches:
                shown.extend(line_numbers[: max_matches - len(shown)])
        matches = [(ln, self.display(self._line(ln - 1))) for ln in shown]
        return GrepResult(total=total, matches=matches)

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
        return g.tolist()

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
