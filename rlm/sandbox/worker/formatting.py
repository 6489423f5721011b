"""How peek and grep results read, identical for actions and in-code helper calls.

Imported by the sandbox worker: stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlm.text.textcap import cap_line

LINE_DISPLAY_CHARS = 400
# The most a cell may print: the worker cuts a cell's output here (in the middle, saying so) so
# that a runaway print cannot flood the pipe; the parent cuts it again to the observation size.
# A value in a printed table is shown whole up to this size too.
MAX_CELL_OUTPUT = 256_000


def numbered(lines: Iterable[tuple[int, str]]) -> str:
    return "\n".join(f"{n:>7}| {cap_line(text, LINE_DISPLAY_CHARS)}" for n, text in lines)


def format_peek_lines(rows: list[tuple[int, str]], start: int, length: int, n_lines: int) -> str:
    if not rows:
        return f"(no lines there: the file has {n_lines:,} lines; peek starts at line 1)"
    first, last = rows[0][0], rows[-1][0]
    head = f"lines {first:,}-{last:,} of {n_lines:,}"
    if last < min(n_lines, start + length - 1):
        head += f" (only these fit in one result; peek from line {last + 1:,} for more)"
    elif start < 1 or last < start + length - 1:
        head += " (clipped to the file)"
    return head + "\n" + numbered(rows)


def format_peek_chars(text: str, start: int, n_chars: int | None) -> str:
    total = f" of {n_chars:,}" if n_chars is not None else ""
    if not text:
        return f"(no characters at offset {start:,}{total})"
    return f"characters {start:,}-{start + len(text) - 1:,}{total}:\n{text}"


def format_grep(pattern: str, total: int, matches: list[tuple[int, str]]) -> str:
    if total == 0:
        return f"no line matches /{pattern}/"
    noun = "line matches" if total == 1 else "lines match"
    head = f"{total:,} {noun} /{pattern}/"
    if len(matches) < total:
        head += f" (showing the first {len(matches):,})"
    return head + "\n" + numbered(matches)
