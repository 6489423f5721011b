"""A typed action compiled into one of the existing actions.

The SQL ops become an `execute` cell that runs one query through the sandbox's `sql()` and
prints its result; grep, peek and final become those actions with their own arguments. The
SQL is deterministic (the same action, the same text): NULLs are never a key of top or
group, ties are broken by the key, every name and value is quoted by rlm.text.sqltext.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlm.run.actions import Action, ParseError, validate
from rlm.run.typed.check import Checked, ColumnRef, Filter, Moment, Problem, check_action, said_filter
from rlm.run.typed.columns import DATE, NUMBER, TEXT, TIME, Column, table_columns
from rlm.run.typed.placeholders import as_read, literal_parts
from rlm.run.typed.share import SHARE_KEY
from rlm.run.typed.vocabulary import AS_WRITTEN, EMPTY, EQUALITY
from rlm.text.sqltext import sql_name, sql_string, sql_value

__all__ = [
    "checked_query",
    "compile_sql",
    "condition_sql",
    "empty_key_count_sql",
    "empty_sql",
    "execute_code",
    "read_json",
    "to_action",
]

_MAX_STARTS = 32  # places a JSON object is tried from in one reply
_FINEST = {TIME: "second", DATE: "day"}  # a value this precise is compared as it is
_EXAMPLE = '{"op": "count"}'
# How a time bucket's key is written: text in this form sorts as time does (order key).
_BUCKET_SHOWN = {"minute": "%Y-%m-%d %H:%M", "hour": "%Y-%m-%d %H:00", "day": "%Y-%m-%d", "month": "%Y-%m"}


def execute_code(query: str) -> str:
    """The cell that runs `query`: its text a Python literal, whatever quotes its values hold."""
    return f"result = sql({query!r})\nprint(result)"


def read_json(content: str | None) -> Any:
    """The JSON action of a reply, code fences or words around it; raises Problem.

    The first object that names an "op"; an object inside a broken one (a filter of a `where`
    whose action lost a brace) is not taken for the action: the broken JSON is told instead."""
    text = content or ""
    if not text.strip():
        raise Problem(f"your reply was empty; reply with one JSON action, such as {_EXAMPLE}")
    decoder = json.JSONDecoder()
    first_error: json.JSONDecodeError | None = None
    first_object: dict[str, Any] | None = None
    start = text.find("{")
    for _ in range(_MAX_STARTS):
        if start < 0:
            break
        try:
            obj, _end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
        else:
            if isinstance(obj, dict) and "op" in obj:
                return obj
            if isinstance(obj, dict) and first_object is None:
                first_object = obj
        start = text.find("{", start + 1)
    if first_error is not None:
        raise Problem(
            f"the JSON object in your reply is not valid JSON ({first_error.msg} at character "
            f"{first_error.pos}); reply with one JSON action, such as {_EXAMPLE}"
        )
    if first_object is not None:
        return first_object  # its checks say what it lacks
    raise Problem(f"no JSON object in your reply; reply with one JSON action, such as {_EXAMPLE}")


def checked_query(content: str | None, table: dict[str, Any]) -> tuple[dict[str, Any], Checked] | None:
    """The typed query in `content` as sent and as checked against `table`; None for a reply that
    is no valid action, or an action that is no query of the table (grep, peek, final)."""
    try:
        action = read_json(content)
        checked = check_action(action, table_columns(table))
    except Problem:
        return None
    if checked.args is not None:
        return None
    return action, checked


def condition_sql(f: Filter) -> str:
    """One filter as a condition of a WHERE clause."""
    expr = f.column.expr
    if f.cmp in ("contains", AS_WRITTEN):
        # A text written with placeholders (`closed by <ip> [preauth]`), or a glob's `*`
        # (`node-C*`), holds each fixed part.
        parts = [
            p for part in literal_parts(str(f.value)) or [str(f.value)] for p in part.split("*") if p.strip()
        ]
        case = f.cmp == AS_WRITTEN
        return " AND ".join(_contains_sql(expr, part, case) for part in parts or [str(f.value)])
    if f.cmp == "starts_with":
        head = str(f.value).split("*", 1)[0] or str(f.value)  # `node-C*`: what it starts with
        return f"{f.cmp}(lower({expr}), lower({sql_string(head)}))"
    if f.cmp in ("=", "!=") and isinstance(f.value, str) and "*" in f.value and f.value.strip("*"):
        # A glob (`node-C*`) as the value of an equality: the texts it fits, `*` any run.
        escaped = re.sub(r"([%_\\])", r"\\\1", f.value).replace("*", "%")
        like = "NOT ILIKE" if f.cmp == "!=" else "ILIKE"
        return f"{expr} {like} {sql_string(escaped)} ESCAPE '\\'"
    if f.cmp in EQUALITY and f.column.kind == TEXT and isinstance(f.value, str) and f.value.strip() == EMPTY:
        return empty_sql(expr, f.cmp == "!=")
    op = "<>" if f.cmp == "!=" else f.cmp
    if isinstance(f.value, ColumnRef):
        return f"{expr} {op} {f.value.column.expr}"
    if isinstance(f.value, Moment):
        # A time given less precisely than the column holds compares at its precision: a day
        # alone is the whole day (`<= 2015-05-17` takes that day in), and a whole second the
        # fractions a log writes in it (`<= 10:05:03` takes in 10:05:03,250). The value starts
        # its unit, so `>=` and `<` read the same on the column as it is.
        whole_second = f.column.kind == TIME and re.search(r":\d\d\.\d", f.value.text) is None
        finest = f.value.unit == _FINEST[f.column.kind] and not whole_second
        if not finest and f.cmp not in (">=", "<"):
            expr = f"date_trunc({sql_string(f.value.unit)}, {expr})"
        return f"{expr} {op} {sql_string(f.value.text)}"
    return f"{expr} {op} {sql_value(f.value)}"


def empty_sql(expr: str, negated: bool = False) -> str:
    """The rows where `expr` holds no value (NULL, or a text of spaces alone); `negated`: a value."""
    empty = f"({expr} IS NULL OR trim(CAST({expr} AS VARCHAR)) = '')"
    return f"NOT {empty}" if negated else empty


_DIGITS = frozenset("0123456789")


def _contains_sql(expr: str, part: str, case: bool = False) -> str:
    """`expr` holds `part`, a number in it matched whole: `404` is not the end of a request id's
    hex digits (`...aa6d404`) nor of `1404`, and `10.0.0.1` not the start of `10.0.0.15`. At an
    end of `part` that is a digit, the text must end or hold no digit there (no letter either,
    for a number alone: hex ids). RE2 has no look-around: the side is a character or the end.
    Words as a line reads them (as_read): a question quotes `bytes received` where the line
    writes `bytes (13.1 MB) received`, and lines that add such an aside are the same lines.
    `case`: in the case `part` is written (AS_WRITTEN), else in any."""
    words = part.split()
    if len(words) > 1:
        # The longest word first, as plain text: the pattern is read only on the lines that hold it.
        held = max(words, key=len)
    else:
        held = part
    found = (
        f"contains({expr}, {sql_string(held)})"
        if case
        else f"contains(lower({expr}), lower({sql_string(held)}))"
    )
    starts, ends = part.strip()[:1] in _DIGITS, part.strip()[-1:] in _DIGITS
    if not (starts or ends or len(words) > 1):
        return found
    inside = "0-9a-z" if all(c in _DIGITS for c in part) else "0-9"
    literal = as_read(part.strip()) if len(words) > 1 else as_read(part)
    pattern = (
        f"{'' if case else '(?i)'}{'(?:^|[^' + inside + '])' if starts else ''}{literal}"
        f"{'(?:[^' + inside + ']|$)' if ends else ''}"
    )
    return f"({found} AND regexp_matches({expr}, {sql_string(pattern)}))"


def _where(action: Checked, *first: str) -> str:
    # A value read from a quoted line (rlm.run.typed.fields) is of the lines that text fits:
    # rows and groups of other lines would only be NULLs (a filter on one holds them out itself).
    named = (action.column, action.by, action.order_by, *action.columns)
    fitting = dict.fromkeys(f"{c.expr} IS NOT NULL" for c in named if c is not None and c.quoted is not None)
    conditions = list(dict.fromkeys([*first, *fitting, *(condition_sql(f) for f in action.where)]))
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def empty_key_count_sql(action: Checked, key: Column) -> str:
    """The count of the rows `action` keeps (its filters) that hold no value of `key`."""
    return f"SELECT count(*) FROM log{_where(action, empty_sql(key.expr))}"


def _key(column: Column) -> str:
    """A column as the key of a ranking or a group. A number read from quoted lines is a DOUBLE
    (a later line may hold `2.5`), and a whole one would show as `2.0` where the lines write `2`
    (an id, a port), which a model then gives as the answer: a whole value is shown as written."""
    if column.quoted is None or column.kind != NUMBER:
        return column.expr
    x = column.expr
    return (
        f"CASE WHEN {x} = trunc({x}) AND abs({x}) < 1e15 THEN CAST(CAST({x} AS BIGINT) AS VARCHAR) "
        f"ELSE CAST({x} AS VARCHAR) END"
    )


def _selected(column: Column) -> str:
    """A column in a select list, under its own name (a field of an object under `a.b`, the
    seconds between two times under `seconds_a_to_b`, a value read from the line under `<host>`,
    not the expression that reads it)."""
    named = column.parent is not None or column.span is not None or column.quoted is not None
    return f"{column.expr} AS {sql_name(column.name)}" if named else column.expr


def _sql(action: Checked) -> str:
    op = action.op
    if op == "count":
        return f'SELECT count(*) AS "count" FROM log{_where(action)}'
    if op == "rows":
        return _rows_sql(action)
    if op == "group":
        return _group_sql(action)
    column = action.column
    assert column is not None
    if action.after is not None:
        return _after_sql(action, column)
    if op == "top":
        return (
            f'SELECT {_key(column)} AS {sql_name(column.name)}, count(*) AS "count" FROM log'
            f"{_where(action, f'{column.expr} IS NOT NULL')} GROUP BY 1{_having(action)} ORDER BY 2 DESC, 1 "
            f"LIMIT {action.k}"
        )
    if op == "count_distinct" and action.min_count is not None:
        return _distinct_on_lines(action, column.expr, sql_name(f"distinct {column.name}"), _where(action))
    call = f"count(DISTINCT {column.expr})" if op == "count_distinct" else f"{op}({column.expr})"
    label = "distinct" if op == "count_distinct" else op
    return f"SELECT {call} AS {sql_name(f'{label} {column.name}')} FROM log{_where(action)}"


# What a value read after a text is: a number (commas of thousands dropped) where a total or an
# extreme is asked, else a token that ends at a space, a comma or a bracket (an IP, a user, an id;
# a full stop or colon closing a sentence is not part of it).
_NUMBER_AFTER = r"\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)"
_TOKEN_AFTER = r"\s*([^\s,;'\"()<>\[\]{}]+)"
_RE_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")


def _having(action: Checked) -> str:
    """The cut of `min_count`: only the values (groups) on at least that many lines."""
    return f" HAVING count(*) >= {action.min_count}" if action.min_count is not None else ""


def _distinct_on_lines(action: Checked, value: str, label: str, where: str) -> str:
    """The number of distinct values `value` takes on `action.min_count` lines or more each."""
    kept = f"{where} AND {value} IS NOT NULL" if where else f" WHERE {value} IS NOT NULL"
    return f"SELECT count(*) AS {label} FROM (SELECT {value} FROM log{kept} GROUP BY 1{_having(action)})"


def _after_sql(action: Checked, column: Column) -> str:
    """An op over the value written right after `action.after` in a text column, of the lines
    that hold that text (any case): a count of distinct values, the most common, or a total,
    average or extreme of the number written there, beside how many lines had one."""
    after = str(action.after).strip()
    numeric = action.op in ("sum", "avg", "min", "max")
    pattern = "(?i)" + _RE_SPECIAL.sub(r"\\\1", after) + (_NUMBER_AFTER if numeric else _TOKEN_AFTER)
    found = f"regexp_extract({column.expr}, {sql_string(pattern)}, 1)"
    holds = f"contains(lower({column.expr}), lower({sql_string(after)}))"
    label = sql_name(f"{column.name} after {after}")
    if numeric:
        number = f"TRY_CAST(replace({found}, ',', '') AS DOUBLE)"
        return (
            f'SELECT {action.op}({number}) AS {label}, count({number}) AS "lines with one" '
            f"FROM log{_where(action, holds)}"
        )
    token = f"NULLIF(rtrim({found}, '.:'), '')"
    if action.op == "count_distinct" and action.min_count is not None:
        return _distinct_on_lines(action, token, label, _where(action, holds))
    if action.op == "count_distinct":
        return f"SELECT count(DISTINCT {token}) AS {label} FROM log{_where(action, holds)}"
    return (
        f'SELECT {token} AS {label}, count(*) AS "count" FROM log{_where(action, holds, f"{token} IS NOT NULL")} '
        f"GROUP BY 1{_having(action)} ORDER BY 2 DESC, 1 LIMIT {action.k}"
    )


def _group_sql(action: Checked) -> str:
    by = action.by
    assert by is not None
    if action.bucket == "hour_of_day":  # 0-23; read in the sql() connection's UTC, as periods are
        key = f"hour({by.expr}) AS hour_of_day"
    elif action.bucket:
        # Shown at the bucket's own precision ("2015-05-17 20:00" for an hour), in the sql()
        # connection's UTC: not as a full timestamp whose zeros and offset a model copies.
        truncated = f"date_trunc({sql_string(action.bucket)}, {by.expr})"
        key = (
            f"strftime({truncated}, {sql_string(_BUCKET_SHOWN[action.bucket])}) AS {sql_name(action.bucket)}"
        )
    else:
        key = f"{_key(by)} AS {sql_name(by.name)}"
    measures = ['count(*) AS "count"']
    if action.agg is not None and action.column is not None:
        column = action.column
        measures.append(f"{action.agg}({column.expr}) AS {sql_name(f'{action.agg} {column.name}')}")
    ranked = len(measures) + 1  # the column the groups are ranked by: the aggregate, else the count
    order = {"most": f"{ranked} DESC NULLS LAST, 1", "least": f"{ranked} ASC NULLS LAST, 1", "key": "1"}
    return (
        f"SELECT {key}, {', '.join(measures)} FROM log{_where(action, f'{by.expr} IS NOT NULL')} "
        f"GROUP BY 1{_having(action)} ORDER BY {order[action.order]} LIMIT {action.k}"
    )


def _rows_sql(action: Checked) -> str:
    shown = ["line_no", *(_selected(c) for c in action.columns if c.name != "line_no")]
    direction = "DESC" if action.take == "last" else "ASC"
    by = action.order_by
    if by is None or by.name == "line_no":
        order = f"line_no {direction}"
    else:
        order = f"{by.expr} {direction} NULLS LAST, line_no {direction}"
    return f"SELECT {', '.join(shown)} FROM log{_where(action)} ORDER BY {order} LIMIT {action.k}"


def compile_sql(action: dict[str, Any], table: dict[str, Any]) -> str:
    """The query of a SQL op (count ... rows) on the table `log`; raises ValueError, with the
    message a model is shown, for an action that does not pass its checks or is not a query."""
    try:
        checked = check_action(action, table_columns(table), to_run=True)
    except Problem as exc:
        raise ValueError(str(exc)) from None
    if checked.args is not None:
        raise ValueError(f'"{checked.op}" is not a query')
    return _sql(checked)


def amendable(content: str, table: dict[str, Any]) -> bool:
    """Whether `content` is a typed query refused only as it would run (a total of an id), which
    rlm may amend into one that runs (the value the question marks put in the id's place)."""
    try:
        check_action(read_json(content), table_columns(table), to_run=True)
    except Problem:
        try:
            return check_action(read_json(content), table_columns(table)).args is None
        except Problem:
            return False
    return False


def to_action(content: str, table: dict[str, Any]) -> Action | ParseError:
    """The action a typed reply asks for, or what is wrong with it in words for the model."""
    try:
        checked = check_action(read_json(content), table_columns(table), to_run=True)
    except Problem as exc:
        return ParseError(str(exc))
    if checked.args is not None:
        return validate(checked.op, checked.args)
    decimals = table.get(SHARE_KEY)
    if checked.op == "count" and checked.where and isinstance(decimals, int):
        return validate("execute", {"code": execute_code(_share_sql(checked, decimals))})
    return validate("execute", {"code": execute_code(_sql(checked))})


def _share_sql(action: Checked, decimals: int) -> str:
    """A count with its percentage of the table's rows and, where it has two conditions or
    more, of the rows each condition but one keeps (rlm.run.typed.share)."""
    conditions = [condition_sql(f) for f in action.where]
    kept = f"count(*) FILTER (WHERE {' AND '.join(conditions)})"

    def percent(of: str) -> str:
        return f"round(100.0 * {kept} / nullif({of}, 0), {decimals})"

    out = [
        f'{kept} AS "count"',
        'count(*) AS "rows in all"',
        f'{percent("count(*)")} AS "percent of all rows"',
    ]
    if len(action.where) > 1:
        for i in range(len(action.where)):
            others = " AND ".join(c for j, c in enumerate(conditions) if j != i)
            said = " and ".join(said_filter(f) for j, f in enumerate(action.where) if j != i)
            label = sql_name(f"percent of rows where {said}")
            out.append(f"{percent(f'count(*) FILTER (WHERE {others})')} AS {label}")
    return f"SELECT {', '.join(out)} FROM log"
