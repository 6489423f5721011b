"""Which file each line came from, when several inputs are read as one text (rlm.input.parts).

The worker is handed the parts as (name, first line, last line) over the whole text; a
worker over a window of it (a child node's lines a..b) sees them cut to the window and
renumbered as its own lines are. `context_files` lists them, `file_of(n)` names line n's
part, `lines_of(name)` gives a part's lines (a view of context_lines), and sql()'s `log` gets a column naming each row's part (`file_case`, computed from
the stored line numbers, so it costs nothing in a query that does not read it).

Imported by the sandbox worker: stdlib and rlm.text only.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rlm.text.sqltext import sql_string

__all__ = ["FilePart", "file_case", "file_of_helper", "lines_of_helper", "part_locator", "window_parts"]


class FilePart(NamedTuple):
    """One input file of the text: its name and the lines it holds (1-based, inclusive)."""

    name: str
    first_line: int
    last_line: int


def window_parts(
    spec_parts: Sequence[Any] | None, start_line: int | None, end_line: int | None
) -> tuple[FilePart, ...]:
    """The parts as the worker's own lines number them: a window a..b keeps the parts it
    overlaps, cut to it, and numbers them from 1 as context_lines does."""
    if not spec_parts:
        return ()
    a = max(1, int(start_line or 1))
    b = int(end_line) if end_line is not None else None
    out: list[FilePart] = []
    for name, first, last, *_ in spec_parts:
        lo, hi = max(int(first), a), int(last) if b is None else min(int(last), b)
        if lo <= hi:
            out.append(FilePart(str(name), lo - a + 1, hi - a + 1))
    return tuple(out)


def file_of_helper(parts: tuple[FilePart, ...], n_lines: int) -> Callable[[int], str]:
    """`file_of(line_number)`: the name of the file line `line_number` came from."""
    firsts = [p.first_line for p in parts]

    def file_of(line_number: int) -> str:
        if isinstance(line_number, bool) or not isinstance(line_number, int):
            raise TypeError(
                f"file_of(line_number): a line number is a whole number, not {type(line_number).__name__}"
            )
        if not 1 <= line_number <= n_lines:
            raise ValueError(f"file_of({line_number}): line numbers run from 1 to {n_lines:,}")
        i = bisect.bisect_right(firsts, line_number) - 1
        if i < 0 or line_number > parts[i].last_line:
            raise ValueError(f"file_of({line_number}): no file holds that line")
        return parts[i].name

    return file_of


def lines_of_helper(parts: tuple[FilePart, ...], lines: Any) -> Callable[[str], Any]:
    """`lines_of(name)`: the lines of one file, as a view of `lines` (context_lines: nothing is
    copied). `name` as context_files gives it, or the end of it (`access.log.2.gz`) when that
    names one file only."""

    def lines_of(name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"lines_of(name): a file's name is a text, not {type(name).__name__}")
        found = [p for p in parts if p.name == name] or [
            p for p in parts if name.strip("/") and p.name.endswith("/" + name.strip("/"))
        ]
        if len(found) != 1:
            why = "no file" if not found else f"{len(found)} files"
            names = ", ".join(repr(p.name) for p in parts[:10]) + (" …" if len(parts) > 10 else "")
            raise ValueError(f"lines_of({name!r}): {why} of context_files has that name; they are {names}")
        part = found[0]
        return lines[part.first_line - 1 : part.last_line]

    return lines_of


def part_locator(
    spec_parts: Sequence[Any] | None, start_line: int | None
) -> Callable[[int], tuple[str, int]] | None:
    """(file name, line number in that file) of a line as this worker numbers it, for peek and
    grep to name each line's file; None with no parts (one input: observations as they always
    were). Counted from the file's own first line, also in a window that starts inside it."""
    if not spec_parts:
        return None
    a = max(1, int(start_line or 1))
    names = [str(p[0]) for p in spec_parts]
    firsts = [int(p[1]) for p in spec_parts]
    runs = [_run_starts(p[3]) if len(p) > 3 else None for p in spec_parts]

    def part_of(line_number: int) -> tuple[str, int]:
        whole = line_number + a - 1
        i = max(0, bisect.bisect_right(firsts, whole) - 1)
        kept = whole - firsts[i] + 1  # the part's kept line this is, counted from 1
        if runs[i] is None:
            return names[i], kept
        starts, owns = runs[i]  # type: ignore[misc]
        j = max(0, bisect.bisect_right(starts, kept) - 1)
        return names[i], owns[j] + kept - starts[j]

    return part_of


def _run_starts(runs: Sequence[Any]) -> tuple[list[int], list[int]]:
    """Of a part's runs (its own first line number, count), where each starts among the kept
    lines (counted from 1) and its own number there: a time range keeps some lines only."""
    starts, owns, at = [], [], 1
    for own, count in runs:
        starts.append(at)
        owns.append(int(own))
        at += int(count)
    return starts, owns


def file_case(spec_parts: Sequence[Any], column: str = "line_no") -> str:
    """A SQL expression naming the part of the row whose stored line number is `column`: a
    balanced CASE (a binary search, so a thousand parts cost ten comparisons a row)."""
    parts = [(str(p[0]), int(p[1]), int(p[2])) for p in spec_parts]

    def split(lo: int, hi: int) -> str:
        if lo == hi:
            return sql_string(parts[lo][0])
        mid = (lo + hi) // 2
        return f"CASE WHEN {column} <= {parts[mid][2]} THEN {split(lo, mid)} ELSE {split(mid + 1, hi)} END"

    return split(0, len(parts) - 1) if parts else "NULL"
