"""Remote objects a time range leaves out before any of their bytes is fetched.

Two facts about an object are known from its listing alone:

- **A date in its name** (`app/2026-11-25.log.gz`, `access.log-20261125.gz`, `logs/2026/11/25/…`):
  the object holds lines of about that day. logrotate's `dateext` names a file by the day it
  was rotated (its lines are of the day before), and a name's day may be in another zone than
  the lines' clock, so the object is taken to hold lines from a day and NAME_ZONE_HOURS before
  that date to a day and as many hours after it; it is left out only when the range lies
  wholly outside that.
- **Its last change** (S3's LastModified): a log is uploaded after its lines are written, so
  no line of it is later than that, give or take MARGIN of clock skew (and NAME_ZONE_HOURS
  for a bound on the log's own clock, which may be any zone's). An object last changed before
  `--since` is left out.

An object these cannot place is fetched and read (rlm.input.rangeplan then places it by its lines).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from rlm.input.timerange import TimeRange

__all__ = ["MARGIN", "NAME_ZONE_HOURS", "name_date", "outside_range"]

MARGIN = timedelta(minutes=10)
NAME_ZONE_HOURS = 14  # the widest offset of a time zone from UTC
_DATE = re.compile(r"(?<!\d)(20\d\d)([-_./]?)(0[1-9]|1[0-2])\2(0[1-9]|[12]\d|3[01])(?!\d)")


def name_date(name: str) -> datetime | None:
    """The last date written in an object's name (its key, not the bucket), or None."""
    key = name.split("://", 1)[-1].split("/", 1)[-1]
    found = None
    for m in _DATE.finditer(key):
        try:
            found = datetime(int(m.group(1)), int(m.group(3)), int(m.group(4)))
        except ValueError:
            continue  # 2026-02-31: not a date
    return found


def outside_range(name: str, modified_ns: int, time_range: TimeRange) -> str | None:
    """Why the object `name`, last changed at `modified_ns` (0: not known), holds no line of
    `time_range`; None when it may hold one."""
    lo, hi = time_range.bounds_for(True)  # instants in UTC; a bound on the log's clock as written
    zone = timedelta(hours=NAME_ZONE_HOURS)
    day = name_date(name)
    if day is not None:
        first, last = day - timedelta(days=1) - zone, day + timedelta(days=1) + zone
        if hi is not None and hi < first:
            return f"not fetched: its name's date ({day:%Y-%m-%d}) is after the range"
        if lo is not None and lo > last:
            return f"not fetched: its name's date ({day:%Y-%m-%d}) is before the range"
    if lo is not None and modified_ns > 0:
        changed = datetime.fromtimestamp(modified_ns / 1e9, UTC).replace(tzinfo=None)
        slack = (
            MARGIN if time_range.since is not None and time_range.since.tzinfo is not None else MARGIN + zone
        )
        if changed + slack < lo:
            return f"not fetched: last changed {changed:%Y-%m-%d %H:%M:%S} UTC, before the range"
    return None
