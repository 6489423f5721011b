"""Times, spans and counts over time as a person reads them: `rlm stats` and the model's profile."""

from __future__ import annotations

import re

__all__ = ["BARS", "duration", "sparkline", "when"]

BARS = "▁▂▃▄▅▆▇█"


def sparkline(counts: list[int]) -> str:
    """One character a count, ▁ to █ by eighths of the largest (rounded up); a space for none."""
    peak = max(counts, default=0)
    if peak <= 0:
        return " " * len(counts)
    return "".join(" " if c <= 0 else BARS[min(7, -(-c * 8 // peak) - 1)] for c in counts)


def when(iso: str) -> str:
    """ISO 8601 as a person reads it: a space for the T, milliseconds where the microseconds are
    whole ones, the zone said once beside it."""
    return re.sub(r"(\.\d{3})000\b", r"\1", iso.replace("T", " ", 1).removesuffix("+00:00"))


def duration(seconds: float) -> str:
    s = int(round(seconds))
    days, s = divmod(s, 86_400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days} d {hours} h {minutes} min"
    if hours:
        return f"{hours} h {minutes} min {s} s"
    if minutes:
        return f"{minutes} min {s} s"
    return f"{seconds:g} s"
