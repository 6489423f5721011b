"""The common values of a table's categorical columns, for the profile.

A model that sees `event VARCHAR` does not know to write `event = 'failed_password'`
for "failed passwords"; one that sees `event: 'failed_password' 520, 'failed_none' 4`
does. A format declares its categorical columns (logformats.TableFormat.
categories); for CSV and JSON lines they are found: the text and boolean
columns with at most MAX_DISTINCT values, judged by DuckDB's approximate
count over the whole table in one scan.
"""

from __future__ import annotations

from typing import Any

MAX_DISTINCT = 12  # a column with more distinct values is not shown as categories
TOP = 6  # values shown per column
MAX_FOUND = 4  # columns found in a CSV / JSON lines table
MAX_SCANNED = 24  # text columns judged at most (one scan computes them all)
_TEXT_TYPES = ("VARCHAR", "BOOLEAN")


def common_values(
    con: Any, columns: list[tuple[str, str]], declared: tuple[str, ...]
) -> dict[str, list[list[Any]]]:
    """{column: [[value, count], ...]} most common first, for the declared columns (those that
    exist) or, with none declared, the categorical text columns found; NULLs are not values."""
    names = [n for n in declared if any(n == c for c, _ in columns)] if declared else _found(con, columns)
    values: dict[str, list[list[Any]]] = {}
    for name in names:
        rows = con.execute(
            f'SELECT "{_q(name)}" AS v, count(*) AS n FROM log WHERE v IS NOT NULL '
            f"GROUP BY v ORDER BY n DESC, v LIMIT {TOP + 1}"
        ).fetchall()
        if rows:
            values[name] = [[_plain(v), int(n)] for v, n in rows]
    return values


def _found(con: Any, columns: list[tuple[str, str]]) -> list[str]:
    text = [n for n, t in columns if t.upper() in _TEXT_TYPES][:MAX_SCANNED]
    if not text:
        return []
    counts = con.execute(
        "SELECT " + ", ".join(f'approx_count_distinct("{_q(n)}")' for n in text) + " FROM log"
    ).fetchone()
    return [n for n, k in zip(text, counts, strict=True) if 1 < int(k or 0) <= MAX_DISTINCT][:MAX_FOUND]


def describe_values(values: dict[str, list[list[Any]]], max_chars: int = 360) -> str | None:
    """`Values: event: failed 519, invalid_user 311, …; program: sshd 1,990` within max_chars."""
    parts = []
    for name, pairs in values.items():
        shown = ", ".join(f"{_literal(v)} {n:,}" for v, n in pairs[:TOP])
        more = ", …" if len(pairs) > TOP else ""
        parts.append(f"{name}: {shown}{more}")
    text = "; ".join(parts)
    if not text:
        return None
    if len(text) > max_chars:
        text = text[: max_chars - 2].rsplit(",", 1)[0] + ", …"
    return f"Common values (count of lines): {text}"


def _literal(value: Any) -> str:
    # As SQL would compare it: strings quoted, so the model copies 'failed_password', not failed_password.
    return (
        f"'{value}'"
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else str(value)


def _q(name: str) -> str:
    return name.replace('"', '""')
