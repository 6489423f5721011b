"""The time window a question states, as filters on the table's time column.

A small model counts or ranks over every line where the question bounds the time: a count of
the lines of one half hour of a day came back as the count of the whole file, grounded all the
same. The window is added where its sides are the question's own words, never guessed (on the
development sets' recorded first replies, 7 more of them then held the answer, none fewer):

- a range: "between A and B", "from A to (until, through) B", where A and B are both clocks on
  the one date the question states, or both dates; B is taken in (`<=` at its own precision:
  `14:59` holds every second of that minute) unless the question says it is exclusive;
- a whole day: a date stated after "on" or "during" and no clock;
- a whole month: a month named after "in", "during" or "for" ("in March 2016", "during Jun"),
  where the question writes no day and no clock; without a year, the table's year.

A date is read as questions write one: `2015-05-17`, `17/May/2015`, `May 17, 2015`,
`17 May 2015`; without a year (`Nov 9`), the year the table gives its times (a syslog's lines
carry none: rlm.input.logformats.assumed_year). A time column with a zone takes the zone the
question states (`+0000`, UTC); where it states none, the one zone the input's first lines
write their times in (`[17/May/2015:10:05:03 +0000]`: the log's own clock, which a question
reads); where those lines write none, or several, nothing is added. One side alone ("after
14:02") is never added: the question may mean the minute itself or what follows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from typing import Any

from rlm.input.logformats import assumed_year
from rlm.run.typed.check import Checked, Problem, check_action
from rlm.run.typed.columns import DATE, TIME, Column, TableColumns, table_columns
from rlm.run.typed.fields import Sample
from rlm.run.typed.placeholders import quoted_texts
from rlm.run.typed.vocabulary import MAX_FILTERS, ORDERING
from rlm.run.typed.written import WrittenTime

__all__ = ["LINE_ZONE_KEY", "stated_window", "table_window", "with_line_zone", "with_window"]

LINE_ZONE_KEY = "line_zone"  # where a node's table description holds the zone its lines are in

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DATES = (
    (re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?!\d)"), ("y", "m", "d")),
    (re.compile(rf"(?<!\d)(\d{{1,2}})/{_MONTH}/(\d{{4}})(?!\d)", re.I), ("d", "mon", "y")),
    (
        re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?(?!\d|:\d)", re.I),
        ("mon", "d", "y"),
    ),
    (
        re.compile(rf"(?<![\d/])(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH}(?:,?\s+(\d{{4}}))?(?!\d|:\d|/)", re.I),
        ("d", "mon", "y"),
    ),
)
# A month named as a whole, in full or by its three letters ("Sept" too): "in March 2016".
_WHOLE_MONTH = re.compile(
    r"\b(?:in|during|for)\s+(?:the\s+month\s+of\s+)?(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may"
    r"|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?"
    r"(?![\s,]*\d{1,2}\b)(?:,?\s+(\d{4})\b)?",
    re.I,
)
# A clock: `14:30`, `14:30:05`; a colon after it may end a phrase ("through 14:30: give ...").
_CLOCK = re.compile(r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?!\d|:\d)")
# The end side reaches a date written after its clock ("01:10:00 on 12 March 2021", six words).
# Without "between" or "from", a clock "to" a clock is a range too ("over the span 14:05:00 to
# 14:29:59"), the start side its clock alone (its date is then the one the question writes).
_RANGE = re.compile(
    r"\bbetween\s+(\S.*?)\s+and\s+(\S+(?:\s+\S+){0,5})|\bfrom\s+(\S.*?)\s+(?:to|until|till|through)\s+(\S+(?:\s+\S+){0,5})"
    r"|(?<![\d:])(\d{1,2}:\d{2}(?::\d{2})?)\s+(?:to|until|till|through)\s+(\S+(?:\s+\S+){0,5})",
    re.I,
)
# The end of a range said to be left out, in the words just after it: "up to 12:00 (exclusive)".
_EXCLUSIVE = re.compile(r"^[^?;]{0,24}?\b(?:exclusive|not included|excluded)\b", re.I)
_WHOLE_DAY = re.compile(
    r"\b(?:on|during|dated|(?:with|of|for)\s+(?:the\s+)?(?:date|day))\s+(?:the\s+(?:day\s+(?:of\s+)?)?)?$",
    re.I,
)
_ZONE = re.compile(r"(?<![\w+-])(?:UTC|GMT|Z)(?!\w)|(?<![\d:])([+-])(\d{2}):?(\d{2})(?!\d)")
# The offset a log line writes its time in: `10:05:03 +0000]`, `2015-05-17T10:05:03-07:00`.
_LINE_ZONE = re.compile(r"\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: ?([+-]\d{2}):?(\d{2})\b|(Z)\b)")
_EXAMPLE = re.compile(r"\b(?:e\.g\.|eg|for example|for instance|such as|like|form)\W{0,3}$", re.I)


def _unquoted(question: str) -> str:
    """The question without its quotes, a clock written against its date as a log writes it
    (`2/Jan/2019:08:30:00`) set apart from it."""
    for quote in quoted_texts(question):
        question = question.replace(quote, " ")
    return re.sub(r"(?<=\d{4}):(?=\d{1,2}:\d{2})", " ", question)


# A date as a log's own lines may write one (`081110`, `17/06/09`): read in the lines' form only.
_LINE_DATE = re.compile(r"(?<![\w/.:-])\d[\d/.-]*\d(?![\w/:-]|\.\d)")


def _dates(text: str, year: int | None, written: WrittenTime | None = None) -> list[tuple[int, int, date]]:
    """(start, end, the day) of each date the text writes; a date without a year is of `year`,
    and left out where there is none; where the lines write their dates their own way
    (`written`), a date in that form too."""
    found: list[tuple[int, int, date]] = []
    if written is not None:
        for m in _LINE_DATE.finditer(text):
            if (day := written.day(m.group())) is not None:
                found.append((m.start(), m.end(), day))
    for pattern, order in _DATES:
        for m in pattern.finditer(text):
            if any(s < m.end() and m.start() < e for s, e, _ in found):
                continue  # part of a date read already
            parts = dict(zip(order, m.groups(), strict=True))
            y = int(parts["y"]) if parts.get("y") else year
            month = int(parts["m"]) if "m" in parts else _MONTHS.index(parts["mon"][:3].lower()) + 1
            if y is None:
                continue
            try:
                found.append((m.start(), m.end(), date(y, month, int(parts["d"]))))
            except ValueError:
                continue
    return sorted(found)


def _zone(text: str) -> str | None:
    """The one zone the text states, as an offset (`+00:00`); None for none, or two."""
    zones = set()
    for m in _ZONE.finditer(text):
        zones.add("+00:00" if m.group(1) is None else f"{m.group(1)}{m.group(2)}:{m.group(3)}")
    return zones.pop() if len(zones) == 1 else None


def _clock(text: str) -> str | None:
    """The first clock the text writes (`14:00`, `14:00:00`); None for none, or one out of range."""
    m = _CLOCK.search(text)
    if m is None:
        return None
    hour, minute, second = int(m.group(1)), int(m.group(2)), m.group(3)
    if hour > 23 or minute > 59 or (second is not None and int(second) > 59):
        return None
    return f"{hour:02d}:{minute:02d}" + (f":{second}" if second is not None else "")


def _moment(day: date, clock: str | None, zone: str) -> str:
    """A time as check.py reads it: a day alone where there is no clock and no zone."""
    if clock is None and not zone:
        return day.isoformat()
    return f"{day.isoformat()} {clock or '00:00:00'}{zone}"


def _range(
    text: str, m: re.Match[str], year: int | None, zone: str, day: date | None = None
) -> list[tuple[str, str]] | None:
    """The filters of "between A and B" (`m`): two clocks on the one date the question states
    (or each side its own; where it states none, on `day`), or two dates; None for anything else."""
    side = next(k for k in (1, 3, 5) if m.group(k) is not None)  # the alternative that matched
    first, last = m.group(side), m.group(side + 1)
    exclusive = _EXCLUSIVE.search(text[m.start(side + 1) :]) is not None
    start, end = _clock(first), _clock(last)
    on_first, on_last = _dates(first, year), _dates(last, year)
    if start is not None and end is not None:
        every = {d for _, _, d in _dates(text, year)}
        day_first = (
            on_first[0][2] if on_first else (every.pop() if len(every) == 1 else None if every else day)
        )
        if day_first is None:
            return None
        day_last = on_last[0][2] if on_last else day_first
        return [
            (">=", _moment(day_first, start, zone)),
            ("<" if exclusive else "<=", _moment(day_last, end, zone)),
        ]
    if start is None and end is None and on_first and on_last and on_first[0][2] <= on_last[0][2]:
        low, high = on_first[0][2], on_last[0][2]
        if zone or exclusive:  # a zoned time compares at the second: the day after starts the end
            high = high if exclusive else date.fromordinal(high.toordinal() + 1)
            return [(">=", _moment(low, None, zone or "")), ("<", _moment(high, None, zone or ""))]
        return [(">=", low.isoformat()), ("<=", high.isoformat())]
    return None


def with_line_zone(table: dict[str, Any], sample: Callable[[], Sample]) -> dict[str, Any]:
    """The table's description with the one zone its input's first lines write their times in
    (`+00:00`), where it has a zoned time column and they write one (a copy; else the same)."""
    if not any(c.kind == TIME and c.zoned for c in table_columns(table).columns):
        return table
    zones = {
        "+00:00" if m.group(3) else f"{m.group(1)}:{m.group(2)}"
        for line in sample().lines[:200]
        for m in _LINE_ZONE.finditer(line)
    }
    return {**table, LINE_ZONE_KEY: zones.pop()} if len(zones) == 1 else table


def stated_window(
    question: str,
    column: Column,
    year: int | None = None,
    line_zone: str | None = None,
    day: date | None = None,
) -> list[tuple[str, str]] | None:
    """(cmp, value) of each filter on `column` for the window the question states; None where it
    states none, or none plainly (see the module's notes). `line_zone`: the zone the input's
    lines are written in, taken where the question states none; `day`: the date of a range of
    two clocks where it states none."""
    text = _unquoted(question)
    if any(_EXAMPLE.search(text[: c.start()]) for c in _CLOCK.finditer(text)):
        return None  # a clock given as the answer's form ("e.g. 15:16:01")
    zone = ""
    if column.kind == TIME and column.zoned:
        stated = _zone(text) or (line_zone if not _ZONE.search(text) else None)
        if stated is None:
            return None
        zone = stated
    m = _RANGE.search(text)
    if m is not None:
        return None if column.kind == DATE and _CLOCK.search(text) else _range(text, m, year, zone, day)
    days = _dates(text, year, column.written)
    if not days and not _CLOCK.search(text):
        return _month(text, year, zone)
    if len(days) != 1 or _CLOCK.search(text) or not _WHOLE_DAY.search(text[: days[0][0]]):
        return None
    day = days[0][2]
    if column.kind == DATE or not zone:
        return [("=", day.isoformat())]
    return [
        (">=", _moment(day, None, zone)),
        ("<", _moment(date.fromordinal(day.toordinal() + 1), None, zone)),
    ]


def _month(text: str, year: int | None, zone: str) -> list[tuple[str, str]] | None:
    """The filters of the one whole month the text names ("in March 2016"): from its first day
    to the next month's first, left out; None where it names none, two, or no year is known."""
    months = {(m.group(1)[:3].lower(), m.group(2)) for m in _WHOLE_MONTH.finditer(text)}
    if len(months) != 1:
        return None
    name, written_year = months.pop()
    y = int(written_year) if written_year else year
    if y is None:
        return None
    first = date(y, _MONTHS.index(name) + 1, 1)
    after = date(y + 1, 1, 1) if first.month == 12 else date(y, first.month + 1, 1)
    return [(">=", _moment(first, None, zone)), ("<", _moment(after, None, zone))]


def _times(checked: Checked) -> bool:
    """Whether the query already filters, groups or orders on a time."""
    used = [f.column for f in checked.where] + [
        c for c in (checked.by, checked.order_by, checked.column) if c
    ]
    return checked.bucket is not None or any(c.kind in (TIME, DATE) for c in used)


def with_window(
    question: str, action: dict[str, Any], table: dict[str, Any]
) -> tuple[dict[str, Any], list[str]] | None:
    """`action` with the window the question states added to its filters, and the filters in
    words (`ts >= '2015-05-17 14:00'`); None where the question states none plainly, the table
    has no one time column, the query already reads a time, or there is no room."""
    cols = table_columns(table)
    try:
        checked = check_action(action, cols)
    except Problem:
        return None
    window = table_window(question, table)
    if checked.args is not None or window is None:
        return None
    where = list(action.get("where") or [])
    if _times(checked):
        # The model's own bounds may be the window written otherwise ("< 14:29:59" where the
        # question says "through 14:29:59"): those, and only those, give way to the stated ones.
        mine = _own_bounds(checked, window, cols)
        if mine is None:
            return None
        where = [f for k, f in enumerate(where) if k not in mine]
    if len(where) + len(window) > MAX_FILTERS:
        return None
    added = [{"column": name, "cmp": cmp, "value": value} for name, cmp, value in window]
    amended = {**action, "where": [*where, *added]}
    try:
        check_action(amended, cols)
    except Problem:
        return None
    said = [f"{name} {cmp} {value!r}" for name, cmp, value in window]
    if len(where) < len(action.get("where") or []):  # the model's own bounds gave way
        said[-1] += f" (in place of your own bounds on {window[0][0]})"
    return amended, said


def _own_bounds(checked: Checked, window: list[tuple[str, str, str]], cols: TableColumns) -> set[int] | None:
    """The places in `checked.where` of the model's filters that bound the stated `window`'s one
    time column to the same minutes (each end its own way: `<` where `<=` is stated, seconds
    left off), where the query reads that column in no other way and its bounds differ from the
    window's; None otherwise."""
    names = {name for name, _, _ in window}
    if len(names) != 1 or checked.bucket is not None:
        return None
    (name,) = names
    if any(c is not None and c.kind in (TIME, DATE) for c in (checked.by, checked.order_by, checked.column)):
        return None
    timed = [k for k, f in enumerate(checked.where) if f.column.kind in (TIME, DATE)]
    if not timed or any(
        checked.where[k].column.name != name or checked.where[k].cmp not in ORDERING for k in timed
    ):
        return None
    try:
        stated = check_action(
            {"op": "count", "where": [{"column": n, "cmp": c, "value": v} for n, c, v in window]}, cols
        )
    except Problem:
        return None
    mine = [(checked.where[k].cmp, _minute(checked.where[k].value)) for k in timed]
    theirs = [(f.cmp, _minute(f.value)) for f in stated.where]
    if sorted(m for _, m in mine) != sorted(m for _, m in theirs):
        return None  # other times than the window's
    if [(f.cmp, f.value) for k, f in enumerate(checked.where) if k in timed] == [
        (f.cmp, f.value) for f in stated.where
    ]:
        return None  # the window as stated already
    return set(timed)


def _minute(value: Any) -> str:
    """A time filter's value to its minute (`2015-05-17 10:59`), as compared with another's."""
    return str(getattr(value, "text", value))[:16]


def table_window(
    question: str, table: dict[str, Any], day: date | None = None
) -> list[tuple[str, str, str]] | None:
    """(column, cmp, value) of each filter of the window the question states on the table's one
    time column (stated_window, with the year and the lines' zone the table gives, and `day` for
    two clocks without a date), or on its one date column and its one time-of-day column (a
    CSV's `Date` and `Time`: _day_and_clocks); None where the table has no such columns, or the
    question states no window plainly."""
    cols = table_columns(table).columns
    times = [c for c in cols if c.kind in (TIME, DATE) and c.quoted is None]
    if len(times) != 1:
        return None
    zone = table.get(LINE_ZONE_KEY)
    year = assumed_year(str(table.get("note") or ""))
    window = stated_window(
        question, times[0], year, zone if isinstance(zone, str) and _zone(zone) else None, day
    )
    if window:
        return [(times[0].name, cmp, value) for cmp, value in window]
    clocks = [c for c in cols if c.clock]
    if times[0].kind == DATE and len(clocks) == 1:
        return _day_and_clocks(question, times[0].name, clocks[0].name, year, day)
    return None


def _day_and_clocks(
    question: str, day_column: str, clock_column: str, year: int | None, day: date | None
) -> list[tuple[str, str, str]] | None:
    """A range of two clocks on one day ("from 14:00 to 14:30 on 2021-03-04") as filters
    on a date column and a time-of-day column: that day, and the clocks, the end taken in at its
    own precision unless said to be left out (rlm.run.typed.check reads `<=` so)."""
    text = _unquoted(question)
    if any(_EXAMPLE.search(text[: c.start()]) for c in _CLOCK.finditer(text)):
        return None
    m = _RANGE.search(text)
    window = _range(text, m, year, "", day) if m is not None else None
    if window is None:
        return None
    (low_cmp, low), (high_cmp, high) = window
    if low[:10] != high[:10] or len(low) <= 10:
        return None  # two days, or days without clocks: not one day's clocks
    return [
        (day_column, "=", low[:10]),
        (clock_column, low_cmp, low[11:]),
        (clock_column, high_cmp, high[11:]),
    ]
