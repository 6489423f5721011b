"""How peek and grep results read, identical for actions and in-code helper calls.

Imported by the sandbox worker: stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rlm.text.textcap import cap_line
from rlm.text.visible import visible

LINE_DISPLAY_CHARS = 400
# The most a cell may print: the worker cuts a cell's output here (in the middle, saying so) so
# that a runaway print cannot flood the pipe; the parent cuts it again to the observation size.
# A value in a printed table is shown whole up to this size too.
MAX_CELL_OUTPUT = 256_000


# Where a line came from when several files are read as one: (the file's name, the line's
# number in that file) for a line number of the whole (rlm.sandbox.worker.files.part_locator).
PartOf = Callable[[int], tuple[str, int]]


def numbered(lines: Iterable[tuple[int, str]], part_of: PartOf | None = None) -> str:
    """Lines as `   1204| text`; with `part_of`, each run of lines from one file is headed by
    its name and the first line's number in it (`── access.log.3.gz:1,204 ──`): the whole's line
    numbers stay what peek and sql() take, and the file's own are one subtraction away."""
    out: list[str] = []
    current: str | None = None
    for n, text in lines:
        if part_of is not None:
            name, local = part_of(n)
            if name != current:
                out.append(f"  ── {visible(name)}:{local:,} ──")
                current = name
        out.append(f"{n:>7}| {cap_line(text, LINE_DISPLAY_CHARS)}")
    return "\n".join(out)


def format_peek_lines(
    rows: list[tuple[int, str]], start: int, length: int, n_lines: int, part_of: PartOf | None = None
) -> str:
    if not rows:
        return f"(no lines there: the file has {n_lines:,} lines; peek starts at line 1)"
    first, last = rows[0][0], rows[-1][0]
    head = f"lines {first:,}-{last:,} of {n_lines:,}"
    if last < min(n_lines, start + length - 1):
        head += f" (only these fit in one result; peek from line {last + 1:,} for more)"
    elif start < 1 or last < start + length - 1:
        head += " (clipped to the file)"
    return head + "\n" + numbered(rows, part_of)


def format_peek_chars(text: str, start: int, n_chars: int | None) -> str:
    total = f" of {n_chars:,}" if n_chars is not None else ""
    if not text:
        return f"(no characters at offset {start:,}{total})"
    return f"characters {start:,}-{start + len(text) - 1:,}{total}:\n{text}"


def format_grep(
    pattern: str, total: int, matches: list[tuple[int, str]], part_of: PartOf | None = None
) -> str:
    if total == 0:
        return f"no line matches /{pattern}/"
    noun = "line matches" if total == 1 else "lines match"
    head = f"{total:,} {noun} /{pattern}/"
    if len(matches) < total:
        head += f" (showing the first {len(matches):,})"
    return head + "\n" + numbered(matches, part_of)
