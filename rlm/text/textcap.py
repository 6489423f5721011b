"""Cutting text to a size for prompts, keeping what matters and saying what was cut.

Imported by the sandbox worker too, so it stays stdlib-only.
"""

from __future__ import annotations


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
