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

The line index is built in rlm.text.index and big texts are served lazily by
rlm.text.lazytext; this module re-exports both, as the worker's one text API.
Over 400 lines: MappedText is one object (a window of the mapping: lines, peeks
by line and by character, grep, text) whose parts share its offsets and caches.
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import mmap
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

# The index and the lazy text live in modules of their own; this module stays the
# worker's one text API (the policy's `re` stand-in and the tests import from here).
from rlm.text.index import (
    INDEX_FLAG_ASCII,
    SCAN_CHUNK_BYTES,
    _numpy,
    _parallel_map,
    build_index,
    line_starts,
    read_index,
    start_scan_threads,
    write_index,
)
from rlm.text.lazytext import (
    TEXT_IN_MEMORY_MAX_BYTES,
    LazyPattern,
    LazyText,
    ShiftedMatch,
    re_compile,
    re_findall,
    re_finditer,
    re_fullmatch,
    re_match,
    re_search,
    re_split,
    re_sub,
    re_subn,
)

__all__ = [
    "CHAR_BLOCK_BYTES",
    "INDEX_FLAG_ASCII",
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
    "dotted",
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
# A line longer than a scan chunk is cut inside; grep reads this far past each such cut, so a
# match up to this long across it is found (as lazytext's SEAM_CHARS does for re in code).
GREP_SEAM_BYTES = 64 * 1024


_UTF8_BOM = b"\xef\xbb\xbf"
_REGEX_SPECIAL = set(".^$*+?{}[]|()\\")
_LITERAL_ESCAPE = re.compile(r"\\([^A-Za-z0-9])")  # "\." and the like stand for the character
# Encodings whose bytes map one to one onto characters: offsets need no table.
_SINGLE_BYTE = {"latin-1", "iso8859-1", "ascii", "cp1252", "cp1250", "cp1251", "iso8859-15"}
_CONTROL_TO_DOT = {c: "." for c in range(32) if c != 9}
_CONTROL_TO_DOT[127] = "."


@dataclass
class GrepResult:
    """Lines matching a pattern: the exact total and the first few matches."""

    total: int
    matches: list[tuple[int, str]] = field(default_factory=list)


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

    def window_data(self) -> bytes:
        """The window's bytes as the file holds them (a copy): what a child on another machine
        is sent of its slice."""
        return bytes(self._buf[self._wstart : self._wend])

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
        return dotted(s) if self.binary else s

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
        total = 0
        shown: list[int] = []
        for line_numbers in self._grep_chunks(pattern, ignore_case):
            total += len(line_numbers)
            if len(shown) < max_matches:
                shown.extend(int(n) for n in line_numbers[: max_matches - len(shown)])
        matches = [(ln, self.shown_line(ln)) for ln in shown]
        return GrepResult(total=total, matches=matches)

    def grep_lines(self, pattern: str, ignore_case: bool = False) -> Any:
        """Every line matching a Python regex: their 1-based numbers, ascending, as a numpy array.

        Four bytes a match (eight past 2**31 lines), so a result of millions of lines stays
        small; the text of a line is read from the mapping when it is asked for (shown_line).
        Raises re.error for an invalid pattern.
        """
        np = _numpy()
        dtype = np.int32 if self.n_lines < 2**31 else np.int64
        parts = [np.asarray(found, dtype=dtype) for found in self._grep_chunks(pattern, ignore_case)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    def _grep_chunks(self, pattern: str, ignore_case: bool) -> Iterator[Sequence[int]]:
        """The matching line numbers (1-based, distinct, ascending), a scan range at a time."""
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        compiled = re.compile(pattern, flags)
        needle = self._literal_needle(pattern, ignore_case)
        if needle is not None:
            return self._grep_literal(needle, ignore_case, compiled)
        return self._grep_ranges(compiled, self._bytes_pattern(pattern, flags))

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

    def _grep_literal(self, needle: bytes, ignore_case: bool, pat: re.Pattern[str]) -> Iterator[Any]:
        """Distinct matching line numbers for a literal, by vectorised comparisons on all cores
        (numpy arrays: a common literal matches millions of lines, kept out of Python ints)."""
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
        for g in _parallel_map(scan, list(self._scan_ranges(GREP_SEAM_BYTES))):
            if len(g) and g[0] == last:
                g = g[1:]
            if len(g):
                last = int(g[-1])
                yield g - (self._first - 1)

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

    def _scan_ranges(self, overlap: int = 0) -> Iterator[tuple[int, int]]:
        """(start, end) byte ranges covering the window, about SCAN_CHUNK_BYTES each.

        Cuts fall at line starts; a single line longer than a chunk is cut inside
        (at a UTF-8 character boundary), which only matters to a match that would
        straddle the cut. With `overlap`, a range cut inside a line reaches that many
        bytes into the next one, so such a match is seen whole (grep counts lines, and
        a line met twice is counted once).
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
                reach = min(b + overlap, line_end) if b < line_end else b
                for _ in range(3):
                    if reach < line_end and self._buf[reach] & 0xC0 == 0x80:
                        reach += 1
                yield a, reach
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
        for a, b in self._scan_ranges(GREP_SEAM_BYTES):
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


def dotted(s: str) -> str:
    """A binary file's text as it is shown: control bytes as '.'."""
    return s.translate(_CONTROL_TO_DOT)


def _looks_binary(buf: Any) -> bool:
    """NUL bytes in the first 64 KiB: the usual test (git, grep) for binary data."""
    return b"\x00" in buf[:65536]
