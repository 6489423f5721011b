"""The columns a typed action may name: the table's own, each with its kind and its SQL.

The table's description (rlm.input.tables.build_table) lists `log`'s columns with their
DuckDB types, and the common values of some (rlm.input.tablevalues); a column listed with
fewer than VOCABULARY values has its whole set of values listed. A STRUCT column (an object
inside each JSON record) is offered by its scalar fields one level down, named
`connections.accepted`: such records keep their figures there. A time of day (DuckDB's TIME)
is offered as its text. Columns of other types (lists, maps, deeper objects) are left out: no
op of the vocabulary reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlm.input.tablevalues import VOCABULARY
from rlm.run.typed.fields import read_fields
from rlm.run.typed.spans import MAX_SPAN_TIMES, UNIT_SECONDS, offered_unit, span_name
from rlm.run.typed.vocabulary import EMPTY
from rlm.run.typed.written import TIME_COLUMN, WrittenTime, written_time
from rlm.text.sqltext import sql_name, sql_string

__all__ = ["BOOL", "DATE", "NUMBER", "TEXT", "TIME", "Column", "TableColumns", "kind_of", "table_columns"]

NUMBER, TIME, DATE, TEXT, BOOL = "number", "time", "date", "text", "boolean"
# The last word of a number column's name that makes it an id or a code, not an amount.
_CODES = frozenset(
    {"id", "ids", "pid", "ppid", "tid", "uid", "gid", "euid", "port", "status", "code", "errno"}
)
# Columns offered at most: every name is in the schema's enums, which the server compiles each turn.
MAX_COLUMNS = 48

_NUMBER_TYPES = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "UHUGEINT",
        "FLOAT",
        "DOUBLE",
        "REAL",
        "DECIMAL",
        "NUMERIC",
    }
)
_TIME_TYPES = frozenset(
    {"TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"}
)
_ZONED_TYPES = frozenset({"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"})
# A time of day with no date (a CSV's `Time` column): no period to bucket by, so it is offered as
# the text it is written as; zero-padded `HH:MM:SS` texts compare in the order of the times.
_CLOCK_TYPES = frozenset({"TIME", "TIME WITH TIME ZONE", "TIMETZ"})


@dataclass(frozen=True)
class Column:
    """A column an action may name."""

    name: str  # as the model names it
    type: str  # DuckDB's type
    kind: str  # NUMBER, TIME, DATE, TEXT or BOOL
    expr: str  # the SQL that reads it from `log`
    # The column's whole set of values (NULL aside), when the table lists it whole; else None.
    values: tuple[Any, ...] | None = None
    parent: str | None = None  # the STRUCT column a field is read from
    # The text the question quotes that this column's value is read from (rlm.run.typed.fields).
    quoted: str | None = None
    # (start, end): the time from one time column of the row to a later one (rlm.run.typed.spans).
    span: tuple[str, str] | None = None
    # How the file's lines write this column's value, for the time a line format reads
    # (rlm.run.typed.written); None for every other column.
    written: WrittenTime | None = None

    @property
    def amount(self) -> bool:
        """A number that measures something, to add up or average: not a line's position
        (`line_no`), nor an id or a code of each row, which its name's last word says (`pid`,
        `EventId`, `src_port`, `status`; `status_count` is an amount). A small model summed a
        log's pids for the sizes its lines report, and statuses for a share of errors."""
        if self.kind != NUMBER or self.name == "line_no":
            return False
        words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", self.name)
        return not words or words[-1].lower() not in _CODES

    @property
    def clock(self) -> bool:
        """A clock time without a date, offered as its text (`20:11:08`): compared with < <= > >=
        as that text, which is written zero-padded and so sorts as the times do."""
        return self.kind == TEXT and _base_type(self.type) in _CLOCK_TYPES

    @property
    def zoned(self) -> bool:
        """A timestamp with a time zone (shown, and compared, in UTC)."""
        return _base_type(self.type) in _ZONED_TYPES


@dataclass(frozen=True)
class TableColumns:
    """The columns of one table an action may name, in the table's order."""

    columns: tuple[Column, ...]
    # A STRUCT column -> the names of its fields offered in its place.
    nested: dict[str, tuple[str, ...]]

    def named(self, name: str) -> Column | None:
        for column in self.columns:
            if column.name == name:
                return column
        return None

    def amounts(self) -> list[str]:
        """The names of the number columns that measure something (Column.amount)."""
        return [c.name for c in self.columns if c.amount]

    def names(self, *kinds: str) -> list[str]:
        """The names of the columns of these kinds (all columns with none given)."""
        return [c.name for c in self.columns if not kinds or c.kind in kinds]

    def ordered(self) -> list[str]:
        """Names of the columns that < <= > >= compare: numbers, times, dates and times of day."""
        return [c.name for c in self.columns if c.kind in (NUMBER, TIME, DATE) or c.clock]


def _base_type(duckdb_type: str) -> str:
    """`DECIMAL(18,3)` -> `DECIMAL`; `VARCHAR` stays."""
    return duckdb_type.strip().upper().split("(", 1)[0].strip()


def kind_of(duckdb_type: str) -> str | None:
    """NUMBER, TIME, DATE, TEXT or BOOL for a DuckDB type; None for one no op reads (lists, structs, ...)."""
    text = duckdb_type.strip().upper()
    if text.endswith("]"):  # a list or an array of anything
        return None
    base = _base_type(text)
    if base in _NUMBER_TYPES:
        return NUMBER
    if base in _TIME_TYPES:
        return TIME
    if base == "DATE":
        return DATE
    if base == "VARCHAR":
        return TEXT
    if base == "BOOLEAN":
        return BOOL
    return None


def struct_fields(duckdb_type: str) -> list[tuple[str, str]] | None:
    """The (name, type) fields of a `STRUCT(a BIGINT, "b c" VARCHAR, ...)` type; None for any other type."""
    text = duckdb_type.strip()
    if not (text.upper().startswith("STRUCT(") and text.endswith(")")):
        return None
    body = text[len("STRUCT(") : -1]
    parts: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, ch in enumerate(body):
        if ch == '"':
            quoted = not quoted  # a doubled quote inside a name toggles twice
        elif quoted:
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    fields = []
    for part in (p.strip() for p in parts):
        m = re.fullmatch(r'"((?:[^"]|"")*)"\s+(.+)|(\S+)\s+(.+)', part, re.S)
        if m is None:
            return None
        if m.group(1) is not None:
            fields.append((m.group(1).replace('""', '"'), m.group(2).strip()))
        else:
            fields.append((m.group(3), m.group(4).strip()))
    return fields


def _complete(values: Any, rows: Any) -> tuple[Any, ...] | None:
    """A column's listed values when they are its whole set: fewer than VOCABULARY listed; and
    EMPTY last where their counts leave rows out (rows that hold no value: a filter `= ""` keeps
    them, a ranking leaves them out)."""
    if not isinstance(values, list) or not values or len(values) >= VOCABULARY:
        return None
    pairs = [pair for pair in values if isinstance(pair, list | tuple) and pair]
    if len(pairs) != len(values):
        return None
    held = [pair[0] for pair in pairs]
    counted = sum(pair[1] for pair in pairs if len(pair) > 1 and isinstance(pair[1], int))
    some_empty = isinstance(rows, int) and counted < rows and EMPTY not in held
    return (*held, EMPTY) if some_empty and all(isinstance(v, str) for v in held) else tuple(held)


def _spans(table: dict[str, Any], own: list[Column], taken: set[str]) -> list[Column]:
    """The time between two time columns of one row, each pair in the table's order, in the unit
    the question asks, where it asks how long a row took (rlm.run.typed.spans)."""
    times = [c for c in own if c.kind == TIME]
    unit = offered_unit(table)
    if unit is None or not 2 <= len(times) <= MAX_SPAN_TIMES:
        return []
    per = f" / {UNIT_SECONDS[unit]}" if UNIT_SECONDS[unit] != 1 else ""
    out = []
    for i, start in enumerate(times):
        for end in times[i + 1 :]:
            name = span_name(start.name, end.name, unit)
            if name not in taken:
                expr = f"((epoch({end.expr}) - epoch({start.expr})){per})"
                out.append(Column(name, "DOUBLE", NUMBER, expr, span=(start.name, end.name)))
    return out


def table_columns(table: dict[str, Any]) -> TableColumns:
    """The columns of the table's description an action may name (at most MAX_COLUMNS: the
    table's own first, then the fields of its objects; last, the values the question's quoted
    lines hold, rlm.run.typed.fields), and the seconds between its time columns (_spans)."""
    listed = table.get("values") or {}
    # (position, column): the table's own columns, then object fields, each kept in the table's order
    own: list[tuple[tuple[int, int], Column]] = []
    fields: list[tuple[tuple[int, int], Column]] = []
    for position, (name, typ) in enumerate(table.get("columns") or []):
        kind = kind_of(typ)
        if kind is not None:
            values = _complete(listed.get(name), table.get("rows"))
            written = written_time(table) if name == TIME_COLUMN and kind == TIME else None
            own.append(((position, 0), Column(name, typ, kind, sql_name(name), values, written=written)))
            continue
        if _base_type(typ) in _CLOCK_TYPES:  # a time of day: its written form, `20:11:08`
            own.append(((position, 0), Column(name, typ, TEXT, f"CAST({sql_name(name)} AS VARCHAR)")))
            continue
        for j, (field, field_type) in enumerate(struct_fields(typ) or []):
            field_kind = kind_of(field_type)
            if field_kind is not None:
                expr = f"struct_extract({sql_name(name)}, {sql_string(field)})"
                column = Column(f"{name}.{field}", field_type, field_kind, expr, parent=name)
                fields.append(((position, j), column))
    taken = {c.name for _, c in own}
    fields = [(p, c) for p, c in fields if c.name not in taken]  # a CSV header may itself be `a.b`
    quoted = read_fields(table)
    spans = _spans(table, [c for _, c in own], taken)
    kept = sorted([*own, *fields][: MAX_COLUMNS - len(quoted) - len(spans)], key=lambda pc: pc[0])
    line = sql_name("line")
    columns = (
        *(c for _, c in kept),
        *spans,
        *(
            Column(
                f.name,
                "DOUBLE" if f.number else "VARCHAR",
                NUMBER if f.number else TEXT,
                f.sql(line),
                quoted=f.template,
            )
            for f in quoted
        ),
    )
    nested: dict[str, list[str]] = {}
    for column in columns:
        if column.parent is not None:
            nested.setdefault(column.parent, []).append(column.name)
    return TableColumns(columns, {parent: tuple(names) for parent, names in nested.items()})
