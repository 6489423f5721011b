"""The bytes DuckDB reads when the input itself will not do, copied into the build's work folder.

DuckDB reads UTF-8 only and splits lines at a carriage return too. A table
build (rlm.input.tables) reads the input as it is when it can (a file whose
every carriage return ends a line included: `crlf_only`); otherwise one of
these copies: line feeds alone ending lines (a line's final carriage return
dropped, as context_lines does; any other read as a space), another encoding
transcoded with invalid bytes as U+FFFD (exactly as peek and context_lines
show them), lines over the table's limit cut at a character boundary. Every
copy is read and written in blocks: a mapping of the file would count in the
process's memory.
"""

from __future__ import annotations

import mmap
import os
import shutil
from typing import Any

from rlm.text.textfile import MappedText

__all__ = ["copy_for_duckdb", "crlf_only", "cut_long_lines", "has_cr", "head_has_cr"]


def copy_for_duckdb(path: str, work: str, encoding: str | None) -> str:
    """A '\n'-only UTF-8 copy of `path` in `work` (transcoded from `encoding` unless None)."""
    dest = os.path.join(work, "input.txt")
    if encoding is None:
        _strip_cr(path, dest)
    else:
        _transcode(path, dest, encoding)
    return dest


def cut_long_lines(src: str, work: str, spans: list[tuple[int, int]], keep_bytes: int) -> str:
    """A copy of `src` in `work` with each line of `spans` ((start, end) byte offsets, end
    past its '\n') cut to `keep_bytes` at a character boundary; every other byte as is."""
    dest = os.path.join(work, "cut.txt")
    with open(src, "rb") as fh, open(dest, "wb") as out:
        pos = 0
        for start, end in spans:
            _copy_bytes(fh, out, pos, start - pos)
            fh.seek(start)
            head = fh.read(keep_bytes + 1)
            keep = keep_bytes
            while keep > 0 and head[keep] & 0xC0 == 0x80:  # not inside a UTF-8 sequence
                keep -= 1
            out.write(head[:keep] + b"\n")
            pos = end
        fh.seek(pos)
        shutil.copyfileobj(fh, out, 16 << 20)
    return dest


def _copy_bytes(fh: Any, out: Any, offset: int, count: int) -> None:
    fh.seek(offset)
    while count > 0:
        block = fh.read(min(count, 16 << 20))
        if not block:
            break
        out.write(block)
        count -= len(block)


def head_has_cr(path: str) -> bool:
    """A carriage return in the first 64 KB: CRLF line endings, most likely."""
    with open(path, "rb") as fh:
        return b"\r" in fh.read(65536)


def has_cr(path: str) -> bool:
    """A carriage return anywhere (read in blocks: a mapping of the file would count in the RSS)."""
    with open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            if b"\r" in block:
                return True
    return False


def crlf_only(path: str) -> bool:
    """Whether every carriage return of the file ends a line (is followed by '\n'): CRLF endings,
    some LF ones among them maybe, no stray CR. Blocks of the mapping are looked through by
    numpy on every processor (its comparisons leave the GIL free)."""
    from concurrent.futures import ThreadPoolExecutor

    block = 16 << 20  # each thread's comparisons hold three arrays of its size at once
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return True
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            # Each block reads one byte past its end, so a CR at its last byte is judged too.
            spans = [(off, min(block + 1, size - off)) for off in range(0, size, block)]
            with ThreadPoolExecutor(max_workers=min(len(spans), os.cpu_count() or 1)) as pool:
                strays = list(pool.map(lambda span: _has_stray_cr(mm, *span), spans))
    return not any(strays)


def _has_stray_cr(mm: Any, off: int, n: int) -> bool:
    """A CR not followed by '\n' in the n bytes from `off`, its last byte only as what follows.
    The views of the mapping end with the call, so the mapping can be closed."""
    import numpy as np

    chunk = np.frombuffer(mm, dtype=np.uint8, count=n, offset=off)
    if off + n == len(mm) and chunk[-1] == 13:
        return True  # a CR that ends the file ends no line
    return bool(np.count_nonzero((chunk[:-1] == 13) & (chunk[1:] != 10)))


def _strip_cr(src: str, dest: str) -> None:
    """Copy a UTF-8 file with CRLF (or stray CR) endings as '\n'-only."""
    chunk = 64 << 20
    with open(src, "rb") as fh, open(dest, "wb") as out:
        carry = b""
        while block := fh.read(chunk):
            block = carry + block
            carry = b""
            if block.endswith(b"\r"):
                block, carry = block[:-1], b"\r"
            out.write(block.replace(b"\r\n", b"\n").replace(b"\r", b" "))
        if carry:
            out.write(b"")  # a final lone CR ends the file: context_lines drops it too


def _transcode(src: str, dest: str, encoding: str) -> None:
    """A '\n'-only UTF-8 copy of a file in another encoding, decoded as the worker decodes it."""
    with MappedText(src, encoding=encoding) as text, open(dest, "w", encoding="utf-8", newline="\n") as out:
        lines = text.lines
        step = 65536
        for i in range(0, len(lines), step):
            out.write("".join(s.replace("\r", " ") + "\n" for s in lines[i : i + step]))
