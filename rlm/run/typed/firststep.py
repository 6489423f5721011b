"""The first of a question's two steps, run by rlm where the model's query skips it.

A question that asks in two steps (rlm.run.typed.steps) names, in its first sentence, one value
to find by a ranking ("Find the <column> with the most <rows>") and then asks about that value's
rows. A small model runs the second query alone, over every row: a total of the whole table
where that of one key's rows was asked. Told that the question asks in two steps, it sends the
same query again.

Where the words after "most" name a column of amounts ("the most fare" of a zone), the
ranking is of each key's total of it, not of its lines.

The first step may also find one row, by the largest or smallest value of a column ("the
single ride with the biggest tip"; where the table offers how long a row took, "the ride that
lasted the longest"): its line number is then the key (`line_no = 5366`).

Where the first sentence reads as such a ranking, plainly, rlm runs it (once a node) and adds
the key it finds to a query of the model's that neither ranks that column nor filters on it,
and tells the model, as for a condition the question names (rlm.run.typed.conditions). What is
read is the sentence's form against the table: the column is the one whose name's words are
all among the words before "most" (or "fewest" ...), and the rows ranked are those the rest of
the sentence states by conditions rlm adds itself (a quoted line, a value a column lists, a
time). A sentence with any other word left over (a kind of row no condition states, a measure
other than a count of rows) is not read at all: a wrong first step would make a confident
wrong answer of a right second one. The key found must lead the ranking alone (no tie), and is
no NULL or empty value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm.run.typed.asked import as_number, asked_column, best_named, name_words, singular
from rlm.run.typed.check import Problem, check_action, shown_value
from rlm.run.typed.columns import NUMBER, TEXT, Column, table_columns
from rlm.run.typed.compile import checked_query, compile_sql
from rlm.run.typed.conditions import said_filter, unstated
from rlm.run.typed.placeholders import quoted_texts
from rlm.run.typed.quoted import HoldsText, with_question_conditions
from rlm.run.typed.spans import asks_a_span
from rlm.run.typed.steps import first_sentence
from rlm.run.typed.vocabulary import MAX_FILTERS, ROW_NOUNS

__all__ = ["FirstStep", "first_step", "onto_first_step"]

# The words that rank: the most rows first, or the fewest.
_MOST = {"most": "most", "fewest": "least", "least": "least"}
_EXTREME = re.compile(r"\b(?:the\s+)?(most|fewest|least)\b", re.IGNORECASE)
# Where the name of what is to be found ends ("the host name | that logged the most errors").
_KEY_ENDS = re.compile(r"\b(?:with|that|which|who|whose|having|most|fewest|least)\b", re.IGNORECASE)
# The file itself, named as a place ("across the entire data file", "of this log file"): no condition.
_THE_FILE = re.compile(
    r"\b(?:in|of|from|across|over)\s+(?:this|the)\s+(?:[\w.-]+\s+){0,2}?(?:log|file|csv|dataset|data|table)\b",
    re.IGNORECASE,
)
# Words that say nothing of which rows: articles, links, the verbs a ranking is put with.
_FILLER = frozenset(
    singular(w)
    for w in "a an the one single of in on at by for from to with that which who whose what has have had "
    "is was were are be been did does do got get gets made make makes sent send sends logged "
    "generated produced received appears appeared appear occurs occurred shows showed seen saw "
    "number count total amount all any there this these those its their first find look up identify "
    "determine locate take pick work out most fewest least often whole entire".split()
)
# The words that ask for one row by the largest or smallest value of a column.
_ROW_EXTREME = re.compile(
    r"\b(longest|largest|highest|biggest|greatest|maximum|shortest|smallest|lowest|least|minimum)\b",
    re.IGNORECASE,
)
_LARGEST = frozenset({"longest", "largest", "highest", "biggest", "greatest", "maximum"})
_ROW_WORDS = frozenset(
    singular(w)
    for w in "longest largest highest biggest greatest maximum shortest smallest lowest least minimum "
    "by value amount figure single whose".split()
)
# How a sentence writes the time between two of a row's times (rlm.run.typed.spans).
_SPAN_WORDS = frozenset(
    singular(w) for w in "duration took lasted long time minus elapsed length spent".split()
)
# Words that say the amount ranked by is added up over each key's rows ("the most fare overall").
_SUMMED = frozenset(singular(w) for w in "total sum summed overall combined altogether".split())
# An aside in brackets that says how the amount is totalled: it names no kind of row.
_ON_THE_TOTAL = re.compile(r"\([^()]*\b(?:sum|summed|total|totalled|totaled|added)\b[^()]*\)", re.I)
_RANKED_ROWS = 5  # rows the probe reads: a NULL or empty key on top is passed over


@dataclass(frozen=True)
class FirstStep:
    """The ranking rlm ran for a question's first step, and what it found."""

    column: Column
    value: Any  # the key on top, as the table holds it
    shown: str  # what it found, for the model: `'10.0.0.7' first, then '10.0.0.9'`
    conditions: tuple[str, ...]  # the conditions of the first sentence the ranking kept to
    by: str  # the column the ranking groups or orders by: a query on it is the model's own first step


def _words(text: str) -> list[str]:
    return [singular(w) for w in re.findall(r"[A-Za-z]+", text)]


def _key_column(before: str, table: dict[str, Any]) -> Column | None:
    """The one column whose name's words are all among `before`'s, the most of them where
    several fit; a text or number column, never `line` or its number."""
    keys = [
        c
        for c in table_columns(table).columns
        if c.name not in ("line", "line_no") and c.kind in (TEXT, NUMBER) and not c.quoted
    ]
    best = best_named(set(_words(before)), keys)
    return best[0] if len(best) == 1 else None


def _plain(rest: str, covered: set[str]) -> bool:
    """Whether every word after the name of what is to be found (`rest`) is filler, a noun of
    rows, or a word of a condition rlm adds (`covered`): no kind of row is left unstated."""
    words = [w for w in _words(_THE_FILE.sub(" ", rest)) if len(w) > 1]
    return all(w in _FILLER or w in ROW_NOUNS or w in covered for w in words)


def _covered(sentence: str, added: list[str]) -> set[str]:
    """The words the conditions rlm added state: the quoted texts and the values kept to."""
    texts = [*quoted_texts(sentence), *added]
    return {w for t in texts for w in _words(t.replace("_", " "))}


def first_step(
    question: str,
    table: dict[str, Any],
    holds_text: HoldsText,
    rows: Callable[[str], list[list[str]] | None],
) -> FirstStep | None:
    """The key the question's first sentence asks to find, by a ranking rlm runs (`rows` runs a
    query and gives the cells of its first rows as text, None when it cannot); None where the
    sentence does not read plainly as a ranking of a column's values by their rows, or the
    ranking has no one key on top."""
    sentence = first_sentence(question)
    if sentence is None:
        return None
    extreme = _EXTREME.search(sentence)
    if extreme is None:
        return _row_step(sentence, table, holds_text, rows)
    ends = _KEY_ENDS.search(sentence)
    end = ends.start() if ends is not None else extreme.start()
    column = _key_column(sentence[:end], table)
    if column is None:
        return None
    ranking = {"op": "group", "by": column.name, "order": _MOST[extreme[1].lower()], "k": _RANKED_ROWS}
    # "the most <amount>": the total of an amount column the words after the extreme name, not lines.
    amount = _amount_named(sentence[extreme.end() :], table)
    own: set[str] = set()
    if amount is not None and amount.name != column.name:
        ranking |= {"agg": "sum", "column": amount.name}
        own = set(name_words(amount.name)) | _SUMMED
        # The one verb that ties the key to the amount ("the host that moved the most
        # bytes"): the amount says what is ranked. Not before a count of rows, where a verb may
        # say which rows ("failed the most logins").
        verbs = [w for w in _words(sentence[end : extreme.start()]) if w not in _FILLER]
        own |= set(verbs) if len(verbs) == 1 else set()
    conditions = with_question_conditions(sentence, json.dumps(ranking), table, holds_text)
    action, added = conditions if conditions is not None else (ranking, [])
    rest = sentence[end:]
    if amount is not None:  # "(the size field summed, '-' as 0)": an aside on the total, no kind of row
        rest = _ON_THE_TOTAL.sub(" ", rest)
    if not _plain(rest, _covered(sentence, added) | own):
        return None
    try:
        query = compile_sql(action, table)
    except ValueError:
        return None
    found = rows(query)
    ranked = [r for r in found or [] if len(r) >= 2 and r[0] not in ("", "None", "NULL")]
    if not ranked or (len(ranked) > 1 and as_number(ranked[0][-1]) == as_number(ranked[1][-1])):
        return None
    value = _held(ranked[0][0], column)
    if value is None:
        return None
    # No count beside the key: a small model answered a count asked of the second step with it.
    shown = shown_value(value) + (f" first, then {ranked[1][0]!r}" if len(ranked) > 1 else "")
    return FirstStep(column, value, shown, tuple(added), column.name)


def _amount_named(words: str, table: dict[str, Any]) -> Column | None:
    """The one column of amounts (no id, code nor time between times) whose name's words are all
    among `words`, the most of them where several fit."""
    amounts = [c for c in table_columns(table).columns if c.amount and c.quoted is None and c.span is None]
    best = best_named(set(_words(words)), amounts)
    return best[0] if len(best) == 1 else None


def _ordered_column(sentence: str, table: dict[str, Any]) -> Column | None:
    """The one number column the sentence names, of amounts (no id or code): all of its name's
    words among the sentence's, the most of them where several fit; or, where the sentence asks
    how long a row took (rlm.run.typed.spans), the table's one time between two of its times."""
    cols = table_columns(table)
    amounts = [c for c in cols.columns if c.amount and c.quoted is None and c.span is None]
    if best_named(set(_words(sentence)), amounts):
        return _amount_named(sentence, table)
    spans = [c for c in cols.columns if c.span is not None]
    return spans[0] if len(spans) == 1 and asks_a_span(sentence) else None


def _row_step(
    sentence: str, table: dict[str, Any], holds_text: HoldsText, rows: Callable[[str], list[list[str]] | None]
) -> FirstStep | None:
    """The one row the sentence asks to find by the largest (smallest) value of a column ("the
    single ride with the longest distance"), as its line number; None where the sentence names
    no one column of amounts, states a kind of row no condition rlm adds states, or two rows
    share the largest value."""
    extreme = _ROW_EXTREME.search(sentence)
    column = _ordered_column(sentence, table) if extreme is not None else None
    if extreme is None or column is None:
        return None
    largest = extreme[1].lower() in _LARGEST
    ranking = {"op": "rows", "columns": [column.name], "order_by": column.name, "k": 2}
    ranking["take"] = "last" if largest else "first"
    conditions = with_question_conditions(sentence, json.dumps(ranking), table, holds_text)
    action, added = conditions if conditions is not None else (ranking, [])
    own = set(name_words(column.name)) | (
        {w for end in column.span for w in name_words(end)} | _SPAN_WORDS if column.span else set()
    )
    if not _plain(sentence, _covered(sentence, added) | own | _ROW_WORDS):
        return None
    try:
        query = compile_sql(action, table)
    except ValueError:
        return None
    found = [r for r in rows(query) or [] if len(r) == 2 and r[1] not in ("", "None", "NULL")]
    line = as_number(found[0][0]) if found else None
    if line is None or (len(found) > 1 and as_number(found[0][1]) == as_number(found[1][1])):
        return None
    line_no = next(c for c in table_columns(table).columns if c.name == "line_no")
    which = "largest" if largest else "smallest"
    shown = f"{int(line)} (the row of the {which} {column.name})"
    return FirstStep(line_no, int(line), shown, tuple(added), column.name)


def _held(cell: str, column: Column) -> Any:
    """A printed key as the column holds it: a number for a number column."""
    if column.kind != NUMBER:
        return cell
    number = as_number(cell)
    if number is None:
        return None
    return int(number) if number.is_integer() else number


def onto_first_step(
    question: str, content: str, step: FirstStep, table: dict[str, Any]
) -> tuple[dict[str, Any], str] | None:
    """The typed query in `content` with `step`'s key kept to, and what rlm did, in words for the
    model; None for a query that ranks or groups that column itself (the model's own first step),
    already filters on it, or is not a query. Where its filters leave no room, one the question
    states in no way (rlm.run.typed.conditions.unstated: made up) gives its place."""
    sent = checked_query(content, table)
    if sent is None:
        return None
    action, checked = sent
    # The model's own first step: a ranking of that column (a group in the key's order is none).
    ranking = checked.by if checked.order != "key" else None
    own = {"group": ranking, "top": checked.column, "rows": checked.order_by}.get(checked.op)
    if own is not None and own.name in (step.column.name, step.by):
        return None
    if any(f.column.name == step.column.name for f in checked.where):
        return None
    kept_to = {"column": step.column.name, "cmp": "=", "value": step.value}
    # One row found: a query that reads nothing of the column asked gives nothing of it (a count
    # per hour of that one row); the row's value of that column is shown instead.
    asked = asked_column(question, table, table_columns(table))
    read = {c.name for c in (checked.column, checked.by, checked.order_by, *checked.columns) if c is not None}
    if step.column.name == "line_no" and asked is not None and asked not in read:
        return {"op": "rows", "columns": [asked], "where": [kept_to]}, (
            f"the question first asks for one row: rlm ordered the rows and found line_no {step.shown}; "
            f"the query is of that row's {asked}, the column the question asks for"
        )
    query = {k: v for k, v in action.items() if k != "asks"}
    where = query.get("where")
    where = [where] if isinstance(where, dict) else list(where or [])
    dropped = []
    if len(where) >= MAX_FILTERS:
        made_up = set(unstated(question, content, table, set()))
        dropped = [f for f in where if isinstance(f, dict) and said_filter(f) in made_up][:1]
        where = [f for f in where if f not in dropped]
    amended = {**query, "where": [*where, kept_to]}
    try:
        check_action(amended, table_columns(table))
    except Problem:
        return None
    kept = f" (kept to {', '.join(step.conditions)})" if step.conditions else ""
    gave_way = (
        f", in place of {said_filter(dropped[0])}, which the question does not state" if dropped else ""
    )
    return amended, (
        f"the question first asks for one {step.column.name}: rlm ranked them{kept} and found "
        f"{step.shown}; {step.column.name} = {shown_value(step.value)} is added to where{gave_way}"
    )
