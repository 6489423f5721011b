"""Which parts a time range reads, and how: the plan rlm.input.parts follows under --since/--until.

Each part gets its own clock from its own first lines (rlm.input.timeclock). A part is wholly
outside the range, and not read at all, when its first time is after the range (by more than
rlm.input.rangecopy.MARGIN, the disorder a log's lines are allowed), or its last is before it:
the last read from the end of a plain part, or for a compressed one taken from the next
part's first time when the parts' first times run in order (a rotated set). A part whose
first lines hold no time rlm reads is left out, and said. The others are copied line by
line in range (rlm.input.rangecopy).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlm.errors import UsageError
from rlm.input.compressed import name_without_suffix
from rlm.input.order import Part
from rlm.input.rangecopy import MARGIN, Kept, copy_in_range, first_lines, part_span
from rlm.input.timeclock import Clock, clock_for
from rlm.input.timerange import TimeRange

__all__ = ["RangePlan", "plan_range"]


@dataclass
class RangePlan:
    """The parts to read (their clocks, by part key) and those left out (name, why)."""

    time_range: TimeRange
    clocks: dict[str, Clock] = field(default_factory=dict)
    left_out: list[dict[str, str]] = field(default_factory=list)
    names_read: list[str] = field(default_factory=list)

    @property
    def said(self) -> str:
        return self.time_range.describe()

    @property
    def key(self) -> str:
        """The range as its lines depend on it: the bounds, and the local clock naive log times
        are compared on (rlm.input.timerange)."""
        return f"{self.time_range.key()}|{time.strftime('%z')}"

    def copy(self, part: Part, write: Callable[[bytes], Any], rewind: Callable[[], None]) -> Kept:
        clock = self.clocks[part.key]
        return copy_in_range(
            part.path,
            part.compression,
            part.name,
            clock,
            self.time_range.bounds_for(clock.zoned),
            write,
            rewind,
            keep_header=clock.format in ("csv", "tsv"),
            identity=(part.device, part.inode),
        )

    def profile(self, records: list[dict[str, Any]], lines: int) -> dict[str, Any]:
        """What the profile and the trace say of the range: its bounds, resolved, the lines in it,
        and the parts not read (or read with no line in range)."""
        read = {r["name"] for r in records}
        out_of_order = [r["name"] for r in records if not r.get("ordered", True)]
        left = list(self.left_out)
        for name in self.names_read:
            if name not in read:
                left.append({"name": name, "why": "read: no line in the range"})
        said = f"{self.said}: {lines:,} lines in range"
        if left:
            said += f"; {len(left)} file{'s' if len(left) != 1 else ''} with none ({_names(left)})"
        if out_of_order:
            said += f"; times out of order in {_names([{'name': n} for n in out_of_order])}: every line's time read"
        return {**self.time_range.to_dict(), "said": said, "lines": lines, "left_out": left}


def plan_range(
    parts: list[Part], time_range: TimeRange, *, left_out: list[dict[str, str]] | None = None
) -> RangePlan:
    """The plan for `parts` in reading order; `left_out`: parts already left out (remote objects
    never fetched). Raises UsageError (exit 2) when no part has times rlm reads; InputError on a
    damaged compressed part's first bytes."""
    plan = RangePlan(time_range, left_out=list(left_out or []))
    year = time.gmtime().tm_year  # as the view's table, built now, assumes for syslog
    clocked: list[tuple[Part, Clock, datetime | None, datetime | None]] = []
    for part in parts:
        head = first_lines(part.path, part.compression, part.name)
        clock = clock_for(head, name_without_suffix(part.name), year=year)
        if clock is None:
            plan.left_out.append({"name": part.name, "why": "no time rlm reads in its first lines"})
            continue
        first, last = part_span(part.path, part.compression, clock, head)
        clocked.append((part, clock, first, last))
    if not clocked:
        names = _names([{"name": p.name} for p in parts])
        raise UsageError(
            f"--since/--until: no line of {names} carries a time rlm reads (a log format it knows, "
            "or a JSON/CSV field named like ts, time or *_at)"
        )
    firsts = [first for _, _, first, _ in clocked]
    in_order = all(
        a is not None and b is not None and a <= b + MARGIN for a, b in zip(firsts, firsts[1:], strict=False)
    )
    for i, (part, clock, first, last) in enumerate(clocked):
        lo, hi = time_range.bounds_for(clock.zoned)
        upper = last if last is not None else (firsts[i + 1] if in_order and i + 1 < len(clocked) else None)
        if lo is not None and upper is not None and upper + MARGIN < lo:
            plan.left_out.append({"name": part.name, "why": f"not read: its times end by {upper}"})
        elif hi is not None and first is not None and first - MARGIN > hi:
            plan.left_out.append({"name": part.name, "why": f"not read: its times start at {first}"})
        else:
            plan.clocks[part.key] = clock
            plan.names_read.append(part.name)
    return plan


def _names(items: list[dict[str, str]], shown: int = 3) -> str:
    names = [i["name"] for i in items]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
