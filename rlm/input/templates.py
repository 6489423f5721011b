"""Message templates (`rlm stats`): the most common texts of the table `log` with their variable
parts masked, counted by DuckDB.

The text is the message column (`message`, `msg`, `log`) where a line's is parsed, a request's
`method path` where the table has those (then its status after it, unmasked), else the line;
its first TEMPLATE_CHARS characters, with UUIDs, IPv4 addresses, hex numbers and runs of
digits masked (MASKS, in that order).
"""

from __future__ import annotations

import re
from typing import Any

from rlm.text.sqltext import sql_name, sql_string

__all__ = ["MASKS", "TEMPLATE_CHARS", "column_key", "templates"]

# A template is made of the first this many characters of its text: a bounded cost per line.
TEMPLATE_CHARS = 300
# What a template masks, in this order: (regular expression, what stands in its place). The
# expressions mean the same to DuckDB's RE2 and to Python's `re` with re.ASCII.
MASKS: tuple[tuple[str, str], ...] = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<UUID>"),
    (r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}\b", "<IP>"),
    # 0x-prefixed, or a word of hex digits holding both a digit and a letter
    (r"\b(?:0[xX][0-9a-fA-F]+|[0-9a-fA-F]*(?:[0-9][a-fA-F]|[a-fA-F][0-9])[0-9a-fA-F]*)\b", "<HEX>"),
    (r"[0-9]+", "<N>"),
)

# Texts grouped before they are masked when the first _REPEAT_SAMPLE hold at most this share of
# distinct ones (grouping a gigabyte of distinct lines first cost half again the masking).
_REPEAT_SAMPLE = 100_000
_REPEATS = 0.5

_MESSAGE_NAMES = ("message", "msg", "log_message", "log")


def column_key(name: str) -> str:
    """A column's name as it is matched against the names looked for: `Log.Level` is `log_level`."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _template_text(columns: list[tuple[str, str]], status: str | None) -> tuple[str, str, str]:
    """(what the templates are of, in words; the SQL of the text masked; the SQL of a value put
    after it unmasked, or NULL): a request's status is kept as it is (200 and 404 differ)."""
    by_name = {column_key(n): (n, t.upper()) for n, t in reversed(columns)}
    for key in _MESSAGE_NAMES:
        if key in by_name and by_name[key][1] == "VARCHAR":
            n = by_name[key][0]
            return f"{n} (the line where it is not parsed)", f"coalesce({sql_name(n)}, line)", "NULL"
    if "method" in by_name and "path" in by_name:
        method, path = (sql_name(by_name[k][0]) for k in ("method", "path"))
        words = f"{by_name['method'][0]} {by_name['path'][0]}" + (f" {status}" if status else "")
        tail = (
            "NULL"
            if status is None
            else f"CASE WHEN {path} IS NOT NULL THEN CAST({sql_name(status)} AS VARCHAR) END"
        )
        return (
            f"{words} (the line where it is not parsed; {status} not masked)" if status else words,
            f"CASE WHEN {path} IS NOT NULL THEN concat_ws(' ', {method}, {path}) ELSE line END",
            tail,
        )
    return "line", "line", "NULL"


def templates(con: Any, columns: list[tuple[str, str]], top: int, *, status: str | None) -> dict[str, Any]:
    """The `top` most common templates of `log`: count, and the first line each is found on
    (`status`: the table's HTTP status column, if any, put after a request's method and path).

    Masking costs: DuckDB's global regexp_replace takes about half a microsecond a match (a
    gigabyte of access-log lines, two dozen digit runs each: about half a minute on two cores).
    Texts that repeat (a message column, a request's method and path) are grouped first and each
    distinct one masked once; a mask is applied only to the texts it matches."""
    of, text, tail = _template_text(columns, status)
    raw = f"left({text}, {TEMPLATE_CHARS})"
    sampled, distinct = con.execute(
        f"SELECT count(*), count(DISTINCT rlm_x) FROM (SELECT {raw} AS rlm_x FROM log LIMIT {_REPEAT_SAMPLE})"
    ).fetchone()
    if sampled and distinct <= _REPEATS * sampled:
        source = (
            f"SELECT {raw} AS rlm_x, {tail} AS rlm_k, count(*) AS rlm_n, min(line_no) AS rlm_first "
            "FROM log GROUP BY rlm_x, rlm_k"
        )
    else:
        source = f"SELECT {raw} AS rlm_x, {tail} AS rlm_k, 1 AS rlm_n, line_no AS rlm_first FROM log"
    for regex, token in MASKS:
        rx, tok = sql_string(regex), sql_string(token)
        source = (
            f"SELECT CASE WHEN regexp_matches(rlm_x, {rx}) THEN regexp_replace(rlm_x, {rx}, {tok}, 'g') "
            f"ELSE rlm_x END AS rlm_x, rlm_k, rlm_n, rlm_first FROM ({source})"
        )
    rows = con.execute(
        f"SELECT concat_ws(' ', rlm_x, rlm_k) AS rlm_t, sum(rlm_n) AS n, min(rlm_first) AS first, "
        f"count(*) OVER () FROM ({source}) GROUP BY rlm_t ORDER BY n DESC, first LIMIT {int(top)}"
    ).fetchall()
    return {
        "of": of,
        "chars": TEMPLATE_CHARS,
        "masks": [token for _, token in MASKS],
        "distinct": int(rows[0][3]) if rows else 0,
        "top": [{"template": t, "count": int(n), "first_line": int(f)} for t, n, f, _ in rows],
    }
