"""SQL text: quoting a string, a name or a value for DuckDB's SQL, written once.

Every piece of SQL rlm writes from data (a file path, a column name taken from
a CSV header, a value taken from the file) goes through these: a name or value
from the file can never close its quotes and add SQL of its own. Stdlib only,
so the worker may use it too.
"""

from __future__ import annotations

from typing import Any


def sql_string(text: str) -> str:
    """A SQL string literal (standard strings: a backslash is literal, a quote is doubled)."""
    return "'" + text.replace("'", "''") + "'"


def sql_name(name: str) -> str:
    """A quoted SQL identifier: any name, reserved words and spaces included."""
    return '"' + name.replace('"', '""') + '"'


def sql_value(value: Any) -> str:
    """A Python value as a SQL literal, as SQL would compare it: a boolean as `true`/`false`,
    a number as written, anything else as a quoted string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return sql_string(str(value))
