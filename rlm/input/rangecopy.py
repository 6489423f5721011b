"""The lines of one part that fall in a time range, copied out without reading what need not be.

A log is written in time order, nearly: a request is logged when it ends, stamped when it
began, so neighbours differ by up to a request's length. This module leans on that order
and checks it as it goes:

- A plain part is entered by binary search on its bytes (each probe reads one line's time
  near an offset), so the hours before `--since` are never read; the lines skipped are only
  counted, for the kept lines to keep their own numbers.
- The rest is read in slabs of about 8 MB of whole lines. Of each slab only the first and last
  few lines' times are read (one query): a slab wholly before the range is dropped, one
  wholly inside is copied as it is, and the first slab wholly after it ends the reading (a
  compressed part is decompressed no further). Only a slab that straddles a bound has every
  line's time read, so the bounds are exact.
- "Wholly" allows for lines out of order by up to MARGIN. A slab that starts more than MARGIN
  before the one before it ended, or ends more than MARGIN before it starts, means the part
  is not in time order: its reading starts over with every line's time read (OutOfOrder).

A line with no time (a continuation, a blank line) goes with the line before it; lines before
a part's first timed line go with that line; a CSV part's header line is always kept.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rlm.errors import InputError
from rlm.input.compressed import plain_blocks
from rlm.input.snapshot import open_same
from rlm.input.timeclock import Clock
from rlm.text.textcap import human_size

__all__ = ["MARGIN", "Kept", "copy_in_range", "first_lines", "part_span"]

MARGIN = timedelta(minutes=10)
SLAB = 8 << 20  # bytes of whole lines read per slab (a clock query costs ~8 ms whatever its size)
PROBE = 64 << 10  # bytes read around an offset for one line's time
LINE_MAX = 256 << 20  # a line held whole to be placed; a longer one is refused (memory stays bounded)
_ENDS = 16  # lines at each end of a slab whose times decide it


@dataclass
class Kept:
    """What copy_in_range kept of a part: runs of its own line numbers (first, count)."""

    runs: list[tuple[int, int]] = field(default_factory=list)
    lines: int = 0
    whole: bool = True  # every byte of the part was read (its sha256 is then `sha256`)
    ordered: bool = True  # False: found out of order, read again line by line
    sha256: str = ""

    def add(self, first: int, count: int) -> None:
        if count <= 0:
            return
        if self.runs and sum(self.runs[-1]) == first:
            self.runs[-1] = (self.runs[-1][0], self.runs[-1][1] + count)
        else:
            self.runs.append((first, count))
        self.lines += count


class OutOfOrder(Exception):
    """The part's times do not run in order: it is read again, every line's time read."""


class _Past(Exception):
    """The range ended: nothing later in the part is read."""


def first_lines(path: str, codec: str | None, display: str, limit: int = PROBE) -> list[str]:
    """The whole lines within the first `limit` plain bytes of a part, decoded."""
    data = b""
    for block in _raw_blocks(path, codec, display, 0, chunk=limit // 4):
        data += block
        if len(data) >= limit:
            break
    cut = data[:limit]
    if len(data) > limit:
        cut = cut[: cut.rfind(b"\n") + 1] or cut
    return [_text(line) for line in _lines(cut)]


def part_span(
    path: str, codec: str | None, clock: Clock, head: list[str]
) -> tuple[datetime | None, datetime | None]:
    """(the first time among a part's first lines `head`, the last among its last lines); the
    last only for a plain part (a compressed one would have to be read through), else None."""
    times = [t for t in clock.times(head) if t is not None]
    first = min(times) if times else None
    if codec is not None:
        return first, None
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - PROBE))
        tail = fh.read(PROBE)
    lines = _lines(tail)[1:] if size > PROBE else _lines(tail)
    times = [t for t in clock.times([_text(x) for x in lines]) if t is not None]
    return first, (max(times) if times else None)


def copy_in_range(
    path: str,
    codec: str | None,
    display: str,
    clock: Clock,
    bounds: tuple[datetime | None, datetime | None],
    write: Callable[[bytes], Any],
    rewind: Callable[[], None],
    *,
    keep_header: bool = False,
    identity: tuple[int, int] = (0, 0),
) -> Kept:
    """Write the lines of the part at `path` whose times are within `bounds` (inclusive, naive,
    in the clock's frame); what was kept, in the part's own line numbers. `rewind` undoes what
    was written when the part is found out of order and read again. `identity`: the (device,
    inode) the file must still be when its bytes are copied. Raises InputError on a damaged
    compressed part, or one replaced since it was listed."""
    copy = functools.partial(_Copy, path, codec, display, clock, bounds, write, keep_header, identity)
    try:
        return copy(ordered=True).run()
    except OutOfOrder:
        rewind()
        return copy(ordered=False).run()


class _Copy:
    def __init__(
        self,
        path: str,
        codec: str | None,
        display: str,
        clock: Clock,
        bounds: tuple[datetime | None, datetime | None],
        write: Callable[[bytes], Any],
        keep_header: bool,
        identity: tuple[int, int],
        *,
        ordered: bool,
    ) -> None:
        self.path, self.codec, self.display, self.clock = path, codec, display, clock
        self.identity = identity
        self.lo, self.hi = bounds
        self.write, self.keep_header, self.ordered = write, keep_header, ordered
        self.kept = Kept(ordered=ordered)
        self.line = 1  # the part's own number of the next line read
        self.state: bool | None = None  # whether the last timed line was kept (None: none yet)
        self.pending: list[bytes] = []  # lines before the part's first timed line
        self.last_seen: datetime | None = None

    def run(self) -> Kept:
        start = 0
        if self.codec is None and self.ordered and self.lo is not None:
            start = self._start_offset()
        digest = hashlib.sha256() if start == 0 and self.codec is None else None
        if start:
            self.kept.whole = False
            self.line = 1 + _newlines(self.path, start)
            if self.keep_header:  # a CSV's header, read from the top; the lines skipped counted
                with open(self.path, "rb") as fh:
                    header = fh.readline()
                self.write(header if header.endswith(b"\n") else header + b"\n")
                self.kept.add(1, 1)
        try:
            for slab in self._slabs(start, digest):
                self._slab(slab)
        except _Past:
            self.kept.whole = False
        self._flush_pending(keep=False)
        if digest is not None and self.kept.whole:
            self.kept.sha256 = digest.hexdigest()
        return self.kept

    # ---------------------------------------------------------------- reading

    def _slabs(self, start: int, digest: Any) -> Iterator[list[bytes]]:
        carry = b""
        pieces: list[bytes] = []
        size = 0
        for block in _raw_blocks(self.path, self.codec, self.display, start, identity=self.identity):
            if digest is not None:
                digest.update(block)
            pieces.append(block)
            size += len(block)
            if size >= SLAB:
                data = carry + b"".join(pieces)
                cut = data.rfind(b"\n") + 1
                if cut:
                    carry = data[cut:]
                    yield _lines(data[:cut])
                else:
                    carry = data
                if len(carry) > LINE_MAX:  # a line is placed whole: one this long is refused
                    raise InputError(
                        f"{self.display}: line {self.line:,} (or one soon after) is longer than "
                        f"{human_size(LINE_MAX)}; --since/--until cannot place it in the range"
                    )
                pieces, size = [], 0
        rest = carry + b"".join(pieces)
        if rest:
            if not rest.endswith(b"\n"):
                rest += b"\n"  # the part's last line, as the combined text ends it
            yield _lines(rest)

    def _start_offset(self) -> int:
        """A line start before which every line is, by the order, earlier than the range."""
        assert self.lo is not None
        size = os.path.getsize(self.path)
        a, b = 0, size
        with open(self.path, "rb") as fh:
            while b - a > SLAB:
                mid = (a + b) // 2
                t = _time_near(fh, mid, self.clock)
                if t is not None and t + MARGIN < self.lo:
                    a = mid
                else:
                    b = mid
            if a == 0:
                return 0
            fh.seek(a)
            fh.readline()  # the line `a` falls in starts before it: also earlier
            return fh.tell()

    # ---------------------------------------------------------------- deciding

    def _slab(self, lines: list[bytes]) -> None:
        if self.line == 1 and self.keep_header and lines:
            self._keep(lines[:1], 1)
            lines = lines[1:]
        if not lines:
            return
        if not self.ordered:
            self._exact(lines)
            return
        ends = lines[:_ENDS] + lines[-_ENDS:] if len(lines) > 2 * _ENDS else lines
        times = self.clock.times([_text(x) for x in ends])
        head = times[: min(_ENDS, len(times))]
        firsts = [(i, t) for i, t in enumerate(head) if t is not None]
        lasts = [t for t in times[len(times) - min(_ENDS, len(times)) :] if t is not None]
        if not firsts or not lasts:
            self._exact(lines)
            return
        lead, first = firsts[0]
        last = lasts[-1]
        if (self.last_seen is not None and first < self.last_seen - MARGIN) or last < first - MARGIN:
            raise OutOfOrder
        self.last_seen = max(last, self.last_seen or last)
        before = self.lo is not None and last + MARGIN < self.lo
        after = self.hi is not None and first - MARGIN > self.hi
        inside = (self.lo is None or first - MARGIN >= self.lo) and (
            self.hi is None or last + MARGIN <= self.hi
        )
        decided = False if before or after else True if inside else None
        if decided is None or (lead and self.state is not None and self.state != decided):
            self._exact(lines)
        elif decided:
            self._flush_pending(keep=True)
            self._keep(lines, len(lines))
            self.state = True
        else:
            self._flush_pending(keep=False)
            self.line += len(lines)
            self.state = False
        if after:
            raise _Past

    def _exact(self, lines: list[bytes]) -> None:
        """Every line's time read: each kept or not on its own, an untimed one as its elder."""
        times = self.clock.times([_text(x) for x in lines])
        run: list[bytes] = []
        run_keep: bool | None = None
        for raw, t in zip(lines, times, strict=True):
            if t is not None:
                keep = (self.lo is None or t >= self.lo) and (self.hi is None or t <= self.hi)
                if self.state is None:
                    self._flush_pending(keep=keep)
                self.state = keep
            elif self.state is None:
                self.pending.append(raw)
                continue
            if run and run_keep != self.state:
                self._emit(run, bool(run_keep))
                run = []
            run.append(raw)
            run_keep = self.state
        if run:
            self._emit(run, bool(run_keep))

    def _emit(self, lines: list[bytes], keep: bool) -> None:
        if keep:
            self._keep(lines, len(lines))
        else:
            self.line += len(lines)

    def _flush_pending(self, *, keep: bool) -> None:
        if self.pending:
            lines, self.pending = self.pending, []
            self._emit(lines, keep)

    def _keep(self, lines: list[bytes], count: int) -> None:
        self.write(b"".join(lines))
        self.kept.add(self.line, count)
        self.line += count


def _raw_blocks(
    path: str,
    codec: str | None,
    display: str,
    start: int,
    chunk: int = 1 << 20,
    identity: tuple[int, int] = (0, 0),
) -> Iterator[bytes]:
    if codec is not None:
        yield from plain_blocks(path, codec, display=display, chunk=chunk, identity=identity)
        return
    with open_same(path, *identity, display) as fh:
        fh.seek(start)
        while block := fh.read(chunk):
            yield block


def _time_near(fh: Any, offset: int, clock: Clock) -> datetime | None:
    """The time of the first timed line that starts after `offset` (within PROBE bytes)."""
    fh.seek(offset)
    data = fh.read(PROBE)
    lines = data.split(b"\n")[1:-1]  # the first is cut by the offset, the last by the read
    for t in clock.times([_text(x) for x in lines[:_ENDS]]):
        if t is not None:
            return t
    return None


def _newlines(path: str, end: int) -> int:
    """The lines that start before byte `end` (a line start) of a plain file: counted, not read
    as text."""
    if end <= 0:
        return 0
    count = 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for at in range(0, end, 64 << 20):
            count += mm[at : min(end, at + (64 << 20))].count(b"\n")
    return count


def _lines(data: bytes) -> list[bytes]:
    """`data` cut into lines at '\n' only, each with its '\n' (the last without one if it has
    none), as the line index counts them: a lone '\r' is a byte of its line, not a line end."""
    out = [x + b"\n" for x in data.split(b"\n")]
    out[-1] = out[-1][:-1]
    return out if out[-1] else out[:-1]


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip("\r\n")
