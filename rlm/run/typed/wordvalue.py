"""A value a question names by one of its words, where the lines say it names the same rows.

A parse names a kind of line by a value of several words (`accepted_password`); a question says
one of them ("the accepted login"), so no value is stated whole (rlm.run.typed.conditions) and a
small model ranks the users of every line. A word of one value only may still name other lines:
"connection" is a word of `connection_closed` alone, yet ftpd's lines write it too, and a
question about those is not about closed connections.

So the word is taken for the value only where the table says it is: the rows holding the value
are exactly as many as the lines that write the word (one query of two counts), and some. Only a
word of four letters or more, no noun of any row ("message"), of a value of two or three words,
the word of one listed value of all the table's columns, which the
question writes whole, not negated; for a query with no filter on
that column that neither ranks nor groups by it. rlm adds the filter and tells the model, as
for a condition stated whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import Column, table_columns
from rlm.run.typed.compile import checked_query, condition_sql
from rlm.run.typed.conditions import negated
from rlm.run.typed.vocabulary import MAX_FILTERS, ROW_NOUNS
from rlm.text.sqltext import sql_value

__all__ = ["onto_word_of_value"]

_MIN_LETTERS = 4
_MAX_WORDS = 3  # a value of more is a text (a message's template), not the name of a kind of line
# Words a question writes for its own sake ("how many", "more than"), not to name lines.
_OWN_WORDS = frozenset(
    "many much more most less least than with from have that this what which when where there "
    "were does each every some other only same just into over under after before about".split()
)


def _words(value: Any) -> list[str]:
    return [w.casefold() for w in re.split(r"[^A-Za-z]+", str(value)) if w]


def _named(question: str, table: dict[str, Any]) -> list[tuple[Column, Any, str]]:
    """(column, value, word) of each listed value of several words one of which, its own among
    every listed value's words, the question writes whole."""
    listed = [(c, v) for c in table_columns(table).columns if c.values for v in c.values]
    owners: dict[str, set[tuple[str, Any]]] = {}
    for column, value in listed:
        for word in _words(value):
            owners.setdefault(word, set()).add((column.name, value))
    out = []
    for column, value in listed:
        words = _words(value)
        if not 2 <= len(words) <= _MAX_WORDS:
            continue
        for word in words:
            if (
                len(word) >= _MIN_LETTERS
                and word not in _OWN_WORDS
                and word not in ROW_NOUNS
                and len(owners[word]) == 1
                and re.search(rf"(?<![A-Za-z]){word}s?(?![A-Za-z])", question, re.IGNORECASE)
                and not negated(question, word)
            ):
                out.append((column, value, word))
    return out


def onto_word_of_value(
    question: str, content: str, table: dict[str, Any], counts: Callable[[str], list[int] | None]
) -> tuple[dict[str, Any], str] | None:
    """The typed query in `content` with `column = value` added, where the question names the
    value by one of its words and the table says the word names those rows (`counts` runs the
    probe: the whole numbers of its first row, None when it cannot); and the condition as
    told; None otherwise (see the module's doc)."""
    sent = checked_query(content, table)
    if sent is None:
        return None
    action, checked = sent
    named = _named(question, table)
    if len({(c.name, v) for c, v, _ in named}) != 1 or len(checked.where) >= MAX_FILTERS:
        return None
    column, value, word = named[0]
    keyed = {c.name for c in (checked.by, checked.column) if c is not None and checked.op in ("top", "group")}
    if column.name in keyed or any(f.column.name == column.name for f in checked.where):
        return None
    where = list(action.get("where") or [])
    amended = {k: v for k, v in action.items() if k != "asks"} | {
        "where": [*where, {"column": column.name, "cmp": "=", "value": value}]
    }
    try:
        added = check_action(amended, table_columns(table)).where[-1]
    except Problem:
        return None
    written = sql_value(f"(?i)(^|[^A-Za-z]){word}s?([^A-Za-z]|$)")
    probe = (
        f"SELECT count(*) FILTER (WHERE {condition_sql(added)}), "
        f"count(*) FILTER (WHERE regexp_matches(line, {written})) FROM log"
    )
    found = counts(probe)
    if found is None or len(found) != 2 or found[0] == 0 or found[0] != found[1]:
        return None
    shown = repr(value) if isinstance(value, str) else str(value)
    return amended, f"{column.name} = {shown} (the lines that write {word!r})"
