"""The rows a ranking leaves out because they hold no value of its key.

A ranking (top, group) keys on a column's values, and a row with none (a CSV's empty field:
NULL in the table) is no key: its rows are in no row of the result, and nothing said so. A
question about the rows that lack a value then read the ranking and answered that none did.
Where the table lists a column whole and some rows hold none of its values (columns.EMPTY among
them), rlm counts the rows the query kept that hold none, and the model is told how many and
the filter that keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import empty_key_count_sql, read_json
from rlm.run.typed.vocabulary import EMPTY

__all__ = ["left_empty"]


def left_empty(
    content: str | None, table: dict[str, Any], first_rows: Callable[[str, int], list[list[str]] | None]
) -> str | None:
    """The note for the model where the typed ranking `content` left out rows that hold no value
    of its key (counted by `first_rows`, a query rlm runs in the worker); None otherwise."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return None
    key = checked.column if checked.op == "top" else checked.by if checked.op == "group" else None
    if (
        key is None
        or checked.args is not None
        or checked.after is not None
        or checked.bucket is not None
        or key.values is None
        or EMPTY not in key.values
    ):
        return None
    rows = first_rows(empty_key_count_sql(checked, key), 1)
    count = rows[0][0] if rows and rows[0] else ""
    if not count.isdigit() or int(count) == 0:
        return None
    keep = json.dumps({"column": key.name, "cmp": "=", "value": EMPTY})
    return (
        f"Note: {int(count):,} of the rows this query kept hold no {key.name} (it is empty there), "
        f"and a ranking leaves them out. To count or list them, filter {keep}."
    )
