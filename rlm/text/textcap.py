"""Cutting text to a size for prompts, keeping what matters and saying what was cut.

Imported by the sandbox worker too, so it stays stdlib-only.
"""

from __future__ import annotations

import re
from collections.abc import Callable


def cap_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of `text` within `limit` characters, stating the true length."""
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit:,} of {len(text):,} characters cut here] …\n"
    keep = max(0, limit - len(marker))
    head = keep * 2 // 3
    tail = keep - head
    cut_head = text[:head]
    # Prefer cutting at a line end so numbered lines stay whole.
    nl = cut_head.rfind("\n")
    if nl > head // 2:
        cut_head = cut_head[:nl]
    cut_tail = text[len(text) - tail :] if tail else ""
    nl = cut_tail.find("\n")
    if 0 <= nl < tail // 2:
        cut_tail = cut_tail[nl + 1 :]
    return cut_head + marker + cut_tail


def cap_words(text: str, limit: int) -> str:
    """Cut at a word boundary, marking the cut (used for findings shown to models)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + f" … [cut, {len(text):,} characters in all]"


def cap_line(line: str, limit: int = 400) -> str:
    """One displayed line, cut with the number of hidden characters."""
    if len(line) <= limit:
        return line
    return line[:limit] + f" … [+{len(line) - limit:,} chars]"


def _left_out(chars: int) -> str:
    return f"… [{chars:,} characters left out] …"


LEFT_OUT = re.compile(r"… \[[\d,]+ characters left out\] …")  # the mark `_left_out` writes


def _cut_within(line: str, room: int) -> str:
    """One line longer than `room`: its start and its end, at word boundaries, the middle marked."""
    if len(line) <= room:
        return line
    keep = max(2, room - len(_left_out(len(line))) - 2)
    head, tail = line[: keep // 3], line[len(line) - (keep - keep // 3) :]
    space = head.rfind(" ")
    if space > len(head) // 2:
        head = head[:space]
    space = tail.find(" ")
    if 0 <= space < len(tail) // 2:
        tail = tail[space + 1 :]
    return f"{head.rstrip()} {_left_out(len(line) - len(head) - len(tail))} {tail.lstrip()}"


def cap_ends(text: str, limit: int, wanted: Callable[[str], bool] | None = None) -> str:
    """Keep whole lines of `text` within about `limit` characters: its last line always, the lines
    `wanted` picks, its first line, then more of its end and of its start; every run of lines left
    out becomes one line saying how many characters it held. A line too long for its share is
    shown as its start and its end. What was printed last (a total, an answer) is never the part cut.
    """
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    n = len(lines)
    marker = len(_left_out(len(text))) + 1  # a gap's line, newline included (an upper bound)
    shown: dict[int, str] = {}
    used = 0  # characters of the kept lines with their newlines
    gaps = 0  # runs of lines left out

    def take(i: int, room: int) -> bool:
        nonlocal used, gaps
        if i in shown or not 0 <= i < n:
            return False
        line = lines[i]
        if len(line) > room:
            if room < 80:
                return False
            line = _cut_within(line, room)
        if shown:
            # Taking a line out of a run of left-out lines: that run goes, shrinks or splits in two.
            new_gaps = gaps + 1 - (i == 0 or i - 1 in shown) - (i == n - 1 or i + 1 in shown)
        else:
            new_gaps = (i > 0) + (i < n - 1)
        if used + len(line) + 1 + new_gaps * marker > limit:
            return False
        shown[i] = line
        used += len(line) + 1
        gaps = new_gaps
        return True

    take(n - 1, limit if n == 1 else max(80, limit - marker * 2 - 40))
    if wanted is not None:
        # The lines holding what the question turns on, latest first, within a third of the budget.
        share = used + limit // 3
        for i in range(n - 2, 0, -1):
            if used < share and wanted(lines[i]):
                take(i, min(limit // 4, share - used))
    take(0, max(80, (limit - used) // 2))
    head, tail = 1, n - 2
    head_chars, tail_chars = 0, 0
    open_head, open_tail = True, True
    while (open_head or open_tail) and head <= tail:
        if open_tail and (tail_chars <= 2 * head_chars or not open_head):
            if tail not in shown and not take(tail, limit // 3):
                open_tail = False
                continue
            tail_chars += len(lines[tail]) + 1
            tail -= 1
        else:
            if head not in shown and not take(head, limit // 3):
                open_head = False
                continue
            head_chars += len(lines[head]) + 1
            head += 1
    out: list[str] = []
    skipped: list[int] = []
    for i in range(n):
        if i in shown:
            if skipped:
                out.append(_left_out(sum(len(lines[j]) + 1 for j in skipped) - 1))
                skipped = []
            out.append(shown[i])
        else:
            skipped.append(i)
    if skipped:
        out.append(_left_out(sum(len(lines[j]) + 1 for j in skipped) - 1))
    return "\n".join(out)


def human_size(n: int) -> str:
    """A size as people read it: `512 bytes`, `453.8 KB`, `1.1 GB`."""
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"
