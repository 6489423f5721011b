"""What a table's columns hold, for the profile: common values and example queries.

A model that sees `event VARCHAR` does not know to write `event = 'failed_password'`
for "failed passwords"; one that sees `event: 'failed_password' 520, 'failed_none' 4`
does. A format declares its categorical columns (logformats.TableFormat.
categories) and its entity columns (what questions count distinct or rank:
an IP, a user, a path); for CSV and JSON lines they are found: the text and
boolean columns with at most MAX_DISTINCT values are categories, then those with
fewer than VOCABULARY (their whole set listed), text columns with more than
MAX_DISTINCT are entities, judged by DuckDB's approximate count over the whole
table in one scan.

The examples are the shapes aggregate questions take (how many, how many
distinct, which most, how much in total), written on this table's own columns
and values: small models copy an example's shape, and one example taught them
one shape (a copied `LIMIT 10` answered "how many distinct" with 10).
"""

from __future__ import annotations

import re
from typing import Any

from rlm.text.sqltext import sql_name, sql_value

MAX_DISTINCT = 12  # a column with more distinct values is not shown as categories
TOP = 6  # values shown per column in the profile
# Values kept per column in the table's description: the profile shows the TOP; fewer than this kept
# means the column's whole set is known (rlm.run.typed holds a filter on it to those values).
VOCABULARY = 40
MAX_FOUND = 6  # columns found in a CSV / JSON lines table
# Lead-ins: the words a free-text column writes right before a value ("size 67108864", "uid=0",
# "from 10.0.0.1"), read from its first LEAD_IN_ROWS rows; a word before fewer than
# LEAD_IN_MIN of them is not one. They tell a model what it can read out of the text (and the
# typed `after` field reads it: rlm.run.typed).
LEAD_IN_ROWS = 20000
LEAD_IN_MIN = 3
LEAD_INS = 4  # kept per column
# A whole word and what ends it ("=", ":", a space), then a digit, or a space then a path ("to
# /10.0.0.1"): taken with that next character, cut off after (RE2 has no lookahead). A URL's
# "http:" is not one.
_LEAD_IN_RE = r"(?:^|[^A-Za-z0-9_.-])([A-Za-z][A-Za-z_.-]{1,30}(?:(?:=|: ?| )[0-9]| /))"
LEAD_IN_SHAPE = re.compile(r"[A-Za-z][A-Za-z_.-]{1,30}(?:=|: ?| )")  # what a lead-in kept is
ADDRESS_ROWS = 2000  # rows whose values tell a column of IP addresses
# An IPv4 address with an optional port, or an IPv6 address (hex groups and colons, an embedded IPv4 allowed).
_ADDRESS_RE = r"(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:(?:\d{1,3}\.){3}\d{1,3})?"
MAX_SCANNED = 24  # text columns judged at most (one scan computes them all)
_TEXT_TYPES = ("VARCHAR", "BOOLEAN")


_NUMERIC_TYPES = ("DOUBLE", "FLOAT", "DECIMAL", "REAL", "BIGINT", "INTEGER", "HUGEINT", "SMALLINT")


def common_values(
    con: Any, columns: list[tuple[str, str]], declared: tuple[str, ...], entities: tuple[str, ...] = ()
) -> tuple[dict[str, list[list[Any]]], list[str]]:
    """({column: [[value, count], ...]} most common first, entity columns).

    The values are the declared columns' (those that exist) or, with none declared,
    the categorical text columns found; NULLs are not values. The entity columns are
    the declared ones that exist or, with none declared, the text columns found with
    many distinct values."""
    exists = {c for c, _ in columns}
    if declared:
        names = [n for n in declared if n in exists]
        found_entities = [n for n in entities if n in exists]
    else:
        names, found_entities = _found(con, columns)
    values: dict[str, list[list[Any]]] = {}
    for name in names:
        rows = con.execute(
            f"SELECT {sql_name(name)} AS v, count(*) AS n FROM log WHERE v IS NOT NULL "
            f"GROUP BY v ORDER BY n DESC, v LIMIT {VOCABULARY}"
        ).fetchall()
        if rows:
            values[name] = [[_plain(v), int(n)] for v, n in rows]
    return values, found_entities


def found_measure(columns: list[tuple[str, str]]) -> str | None:
    """The column a CSV or JSON lines table's totals are likely of: its first fractional
    column, else its first whole-number one."""
    numeric = [n for n, t in columns if t.upper().split("(")[0] in _NUMERIC_TYPES]
    fractional = [n for n, t in columns if t.upper().split("(")[0] in _NUMERIC_TYPES[:4]]
    chosen = fractional or numeric
    return chosen[0] if chosen else None


def _found(con: Any, columns: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(categorical, entity) text columns of a CSV or JSON lines table, by one approximate scan."""
    text = [n for n, t in columns if t.upper() in _TEXT_TYPES][:MAX_SCANNED]
    if not text:
        return [], []
    counts = con.execute(
        "SELECT " + ", ".join(f"approx_count_distinct({sql_name(n)})" for n in text) + " FROM log"
    ).fetchone()
    judged = [(n, int(k or 0)) for n, k in zip(text, counts, strict=True)]
    # The columns of few values first; then those of more, fewer than VOCABULARY, whose whole set
    # is then known too: a value a question states of one (a sub-region of seventeen) is a
    # condition rlm can add (rlm.run.typed.conditions), not a word inside another's value.
    categorical = [n for n, k in judged if 1 < k <= MAX_DISTINCT]
    categorical += [n for n, k in judged if MAX_DISTINCT < k < VOCABULARY]
    categorical = categorical[:MAX_FOUND]
    entities = [n for n, k in judged if k > MAX_DISTINCT][:2]
    return categorical, entities


def example_queries(
    columns: list[tuple[str, str]],
    values: dict[str, list[list[Any]]],
    entities: list[str],
    measure: str | None = None,
    reserved: frozenset[str] = frozenset(),
) -> list[str]:
    """Queries of the four shapes aggregate questions take, on this table's columns and its
    most common value: a count, a distinct count, a ranking, a total."""

    def _ident(name: str) -> str:
        return _quoted(name, reserved)

    where, cat = "", None
    for name, pairs in values.items():
        if pairs:
            cat, where = name, f" WHERE {_ident(name)} = {sql_value(pairs[0][0])}"
            break
    out = [
        f"SELECT count(*) FROM log{where}" if where else "SELECT count(*) FROM log WHERE line LIKE '%error%'"
    ]
    if entities:
        first, ranked = entities[0], entities[1] if len(entities) > 1 else entities[0]
        out.append(f"SELECT count(DISTINCT {_ident(first)}) FROM log{where}")
        out.append(
            f"SELECT {_ident(ranked)}, count(*) AS n FROM log{where} GROUP BY {_ident(ranked)} ORDER BY n DESC LIMIT 5"
        )
    elif cat is not None:
        out.append(f"SELECT {_ident(cat)}, count(*) AS n FROM log GROUP BY {_ident(cat)} ORDER BY n DESC")
    if measure is not None and cat is not None and any(n == measure for n, _ in columns):
        out.append(
            f"SELECT {_ident(cat)}, sum({_ident(measure)}) AS total FROM log GROUP BY {_ident(cat)} ORDER BY total DESC"
        )
    return out


def lead_ins(
    con: Any, columns: list[tuple[str, str]], values: dict[str, list[list[Any]]]
) -> dict[str, list[str]]:
    """{text column: the words most often written right before a number or a path in it}, for
    the free-text columns (those whose values are not listed whole; `line` only when the table
    parsed no other text column)."""
    text = [n for n, t in columns if t.upper() == "VARCHAR" and n not in values]
    out: dict[str, list[str]] = {}
    for name in text[:MAX_FOUND] or ([] if columns else ["line"]):
        rows = con.execute(
            f"SELECT left(w, -1) AS lead, count(*) AS n FROM (SELECT unnest(regexp_extract_all(v, {sql_value(_LEAD_IN_RE)}, 1)) AS w "
            f"FROM (SELECT {sql_name(name)} AS v FROM log WHERE v IS NOT NULL LIMIT {LEAD_IN_ROWS})) "
            f"GROUP BY lead HAVING count(*) >= {LEAD_IN_MIN} ORDER BY n DESC, lead LIMIT {LEAD_INS}"
        ).fetchall()
        if rows:
            out[name] = [str(w) for w, _ in rows]
    return out


def address_columns(con: Any, columns: list[tuple[str, str]]) -> list[str]:
    """The text columns whose first ADDRESS_ROWS values are mostly IP addresses (a port after one
    allowed): where an answer that must be an address is read from (rlm.run.answer_kind). One
    scan of the table's first rows computes them all."""
    text = [n for n, t in columns if t.upper() == "VARCHAR"][:MAX_SCANNED]
    if not text:
        return []
    shares = ", ".join(
        f"avg(CASE WHEN {sql_name(n)} IS NULL THEN NULL ELSE regexp_full_match({sql_name(n)}, {sql_value(_ADDRESS_RE)})::INT END)"
        for n in text
    )
    row = con.execute(f"SELECT {shares} FROM (SELECT * FROM log LIMIT {ADDRESS_ROWS})").fetchone()
    return [n for n, share in zip(text, row or (), strict=False) if share is not None and share > 0.5]


def describe_values(values: dict[str, list[list[Any]]], max_chars: int = 360) -> str | None:
    """`Values: event: failed 519, invalid_user 311, …; program: sshd 1,990` within max_chars."""
    parts = []
    for name, pairs in values.items():
        shown = ", ".join(f"{sql_value(v)} {n:,}" for v, n in pairs[:TOP])
        more = ", …" if len(pairs) > TOP else ""
        parts.append(f"{name}: {shown}{more}")
    text = "; ".join(parts)
    if not text:
        return None
    if len(text) > max_chars:
        text = text[: max_chars - 2].rsplit(",", 1)[0] + ", …"
    return f"Common values (count of lines): {text}"


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else str(value)


def reserved_words(con: Any) -> frozenset[str]:
    """DuckDB's reserved keywords: a column named like one must be quoted."""
    rows = con.execute(
        "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'"
    ).fetchall()
    return frozenset(r[0].lower() for r in rows)


def _quoted(name: str, reserved: frozenset[str]) -> str:
    """A column name as a query names it: bare when it can be (what a model copies), quoted otherwise."""
    return name if name.isidentifier() and name.lower() not in reserved else sql_name(name)
