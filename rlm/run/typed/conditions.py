"""The conditions a question names that a typed query leaves out.

A small model's commonest wrong answer is a right query of the wrong rows: it counts the
distinct clients of the whole log when the question asked for those sent a 404, or sums a
column over every row when it asked for one kind. Such an answer is grounded (its figure is
in what the query printed), so grounding alone lets it through.

What is checked depends on the table alone, never on the question's wording: a value of a
column whose whole set of values the table lists (a status, a level, a kind, a region) that
the question states as a word, in a query that neither filters on that column nor names the
value in any filter, nor ranks or groups by that column (there the question may name the
values it compares). The model is told (it may add the filter); a final answer given after such
a query, and not after a later one without it, carries the doubt to the run's result, where
`--strict` withholds it.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import Column, table_columns
from rlm.run.typed.compile import read_json

__all__ = ["left_out"]

# Values that stand for no condition when a question states them ("answer yes or no").
_NOT_CONDITIONS = frozenset({"yes", "no", "true", "false", "none", "null", "n/a", "unknown", "other", "all"})
_MAX_NAMED = 3  # conditions told at once: more would be noise in the model's next prompt


def left_out(question: str, content: str | None, table: dict[str, Any]) -> list[str]:
    """Each condition (`column = value`) the question names that the typed action in `content`
    leaves out; [] for an action that is not a query, or that could not be read."""
    cols = table_columns(table)
    try:
        checked = check_action(read_json(content), cols)
    except Problem:
        return []
    if checked.args is not None:  # grep, peek, final: not a query of the table's rows
        return []
    filtered = {f.column.name for f in checked.where}
    # A filter's text read as the question is: a value's `_` as a space.
    filter_text = (
        " ".join(str(getattr(f.value, "text", f.value)) for f in checked.where).casefold().replace("_", " ")
    )
    keyed = {c.name for c in (checked.by, checked.column) if c is not None and checked.op in ("top", "group")}
    found: list[tuple[str, Column, Any]] = []  # (the value as text, its column, the value)
    for column in cols.columns:
        if column.values is None or column.name in filtered or column.name in keyed:
            continue
        for value in column.values:
            text = str(value)
            said = text.casefold().replace("_", " ")
            if _condition_like(text) and said not in filter_text and _states(question, text):
                found.append((text, column, value))
    # The longest first, and none inside one kept: "Central Asia" names a sub-region, not Asia.
    kept: list[tuple[str, Column, Any]] = []
    for text, column, value in sorted(found, key=lambda f: -len(f[0])):
        if all(text.casefold() not in k.casefold() for k, _, _ in kept) and column not in (
            c for _, c, _ in kept
        ):
            kept.append((text, column, value))
    return [_said(column, value) for _, column, value in kept[:_MAX_NAMED]]


def _condition_like(text: str) -> bool:
    """A value a question would state as a condition: a word or code of three characters or
    more, or a number of three digits or more (a status); not 2 (a count) nor `yes`."""
    if len(text) < 3 or text.casefold() in _NOT_CONDITIONS:
        return False
    return any(ch.isalpha() for ch in text) or (text.isdigit() and int(text) >= 100)


def _states(question: str, text: str) -> bool:
    """Whether the question states `text` as a whole word (any case; a plural `404s` counts; a
    value's `_` read as a space: `failed_password` is stated by "failed password")."""
    words = r"[\s_]+".join(re.escape(w) for w in text.split("_") if w)
    pattern = rf"(?<![\w.-]){words}s?(?![\w-]|\.\w)"
    return re.search(pattern, question, re.IGNORECASE) is not None


def _said(column: Column, value: Any) -> str:
    shown = repr(value) if isinstance(value, str) else str(value)
    return f"{column.name} = {shown}"
