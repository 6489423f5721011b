"""`--since` / `--until`: the time range a question is restricted to, read from what a user types.

Accepted, for either bound:
- a date or a date and time as ISO 8601 writes it: `2026-11-25`, `2026-11-25 14:02`,
  `2026-11-25T14:02:05`, `2026-11-25T14:02:05.250Z`, `2026-11-25 14:02+01:00`;
- a time before now: a number and a unit, `90s`, `15m`, `2h`, `3d`, `1w` (`2h ago` too);
- `now`, `today` (this midnight), `yesterday` (the midnight before).

Both bounds are inclusive, as journalctl's are. A bound written without a time zone is read on
the log's own clock, as its lines print it (what a user reading the file types); a bound with
a zone, and every relative one, is an instant, compared in UTC with a log whose times carry a
zone and in this machine's local time with one whose times do not (rlm.input.timeclock).

The range a run used is recorded resolved (`to_dict`), so `rlm replay --verify` reads the same
lines a day later, when `2h` would mean another range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rlm.errors import UsageError

__all__ = ["TimeRange", "parse_bound", "parse_range"]

_RELATIVE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|sec|m|min|h|hr|d|day|w|week)s?(?:\s+ago)?$", re.I)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400}
_SECONDS.update(w=7 * 86400, week=7 * 86400)


@dataclass(frozen=True)
class TimeRange:
    """Inclusive bounds, either may be None. A naive bound is on the log's own clock; an aware
    one is an instant (see the module's doc)."""

    since: datetime | None
    until: datetime | None

    def bounds_for(self, zoned: bool) -> tuple[datetime | None, datetime | None]:
        """The bounds as naive datetimes comparable with a log's times: UTC for a log whose
        times carry a zone (`zoned`), this machine's local time for one whose times do not."""
        return _naive(self.since, zoned), _naive(self.until, zoned)

    def key(self) -> str:
        """What a cache entry of the range's lines is keyed by."""
        return f"{_iso(self.since)}|{_iso(self.until)}"

    def describe(self) -> str:
        """`since 2026-11-25 14:02:00, until …`: what the profile and stderr say."""
        said = []
        if self.since is not None:
            said.append(f"since {_shown(self.since)}")
        if self.until is not None:
            said.append(f"until {_shown(self.until)}")
        return ", ".join(said)

    def to_dict(self) -> dict[str, str | None]:
        return {"since": _iso(self.since) or None, "until": _iso(self.until) or None}

    @classmethod
    def from_dict(cls, doc: Any) -> TimeRange | None:
        """The range a trace recorded; None when it recorded none. Raises UsageError on a
        value that is not one to_dict writes."""
        if not isinstance(doc, dict):
            return None
        since, until = doc.get("since"), doc.get("until")
        if since is None and until is None:
            return None
        try:
            return cls(
                datetime.fromisoformat(since) if since else None,
                datetime.fromisoformat(until) if until else None,
            )
        except (TypeError, ValueError):
            raise UsageError(f"the trace's time range is not one rlm writes: {doc!r:.120}") from None


def parse_range(since: str | None, until: str | None, *, now: datetime | None = None) -> TimeRange | None:
    """The range `--since` / `--until` give; None when neither is given. Raises UsageError
    (exit 2) in one line on a value it cannot read, or a since after the until."""
    if not since and not until:
        return None
    now = now or datetime.now(UTC).astimezone()
    lo = parse_bound(since, now=now, flag="--since") if since else None
    hi = parse_bound(until, now=now, flag="--until") if until else None
    if lo is not None and hi is not None and _comparable(lo) > _comparable(hi):
        raise UsageError(f"--since {since} is after --until {until}: no line can be in that range")
    return TimeRange(lo, hi)


def parse_bound(text: str, *, now: datetime, flag: str = "--since") -> datetime:
    """One bound (see the module's doc). `now` is an aware datetime."""
    value = text.strip()
    low = value.lower()
    if low == "now":
        return now
    if low in ("today", "yesterday"):
        midnight = now.astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=1 if low == "yesterday" else 0)
    m = _RELATIVE.match(value)
    if m:
        unit = m.group("unit").lower()
        return now - timedelta(seconds=float(m.group("n")) * _SECONDS[unit])
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{flag} {text!r}: not a time rlm reads; give a date and time (2026-11-25 14:02, "
            "2026-11-25T14:02:05Z), a time before now (90s, 15m, 2h, 3d, 1w) or now, today, yesterday"
        ) from None


def _naive(bound: datetime | None, zoned: bool) -> datetime | None:
    if bound is None or bound.tzinfo is None:
        return bound
    return bound.astimezone(UTC).replace(tzinfo=None) if zoned else bound.astimezone().replace(tzinfo=None)


def _comparable(bound: datetime) -> datetime:
    """Two bounds of one range in one frame (a naive bound taken as local time)."""
    return bound.astimezone(UTC) if bound.tzinfo is not None else bound.astimezone().astimezone(UTC)


def _iso(bound: datetime | None) -> str:
    return bound.isoformat() if bound is not None else ""


def _shown(bound: datetime) -> str:
    if bound.tzinfo is None:
        return bound.isoformat(sep=" ")
    return bound.astimezone(UTC).isoformat(sep=" ").replace("+00:00", " UTC")
