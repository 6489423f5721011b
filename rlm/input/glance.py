"""A big file's first and last lines, read without its line index, and its line count estimated.

The line index is one pass over every byte (about 0.5 s a gigabyte on one core, more beside
the run's start): a big file's model turn need not wait for it. What the first prompt shows
of the file (its first and last lines, its format, how many lines) is read here from the
two ends and from a few sampled blocks; the index is made meanwhile (rlm.input.source), and
what needs it (the worker, the table, the trace) waits for it.

Lines are cut and decoded as MappedText.line_head cuts and decodes them, so the profile reads
the same text whichever way it was made.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

__all__ = ["Glance", "glance"]

_UTF8_BOM = b"\xef\xbb\xbf"
# Blocks sampled across the file to estimate its line count: 16 of 256 KB read 4 MB at most.
_SAMPLE_BLOCKS = 16
_SAMPLE_BYTES = 256 * 1024
_BINARY_PROBE = 65536  # NUL bytes in the first 64 KiB: binary, as MappedText says it


@dataclass(frozen=True)
class Glance:
    """The ends of a file: its first lines, its last lines and its estimated line count."""

    head: list[str]  # the first lines, each its first `max_bytes` bytes
    tail: list[str]  # the last lines, in order
    estimated_lines: int
    binary: bool


def glance(path: str, codec: str, *, head_lines: int, tail_lines: int, max_bytes: int) -> Glance | None:
    """The first `head_lines` and last `tail_lines` lines of the file at `path` (decoded with
    `codec`, each cut to `max_bytes` bytes), and its line count estimated from sampled blocks;
    None when the two ends meet (a file of few lines, whose scan is as quick as this)."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        size = len(mm)
        first = 3 if mm[:3] == _UTF8_BOM else 0
        head: list[str] = []
        pos = first
        while len(head) < head_lines and pos < size:
            nl = mm.find(b"\n", pos)
            end = size if nl < 0 else nl + 1
            head.append(_line(mm, pos, end, codec, max_bytes))
            pos = end
        head_end = pos
        tail: list[str] = []
        end = size
        while len(tail) < tail_lines and end > head_end:
            start = mm.rfind(b"\n", first, end - 1) + 1 or first
            if start < head_end:
                return None  # the tail reaches into the head
            tail.append(_line(mm, start, end, codec, max_bytes))
            end = start
        if end <= head_end:
            return None
        tail.reverse()
        return Glance(head, tail, _estimate(mm, first, size), b"\x00" in mm[:_BINARY_PROBE])


def _line(mm: mmap.mmap, a: int, b: int, codec: str, max_bytes: int) -> str:
    """Bytes a..b (a line and its ending) as MappedText.line_head gives them."""
    if b - a > max_bytes:
        cut = a + max_bytes
        while cut > a and mm[cut] & 0xC0 == 0x80:
            cut -= 1  # never split a UTF-8 sequence
        return mm[a:cut].decode(codec, errors="replace")
    data = mm[a:b]
    if data.endswith(b"\n"):
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    return data.decode(codec, errors="replace")


def _estimate(mm: mmap.mmap, first: int, size: int) -> int:
    """Lines in bytes first..size, from the newlines of blocks spread evenly across them."""
    span = size - first
    if span <= _SAMPLE_BLOCKS * _SAMPLE_BYTES:
        newlines, read = mm[first:size].count(b"\n"), span
    else:
        step = (span - _SAMPLE_BYTES) // (_SAMPLE_BLOCKS - 1)
        offsets = [first + i * step for i in range(_SAMPLE_BLOCKS)]
        newlines = sum(mm[o : o + _SAMPLE_BYTES].count(b"\n") for o in offsets)
        read = _SAMPLE_BLOCKS * _SAMPLE_BYTES
    counted = round(newlines * span / read)
    return max(1, counted + (0 if mm[size - 1 : size] == b"\n" else 1))
