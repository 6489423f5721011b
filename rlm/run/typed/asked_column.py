"""The column a question names, where a typed query ranks the raw line instead.

Every table has `line`, the raw text of each row, and the offline model reaches for it: it ranked
or grouped by `line` (the most common whole line) where the question asked which value of a
column it names comes most (5 of 32 first actions on blind13, questions about CSV exports that
name their columns; 5 of 124 on the development sets). A whole line is almost never what is
counted, and a question that names the column it ranks gives it.

A column is named when the question writes its name as a word (any case; `_` as a space),
outside quotes; `line` and `line_no` are not, nor names under 3 characters (a quoted value's
`N`). The one taken is the first named after the question's `which` or `what`; with no such
word, the only one named. The query's other fields are kept. As the measure is
(rlm.run.typed.measure), this is done once for an action as sent and told to the model.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import read_json
from rlm.run.typed.placeholders import quoted_texts

__all__ = ["with_asked_column"]

_RAW = ("line", "line_no")  # the raw text and its number: what is never the column named
_MIN_NAME = 3  # a shorter name (a quoted value's `N`) is a letter of the question, not a name
_ASKING = re.compile(r"\b(?:which|what)\b", re.IGNORECASE)


def _named_at(question: str, name: str) -> int | None:
    """Where the question first writes a column's name as a word, or None."""
    words = r"[\s_]+".join(re.escape(w) for w in re.split(r"[\s_]+", name) if w)
    found = re.search(rf"(?<![\w.-]){words}(?![\w-])", question, re.IGNORECASE) if words else None
    return found.start() if found else None


def _asked_column(question: str, names: list[str]) -> str | None:
    text = question
    for quote in quoted_texts(question):
        text = text.replace(quote, " " * len(quote))
    named = [n for n in names if n not in _RAW and len(n) >= _MIN_NAME and not n.startswith("<")]
    at = {n: p for n in named if (p := _named_at(text, n)) is not None}
    asking = _ASKING.search(text)
    after = sorted((p, n) for n, p in at.items() if asking is not None and p > asking.start())
    if after:
        return after[0][1]
    return next(iter(at)) if len(at) == 1 else None


def with_asked_column(
    question: str, content: str | None, table: dict[str, Any]
) -> tuple[dict[str, Any], str] | None:
    """The typed query in `content` ranked, grouped or counted by the column the question names
    instead of `line`, and what changed; None when it does not rank `line` or names no column."""
    cols = table_columns(table)
    try:
        action = read_json(content)
        checked = check_action(action, cols)
    except Problem:
        return None
    if checked.args is not None or "after" in action:
        return None
    field = "by" if checked.op == "group" else "column"
    ranked = checked.by if checked.op == "group" else checked.column
    if checked.op not in ("top", "count_distinct", "group") or ranked is None or ranked.name != "line":
        return None
    if checked.op == "group" and checked.bucket is not None:
        return None
    named = _asked_column(question, cols.names())
    if named is None:
        return None
    return {**action, field: named}, f"{named} instead of line"
