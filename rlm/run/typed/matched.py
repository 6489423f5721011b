"""A typed count whose conditions kept no row, or every row of the table: said to the model,
and an answer after it in doubt.

Neither is an answer a question of "how many" usually has. A count of nothing was, in the
development runs read, a condition written unlike the column's values (a time compared for
equality with a day, `>` where the question names one value); a count of every row, a filter
that sets no row apart (a text every line holds). Which condition matched nothing is what the
model needs to mend the query: each one's count alone is run once, in one query, and shown
(`ts = '2020-01-02 03:04:00': 0 rows`). The answer may still be right (no line of that kind
is there): it is in doubt, not refused. Where each condition alone matches rows and only
together they match none, every condition is written like its column's values: the count of
nothing is what the rows say (a yes/no question's "no"), told to the model and not in doubt.

A query that lists values or rows and found none (`found_nothing`), or a distinct count of
none, answers no "which" or "how many different": told the same way, and always in doubt.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm.run.typed.check import Checked, Filter, Problem, check_action, said_filter
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import condition_sql, read_json
from rlm.text.sqltext import sql_name

__all__ = ["Matched", "counted_filters", "found_nothing", "matched", "probe_sql", "shown_count"]

# The echo of a count (rlm.sandbox.worker.sql_result.render_table): its header, a rule, its
# value; after the notes the worker prints first, if any (a value no row holds: sql_session).
_COUNT_ECHO = re.compile(r"^[ \t]*count[ \t]*\n-+[ \t]*\n[ \t]*(\d+)[ \t]*$", re.M)
# The last line of a result of no row (render_table), and the echo of a distinct count of none.
_NO_ROW = re.compile(r"^\(0 rows\)$", re.M)
_NO_DISTINCT = re.compile(r"^[ \t]*distinct [^\n]*\n-+[ \t]*\n[ \t]*0[ \t]*$", re.M)
# A total, an average or an extreme of no value: its one cell printed NULL.
_NO_VALUE = re.compile(r"^[ \t]*(?:sum|avg|min|max) [^\n]*\n-+[ \t]*\n[ \t]*NULL[ \t]*$", re.M)


@dataclass(frozen=True)
class Matched:
    note: str  # for the model, after the result
    doubt: str | None  # the answer's doubt (rlm.run.doubts.rows_doubt), once a final follows


def counted_filters(content: str | None, table: dict[str, Any]) -> tuple[Filter, ...]:
    """The conditions of the typed count in `content`; () for any other action."""
    try:
        checked: Checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return ()
    if checked.op != "count" or checked.args is not None or checked.after is not None:
        return ()
    return checked.where


def shown_count(observation: str) -> int | None:
    """The count a count query's echo shows, if that is what the observation is."""
    m = _COUNT_ECHO.search(observation)
    return int(m.group(1)) if m else None


def probe_sql(filters: tuple[Filter, ...]) -> str:
    """One query: how many rows each condition matches alone."""
    counts = [
        f"count(*) FILTER (WHERE {condition_sql(f)}) AS {sql_name(f'c{k}')}" for k, f in enumerate(filters)
    ]
    return f"SELECT {', '.join(counts)} FROM log"


def matched(
    filters: tuple[Filter, ...],
    count: int | None,
    rows: Any,
    alone: Callable[[str], list[int] | None],
) -> Matched | None:
    """What to tell of a count of `count` rows under `filters` in a table of `rows` rows; None when
    it is neither nothing nor everything. `alone` runs the probe (None when it cannot)."""
    if not filters or count is None:
        return None
    if count == 0:
        counts = alone(probe_sql(filters))
        if counts is None or len(counts) != len(filters):
            return Matched(
                "Note: no row matched the query's conditions. A condition written unlike the column's "
                "values matches nothing: look at that column's values before you answer.",
                "matched no row",
            )
        each = "; ".join(f"{said_filter(f)}: {n:,} rows" for f, n in zip(filters, counts, strict=True))
        empty = [said_filter(f) for f, n in zip(filters, counts, strict=True) if n == 0]
        note = f"Note: no row matched the query's conditions. Alone, each matches: {each}."
        if empty:
            note += (
                " A condition that matches no row on its own is likely written unlike the column's "
                "values: look at that column's values before you answer."
            )
        return Matched(note, f"matched no row ({'; '.join(empty)} alone matches none)" if empty else None)
    if isinstance(rows, int) and rows > 0 and count == rows:
        said = "; ".join(said_filter(f) for f in filters)
        return Matched(
            f"Note: all {rows:,} rows of the table matched the query's conditions ({said}): they set "
            "no row apart. If the question asks about some rows only, filter on what sets those apart.",
            "kept every row of the table (its conditions set none apart)",
        )
    return None


def found_nothing(
    content: str | None,
    observation: str,
    table: dict[str, Any],
    alone: Callable[[str], list[int] | None],
) -> Matched | None:
    """A typed query that lists rows or values (a ranking, a group, rows) and printed none: an
    answer after it names nothing the rows hold (one read in development wrote "(0 rows)" as the
    value asked for). Said to the model with each condition's count alone, and an answer after it
    in doubt, whatever the conditions match alone. A distinct count of none likewise (a column
    that only other lines fill: an address of sshd's lines counted over another program's), and
    a total, an average or an extreme of no value (NULL).
    None for any other action or result."""
    try:
        checked: Checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return None
    if checked.op == "count_distinct" and checked.column is not None and _NO_DISTINCT.search(observation):
        name = checked.column.name
        return Matched(
            f"Note: no row the query kept holds a value of {name}. Look at which rows hold one "
            "before you answer.",
            f"counted no value of {name} (no row it kept holds one)",
        )
    if (
        checked.op in ("sum", "avg", "min", "max")
        and checked.column is not None
        and _NO_VALUE.search(observation)
    ):
        name = checked.column.name
        return Matched(
            f"Note: no row the query kept holds a value of {name}: its {checked.op} is of nothing. "
            "Look at which rows hold one before you answer.",
            f"computed the {checked.op} of no value of {name} (no row it kept holds one)",
        )
    if checked.op not in ("top", "group", "rows") or not _NO_ROW.search(observation):
        return None
    told = matched(checked.where, 0, table.get("rows"), alone) if checked.where else None
    if told is None:
        return Matched("Note: the query found no row.", "found no row")
    return Matched(told.note, told.doubt or "found no row (its conditions together match none)")
