"""The text of a big window as a read-only, str-like object, and `re` functions that take it.

Worker-safe (rlm.text): standard library only. `MappedText.text()` hands model
code a `LazyText` above TEXT_IN_MEMORY_MAX_BYTES, so `context` never costs a
decode of the whole file; the re_* functions are what the sandbox's `re`
module offers, chunk by chunk over a LazyText and exactly `re` over a str.
Over 400 lines: LazyText mirrors the str API model code uses, and the re
functions must agree with it match for match.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rlm.text.index import SCAN_CHUNK_BYTES

if TYPE_CHECKING:
    from rlm.text.textfile import MappedText

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
    it), as `context_lines` does; regexes run chunk by chunk, chunks ending at
    line ends, so a match spanning a line end between two 4 MiB chunks is not
    found, and a non-MULTILINE `$`/`\\Z` also matches at the end of each chunk
    (a line longer than a chunk is cut inside it, and matches across that cut
    are found: see SEAM_CHARS). Operations that would copy the whole text
    (lower(), replace(), ...) raise with advice instead; `str(text)` makes the
    full copy when it is really wanted.
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
        for text, at, skip, _ in self._seamed_chunks():
            yield text, at, skip

    def _seamed_chunks(self) -> Iterator[tuple[str, int, int, bool]]:
        """As _prefixed_chunks, and whether the chunk is cut inside a line (one longer than
        a chunk: the next chunk goes on with the same line)."""
        t = self._t
        buf, pos = t._buf, 0
        last = t._wstart + t.window_bytes
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
            yield text, pos, skip, b < last and buf[b - 1] != 0x0A
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


# Where a chunk is cut inside a line (a line longer than a chunk, as in a one-line JSON
# document), a match may straddle the cut: the matches ending in the last SEAM_CHARS of such a
# chunk are searched again with the next chunk behind them, so a match up to this long (and
# any longer one that starts a chunk's tail) is found whole and once, as `re` finds it in the
# str. Without this, re.finditer('"version":\\d+', context) over a 1 GB one-line JSON lost
# one match in 183,500.
SEAM_CHARS = 64 * 1024


def _chunk_matches(p: re.Pattern[str], text: LazyText) -> Iterator[tuple[re.Match[str], int]]:
    """(match, delta to add to its offsets) over the chunks of `text`, in order."""
    pending = ""  # the unsearched tail of a chunk cut inside a line, one character of context first
    resume = 0  # where in `pending` the search goes on
    for chunk, at, skip, cut in text._seamed_chunks():
        if pending:
            buf, start, base = pending + chunk[skip:], resume, at - len(pending)
        else:
            buf, start, base = chunk, skip, at - skip
        pending = ""
        limit = len(buf) - SEAM_CHARS if cut else len(buf) + 1
        go_on = max(start, limit)  # where the next chunk's search starts, unless a match says
        for m in p.finditer(buf, start):
            if m.end() >= limit:  # it may go on past the cut (or end differently): search again
                go_on = m.start()
                break
            yield m, base
            go_on = max(limit, m.end())
        if cut:
            keep = max(0, go_on - 1)
            pending, resume = buf[keep:], go_on - keep


def _wrap(m: re.Match[str], delta: int) -> re.Match[str] | ShiftedMatch:
    return m if delta == 0 else ShiftedMatch(m, delta)


def re_findall(pattern: Any, string: Any, flags: int = 0) -> list[Any]:
    p = _as_pattern(pattern, flags)
    if not isinstance(string, LazyText):
        return p.findall(string)
    if not p.groups:
        return [m.group() for m, _ in _chunk_matches(p, string)]
    if p.groups == 1:
        return [m.group(1) or "" for m, _ in _chunk_matches(p, string)]
    return [m.groups("") for m, _ in _chunk_matches(p, string)]


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
