"""A typed action checked against the table: every problem told in words a model can act on.

The checks hold whether or not a server's grammar held the reply to the schema (a hosted
model, a test, a server without grammars): an unknown column is named with the columns
there are, a sum of a text column with the number columns, a value a column never holds
with the values it does. What is unambiguous is taken as meant: "404" for 404 on a number
column, "get" for the one value "GET", a k past the maximum brought down to it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from rlm.run.typed.columns import BOOL, DATE, NUMBER, TEXT, TIME, Column, TableColumns
from rlm.run.typed.vocabulary import (
    AGGREGATES,
    AS_WRITTEN,
    BUCKETS,
    CMPS,
    DAY_BUCKETS,
    DEFAULT_K,
    EQUALITY,
    FIELDS,
    GROUP_K,
    MAX_AFTER,
    MAX_FILTERS,
    MAX_K,
    MAX_MIN_COUNT,
    MAX_PEEK_LINES,
    MAX_ROW_COLUMNS,
    OPS,
    ORDERS,
    REQUIRED,
    TAKES,
    TEXT_MATCHES,
)

__all__ = [
    "Checked",
    "ColumnRef",
    "Filter",
    "Moment",
    "Problem",
    "check_action",
    "said_filter",
    "shown_value",
]

_KIND_WORDS = {NUMBER: "number", TIME: "time", DATE: "date", TEXT: "text", BOOL: "true/false"}
_CMP_ALIASES = {"==": "=", "<>": "!=", "startswith": "starts_with", "like": "contains"}
_MAX_SHOWN_VALUES = 12  # values named in a message about a column's whole set


class Problem(Exception):
    """What is wrong with an action, in words for the model."""


@dataclass(frozen=True)
class Moment:
    """A time a filter gives, and how precisely: a day alone compares whole days."""

    text: str  # as DuckDB reads it: `2015-05-17 10:05:00`, with `+00:00` for a zoned column
    unit: str  # year, month, day, hour, minute or second


@dataclass(frozen=True)
class ColumnRef:
    """Another column a filter compares with ("tip > tolls"): a question compares two values of a
    row as often as one value with a number, and a model writes the other column's name as the
    value (refused as no number, it sent the same filter four times)."""

    column: Column

    def __str__(self) -> str:
        return self.column.name


@dataclass(frozen=True)
class Filter:
    column: Column
    cmp: str  # one of CMPS
    value: Any  # a number, a text, a boolean or a Moment, as the column compares it


@dataclass(frozen=True)
class Checked:
    """An action that passed its checks, its defaults filled in."""

    op: str
    column: Column | None = None  # of count_distinct, top, sum..max; group's aggregated column
    by: Column | None = None
    bucket: str | None = None
    agg: str | None = None
    order: str = "most"
    k: int = DEFAULT_K
    columns: tuple[Column, ...] = ()
    order_by: Column | None = None
    take: str = "first"
    where: tuple[Filter, ...] = ()
    after: str | None = None  # the value of `column` is the one written right after this text
    min_count: int | None = None  # only values (groups) on at least this many lines
    args: dict[str, Any] | None = None  # grep, peek, final: the arguments of the action


def said_filter(f: Filter) -> str:
    """A filter in words, as the model's notes name it: `status = 404`."""
    if isinstance(f.value, ColumnRef):
        shown = f.value.column.name  # another column, named as such
    else:
        shown = shown_value(f.value.text if isinstance(f.value, Moment) else f.value)
    return f"{f.column.name} {f.cmp.replace('_', ' ')} {shown}"


def _listing(names: list[str]) -> str:
    return ", ".join(names) if names else "(none)"


def shown_value(value: Any) -> str:
    """A value as the model's messages write it: a text quoted, a boolean as JSON writes it."""
    return (
        repr(value)
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def _column(cols: TableColumns, name: Any, field: str) -> Column:
    if not isinstance(name, str):
        raise Problem(f'"{field}" must be a column name (text); the columns are: {_listing(cols.names())}')
    column = cols.named(name)
    if column is not None:
        return column
    if name in cols.nested:
        raise Problem(f"'{name}' holds fields; name one of them: {_listing(list(cols.nested[name]))}")
    raise Problem(f"no column '{name}'; the columns are: {_listing(cols.names())}")


def _of_kind(cols: TableColumns, column: Column, kinds: tuple[str, ...], what: str) -> Column:
    if column.kind in kinds:
        return column
    words = " or ".join(_KIND_WORDS[k] for k in kinds)
    raise Problem(
        f"{what} needs a {words} column; '{column.name}' is {_KIND_WORDS[column.kind]} ({column.type}); "
        f"the {words} columns are: {_listing(cols.names(*kinds))}"
    )


def _whole(value: Any, field: str, at_least: int, at_most: int | None = None) -> int:
    """A whole number ("5" and 5.0 taken as 5), at least `at_least`, brought down to `at_most`."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        number = int(value)
    else:
        number = None
    if number is None:
        raise Problem(f'"{field}" must be a whole number')
    if number < at_least:
        raise Problem(f'"{field}" must be at least {at_least}')
    return number if at_most is None else min(number, at_most)


def _choice(value: Any, field: str, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise Problem(f'"{field}" must be one of: {", ".join(choices)}')


def _number(value: Any, column: Column) -> int | float:
    number: int | float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip().replace(",", "")
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                number = None
    if number is None or (isinstance(number, float) and not math.isfinite(number)):
        raise Problem(
            f"'{column.name}' is a number column ({column.type}); give a number, not {shown_value(value)}"
        )
    return number


_ISO = re.compile(
    r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T](\d{1,2})(?::(\d{2})(?::(\d{2})(\.\d{1,6})?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?)?)?)?"
)
# The Apache log's own way of writing a time, as a model copies it from a line it saw.
_CLF = re.compile(r"\[?(\d{1,2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:\s*([+-]\d{4}))?\]?")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_UNITS = ("year", "month", "day", "hour", "minute", "second")


def _offset(text: str | None) -> timezone | None:
    if not text:
        return None
    if text == "Z":
        return UTC
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
    return timezone(timedelta(minutes=-minutes if text[0] == "-" else minutes))


def _moment(value: Any, column: Column) -> Moment:
    """A time as the column compares it, at the precision given."""
    how = 'a time is written like "2015-05-17 10:05:00", "2015-05-17 10:05" or a day, "2015-05-17"'
    if not isinstance(value, str):
        raise Problem(f"'{column.name}' is a {_KIND_WORDS[column.kind]} column ({column.type}); {how}")
    text = value.strip()
    m = _ISO.fullmatch(text)
    fraction = ""
    try:
        if m is not None:
            parts = [int(g) if g else None for g in m.groups()[:6]]
            given = sum(p is not None for p in parts)
            year, month, day, hour, minute, second = (p or (1 if i < 3 else 0) for i, p in enumerate(parts))
            fraction, zone = m.group(7) or "", _offset(m.group(8))
        elif (c := _CLF.fullmatch(text)) is not None and c.group(2).lower() in _MONTHS:
            day, year = int(c.group(1)), int(c.group(3))
            month = _MONTHS.index(c.group(2).lower()) + 1
            hour, minute, second = int(c.group(4)), int(c.group(5)), int(c.group(6))
            given, zone = 6, _offset(c.group(7))
        elif column.written is not None and (read := column.written.read(text)) is not None:
            line_time, line_unit = read
            year, month, day = line_time.year, line_time.month, line_time.day
            hour, minute, second = line_time.hour, line_time.minute, line_time.second
            given, zone = _UNITS.index(line_unit) + 1, None
            fraction = f".{line_time.microsecond:06d}".rstrip("0") if line_time.microsecond else ""
        else:
            raise ValueError(text)
        when = datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:
        raise Problem(f"{shown_value(value)} is not a time '{column.name}' can compare; {how}") from None
    unit = _UNITS[given - 1]
    if column.kind == DATE:
        if given > 3:
            raise Problem(f"'{column.name}' holds days ({column.type}); give a day like \"2015-05-17\"")
        return Moment(when.strftime("%Y-%m-%d"), unit)
    if zone is not None:
        if column.zoned:
            when = when.astimezone(UTC)
        elif zone.utcoffset(None) != timedelta(0):
            raise Problem(
                f"'{column.name}' holds times without a time zone ({column.type}); give the time without one"
            )
    return Moment(when.strftime("%Y-%m-%d %H:%M:%S") + fraction, unit)


_CLOCK_VALUE = re.compile(r"(\d{1,2}):([0-5]\d)(?::([0-5]\d)(\.\d+)?)?")


def _held(value: Any, column: Column) -> Any:
    """`value` as one of the values a column holds whole, or the problem naming those it holds."""
    assert column.values is not None
    for held in column.values:
        # True == 1 in Python: a flag and a number are never the same value here
        if held == value and isinstance(held, bool) == isinstance(value, bool):
            return held
    if isinstance(value, str):
        alike = [h for h in column.values if isinstance(h, str) and h.lower() == value.lower()]
        if len(alike) == 1:
            return alike[0]
    shown = ", ".join(shown_value(v) for v in column.values[:_MAX_SHOWN_VALUES])
    more = ", …" if len(column.values) > _MAX_SHOWN_VALUES else ""
    raise Problem(f"no line has {column.name} {shown_value(value)}; {column.name} holds only: {shown}{more}")


def _clock_text(value: Any, column: Column, cmp: str) -> str:
    """A time of day as the clock column's text compares (`2:05` -> `02:05`). A bound that takes
    in its minute or second (`<= 02:59`, `> 02:59`) reaches its last instant: the column's text
    writes seconds, and fractions, that a shorter text would sort before."""
    m = _CLOCK_VALUE.fullmatch(str(value).strip()) if isinstance(value, str) else None
    if m is None or int(m.group(1)) > 23:
        raise Problem(
            f"'{column.name}' holds times of day ({column.type}); give one like \"14:05:00\", "
            f"not {shown_value(value)}"
        )
    text = f"{int(m.group(1)):02d}:{m.group(2)}" + (f":{m.group(3)}{m.group(4) or ''}" if m.group(3) else "")
    if cmp in ("<=", ">") and not m.group(4):
        text += (":59" if not m.group(3) else "") + ".999999"
    return text


def _value(value: Any, column: Column, cmp: str) -> Any:
    if cmp in TEXT_MATCHES:
        if column.kind != TEXT:
            raise Problem(
                f"'{cmp}' works on text columns; '{column.name}' is {_KIND_WORDS[column.kind]} "
                f"({column.type}): compare it with = != < <= > >="
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float) or str(value) == "":
            raise Problem(f"'{cmp}' needs a non-empty text value")
        return str(value)
    if column.kind == BOOL:
        if cmp not in EQUALITY:
            raise Problem(f"'{column.name}' is true/false; compare it with = or !=")
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise Problem(f"'{column.name}' is true/false; give true or false, not {shown_value(value)}")
    elif column.clock:
        value = _clock_text(value, column, cmp)
    elif cmp not in EQUALITY and column.kind == TEXT:
        raise Problem(f"'{column.name}' is text; compare it with =, !=, contains or starts_with")
    elif column.kind == NUMBER:
        value = _number(value, column)
    elif column.kind in (TIME, DATE):
        value = _moment(value, column)
    else:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise Problem(f"'{column.name}' is a text column; give a text value, not {shown_value(value)}")
        value = str(value)
    if cmp in EQUALITY and column.values is not None and not isinstance(value, Moment):
        value = _held(value, column)
    return value


def _other_column(cols: TableColumns, value: Any, column: Column, cmp: str) -> ColumnRef | None:
    """The column a filter's value names, where it is another column of the same kind (a number
    with a number, a time or date with either) compared by = != < <= > >=; None otherwise."""
    if not isinstance(value, str) or cmp in TEXT_MATCHES or column.kind not in (NUMBER, TIME, DATE):
        return None
    other = next((c for c in cols.columns if c.name == value.strip()), None)
    if other is None or other.name == column.name:
        return None
    same = other.kind == column.kind or {other.kind, column.kind} <= {TIME, DATE}
    return ColumnRef(other) if same else None


def _filters(cols: TableColumns, where: Any) -> tuple[Filter, ...]:
    if where is None:
        return ()
    if isinstance(where, dict):
        where = [where]  # one filter given bare
    if not isinstance(where, list):
        raise Problem('"where" must be a list of filters like {"column": ..., "cmp": "=", "value": ...}')
    if len(where) > MAX_FILTERS:
        raise Problem(f'"where" takes at most {MAX_FILTERS} filters')
    out = []
    for item in where:
        if not isinstance(item, dict) or set(item) != {"column", "cmp", "value"}:
            raise Problem('each filter of "where" is an object with exactly "column", "cmp" and "value"')
        column = _column(cols, item["column"], "column")
        cmp = item["cmp"]
        cmp = _CMP_ALIASES.get(cmp, cmp) if isinstance(cmp, str) else cmp
        if cmp not in CMPS and cmp != AS_WRITTEN:
            raise Problem(f'"cmp" must be one of: {" ".join(CMPS)}')
        other = _other_column(cols, item["value"], column, cmp)
        out.append(Filter(column, cmp, other if other is not None else _value(item["value"], column, cmp)))
    return tuple(out)


def _fields(obj: dict[str, Any]) -> str:
    """The op, after checking it and the fields it is given."""
    op = obj.get("op")
    if op is None:
        raise Problem(f'missing "op"; it is one of: {", ".join(OPS)}')
    if not isinstance(op, str) or op not in OPS:
        raise Problem(f"unknown op {shown_value(op)}; the ops are: {', '.join(OPS)}")
    takes = FIELDS[op]
    for name in obj:
        # "asks" says what the question asks for (ASKS); the op alone decides what runs.
        if name not in ("op", "asks") and name not in takes:
            raise Problem(f'"{op}" takes only: asks, op, {", ".join(takes)}; not "{name}"')
    for name in REQUIRED[op]:
        if obj.get(name) is None:
            raise Problem(f'missing "{name}" for "{op}"')
    return op


def check_action(obj: Any, cols: TableColumns, *, to_run: bool = False) -> Checked:
    """The action `obj` (a parsed JSON object) checked against the table's columns; raises Problem.

    `to_run`: the action is about to run, and a total or an average of an id or a code is
    refused. Read to be amended (a condition added, the value a question marks put in its place:
    rlm.run.typed.measure), it is not: the amended action is checked again before it runs."""
    if not isinstance(obj, dict):
        raise Problem('reply with one JSON object, such as {"op": "count"}')
    op = _fields(obj)
    if op in ("grep", "peek", "final"):
        args = {k: v for k, v in obj.items() if k not in ("op", "asks") and v is not None}
        if op == "peek":
            args["start"] = _whole(args["start"], "start", 1)
            if "length" in args:
                args["length"] = _whole(args["length"], "length", 1, MAX_PEEK_LINES)
        return Checked(op, args=args)
    where = _filters(cols, obj.get("where"))
    k = _whole(obj["k"], "k", 1, MAX_K) if obj.get("k") is not None else None
    least = obj.get("min_count")
    min_count = _whole(least, "min_count", 1, MAX_MIN_COUNT) if least is not None else None
    if op == "count":
        return Checked(op, where=where)
    if op == "rows":
        return _rows(cols, obj, k, where)
    if op == "group":
        return replace(_group(cols, obj, k, where, to_run), min_count=min_count)
    column = _column(cols, obj["column"], "column")
    # A value read out of text (`after`) is the number written there where a total or an
    # extreme is asked (rlm.run.typed.compile); else the column is itself of the kind asked.
    after = _after(cols, column, obj.get("after"))
    if op == "top" and column.kind == TIME:
        _busiest(column)
    if after is None and op in ("sum", "avg"):
        _amount(cols, column, op, to_run)
    elif after is None and op in ("min", "max"):
        _of_kind(cols, column, (NUMBER, TIME, DATE), op)
    return Checked(op, column=column, k=k or DEFAULT_K, where=where, after=after, min_count=min_count)


def _after(cols: TableColumns, column: Column, after: Any) -> str | None:
    """The text a value is written after, in a text column; None when not given."""
    if after is None:
        return None
    if not isinstance(after, str) or not after.strip():
        raise Problem('"after" must be the text written just before the value, such as "from "')
    if len(after) > MAX_AFTER:
        raise Problem(f'"after" takes at most {MAX_AFTER} characters: the few words just before the value')
    _of_kind(cols, column, (TEXT,), '"after"')
    return after


def _busiest(column: Column) -> None:
    """`top` of a time column counts lines per exact instant, which is seldom what is asked: the
    busiest period is a `group` per time bucket (what small models reached for `top` to find)."""
    example = f'{{"op": "group", "by": "{column.name}", "bucket": "hour"}}'
    raise Problem(
        f"top of '{column.name}' would count lines per exact time, to the second; for the busiest "
        f"minute, hour, day or month count lines per period: {example} "
        "(bucket minute|hour|day|month, or hour_of_day for the hour 0-23 over every day)"
    )


def _amount(cols: TableColumns, column: Column, what: str, to_run: bool) -> Column:
    """A number column that holds amounts (Column.amount): never a line's position, and not an
    id nor a code where the action is to run."""
    if column.kind == NUMBER and not column.amount and (to_run or column.name == "line_no"):
        what_it_is = "a line's position" if column.name == "line_no" else "an id or a code of each row"
        raise Problem(
            f"{what} needs a column of amounts; {column.name} is {what_it_is}, not an amount "
            f"(amounts: {_listing(cols.amounts())}; a number written inside the lines is read with "
            f'"after"; a number of rows is a count)'
        )
    return _of_kind(cols, column, (NUMBER,), what)


def _group(
    cols: TableColumns, obj: dict[str, Any], k: int | None, where: tuple[Filter, ...], to_run: bool
) -> Checked:
    by = _column(cols, obj["by"], "by")
    bucket = None
    if obj.get("bucket") is not None:
        bucket = _choice(obj["bucket"], "bucket", BUCKETS)
        _of_kind(cols, by, (TIME, DATE), "bucket")
        if by.kind == DATE and bucket not in DAY_BUCKETS:
            raise Problem(f"'{by.name}' holds days ({by.type}); bucket it by day or month")
    agg, column = obj.get("agg"), obj.get("column")
    if agg is not None and column is None:
        raise Problem('"agg" (sum, avg, min or max) and "column" (what it is of) go together')
    if column is not None and agg is None:
        # A column to measure with no aggregate is its total in each group, as `sum` is of all
        # rows: refused instead, the model sent the same action until its steps ran out. The
        # question's words may still ask for another (rlm.run.typed.measure).
        agg = "sum"
    measure = None
    if agg is not None:
        agg = _choice(agg, "agg", AGGREGATES)
        measure = _amount(cols, _column(cols, column, "column"), f"agg {agg}", to_run)
    # The largest groups first unless the key's order is asked for, time buckets too: within the
    # rows shown (k) the busiest period is then never the one cut, and a model that reads the
    # first row reads the largest (ordered by time, it read the earliest as the busiest).
    order = _choice(obj["order"], "order", ORDERS) if obj.get("order") is not None else "most"
    return Checked(
        "group", column=measure, by=by, bucket=bucket, agg=agg, order=order, k=k or GROUP_K, where=where
    )


def _rows(cols: TableColumns, obj: dict[str, Any], k: int | None, where: tuple[Filter, ...]) -> Checked:
    names = obj["columns"]
    if isinstance(names, str):
        names = [names]  # one column given bare
    if not isinstance(names, list) or not names:
        raise Problem('"columns" must be a list of column names')
    if len(names) > MAX_ROW_COLUMNS:
        raise Problem(f'"columns" takes at most {MAX_ROW_COLUMNS} columns')
    chosen: list[Column] = []
    for name in names:
        column = _column(cols, name, "columns")
        if column not in chosen:
            chosen.append(column)
    order_by = _column(cols, obj["order_by"], "order_by") if obj.get("order_by") is not None else None
    take = _choice(obj["take"], "take", TAKES) if obj.get("take") is not None else "first"
    return Checked("rows", columns=tuple(chosen), order_by=order_by, take=take, k=k or DEFAULT_K, where=where)
