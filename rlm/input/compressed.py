"""Compressed inputs: gzip, bzip2, xz and zstd, recognised by their first bytes, not their name.

A compressed input is decompressed once, streaming, into a file beside its line index in
the cache (rlm.input.source keys both by the compressed file), so every later view (the
index, the table, the worker's mapping) reads plain bytes and a second question pays
nothing. Memory stays bounded whatever the ratio: every read returns at most one chunk,
so a file that expands a thousandfold costs a chunk, not its size. Concatenated members
or frames (`cat a.gz b.gz`, pigz, zstd's multi-frame output) are read through, as `zcat` does.

A damaged file (a truncated download, a flipped byte) is one line naming the input and
the byte where reading stopped (InputError, exit 3): never a traceback, never half a file
passed on as if whole.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from rlm.errors import InputError

__all__ = ["CODECS", "check_room", "codec_of", "decompress", "name_without_suffix", "plain_blocks"]

# The first bytes of each format (its magic number), as its specification gives them.
CODECS: dict[str, bytes] = {
    "gzip": b"\x1f\x8b",
    "bzip2": b"BZh",
    "xz": b"\xfd7zXZ\x00",
    "zstd": b"\x28\xb5\x2f\xfd",
}
# The suffixes that name a compressed file: format detection reads the name without them
# (`access.log.gz` is an access log, `export.csv.zst` a CSV).
_SUFFIX = re.compile(r"\.(?:gz|gzip|bz2|xz|zst|zstd)$", re.I)
# Plain bytes handed on per read: the memory a decompression holds, whatever the ratio. With
# 1 MiB reads a 64 MiB log's gzip took 0.23 s against `zcat`'s 0.30 s (bench/compressed_bench.py).
CHUNK = 1 << 20
# Compressed bytes given to the zstd decoder at a time: one of its blocks expands to at most
# 128 KiB, a run-length block is 4 bytes, so a feed of 256 bytes yields at most 8 MiB (8 KiB
# yielded 256 MiB from a crafted file). A 6.7 MB .zst log: 0.14 s with either feed.
ZSTD_FEED = 256
# Room kept free on the disk that takes the plain bytes: a file that expands past what the disk
# holds less this stops with a message, not a full disk (a 786-byte bzip2 file can hold 1 GiB).
DISK_MARGIN = 1 << 30
_SPACE_CHECK_EVERY = 64  # chunks between looks at the free space (about 64 MB)


def codec_of(head: bytes) -> str | None:
    """The compression format whose magic number `head` starts with, or None."""
    for name, magic in CODECS.items():
        if head.startswith(magic):
            return name
    return None


def name_without_suffix(name: str) -> str:
    """`access.log.2.gz` -> `access.log.2`: the name the file's format is guessed from."""
    return _SUFFIX.sub("", name)


def _blocks(codec: str, raw: BinaryIO, chunk: int = CHUNK) -> Iterator[bytes]:
    """The plain bytes of `raw`, at most `chunk` bytes a block (zstd: as its frames yield)."""
    if codec == "zstd":
        yield from _zstd_blocks(raw)
        return
    reader: Any
    if codec == "gzip":
        reader = gzip.GzipFile(fileobj=raw, mode="rb")
    elif codec == "bzip2":
        reader = bz2.BZ2File(raw, mode="rb")
    else:
        reader = lzma.LZMAFile(raw, mode="rb")
    with reader:  # each read returns at most CHUNK bytes; a cut-short stream raises EOFError
        while block := reader.read(chunk):
            yield block


def _zstd_blocks(raw: BinaryIO) -> Iterator[bytes]:
    """zstd frame by frame. Its stream reader ends a cut-short frame without a word, so the
    frames are decoded here, fed a little input at a time (ZSTD_FEED: what one feed can
    expand to is bounded), and a frame still open at the end of the file is an error."""
    import zstandard  # imported here: only a zstd input pays for it

    dctx = zstandard.ZstdDecompressor()
    frame, fed = dctx.decompressobj(), False
    while data := raw.read(ZSTD_FEED):
        while data:
            block = frame.decompress(data)
            fed = True
            if block:
                yield block
            if not frame.eof:
                break
            data = frame.unused_data  # the next frame's start, if any
            frame, fed = dctx.decompressobj(), False
    if fed and not frame.eof:
        raise EOFError("Compressed file ended before the end of its last frame")


def _damage_errors() -> tuple[type[BaseException], ...]:
    """What each decompressor raises on damaged or cut-short data."""
    errors: list[type[BaseException]] = [EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError]
    errors.append(ValueError)  # bz2 ("Invalid data stream") and zstd's size checks
    try:
        import zstandard
    except ImportError:
        pass
    else:
        errors.append(zstandard.ZstdError)
    return tuple(errors)


def decompress(
    path: str, codec: str, out: BinaryIO, *, display: str, identity: tuple[int, int] = (0, 0)
) -> int:
    """Write the plain bytes of `path` to `out`, one chunk at a time; the bytes written.

    Raises InputError naming `display` and the compressed byte reading stopped at when the
    data is damaged or cut short, when the plain bytes would leave less than DISK_MARGIN free
    on the disk `out` writes to, or when they cannot be written."""
    written = 0
    try:
        for n, block in enumerate(plain_blocks(path, codec, display=display, identity=identity)):
            if n % _SPACE_CHECK_EVERY == 0:
                check_room(out, written, display)
            out.write(block)
            written += len(block)
    except OSError as exc:
        raise InputError(
            f"cannot decompress {display}: {exc.strerror or exc} after {written:,} bytes"
        ) from None
    if written == 0:
        raise InputError(f"{display} is empty once decompressed: there is nothing to ask about")
    return written


def plain_blocks(
    path: str, codec: str, *, display: str, chunk: int = CHUNK, identity: tuple[int, int] = (0, 0)
) -> Iterator[bytes]:
    """The plain bytes of `path`, at most `chunk` bytes a block; a reader may stop early (the
    rest is then never decompressed). `identity`: the (device, inode) the file must still be
    (rlm.input.snapshot.open_same). Raises InputError naming `display` and the compressed
    byte reading stopped at when the data is damaged or cut short."""
    from rlm.input.snapshot import open_same

    with open_same(path, *identity, display) as raw:
        try:
            yield from _blocks(codec, raw, chunk)
        except _damage_errors() as exc:
            at = raw.tell()
            why = str(exc).strip() or type(exc).__name__
            raise InputError(
                f"{display} is not a whole {codec} file: reading stopped near byte {at:,} ({why})"
            ) from None


def check_room(out: BinaryIO, written: int, display: str) -> None:
    """Stop before the plain bytes fill the disk they are written to."""
    try:
        free = os.statvfs(out.fileno())
    except (OSError, ValueError, AttributeError):
        return  # not a file on a disk (a pipe, a buffer): nothing to measure
    room = free.f_bavail * free.f_frsize
    if room < DISK_MARGIN + CHUNK * _SPACE_CHECK_EVERY:
        raise InputError(
            f"{display} decompresses to more than the disk holds: {written:,} bytes written, "
            f"{room:,} bytes left free; free some space or set RLM_CACHE_DIR to a larger disk"
        )
