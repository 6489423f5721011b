"""The measure a question's own words ask for, where a typed query computes another one.

The offline model chooses an op by the phrase each begins with (rlm.run.typed.vocabulary.ASKS)
and keeps to the op it first reaches for: on the development sets, every run that answered a
question asking for an average or a mean sent a `sum` (5 of 5, each op with its own example in
the prompt), a question asking which value is the fewest got a `top` (the most common), and the
smallest of a number got a `top` of it. Each such result is grounded all the same.

The words that name an aggregate are few and the same in every question of their kind, so they
are read here as the vocabulary's phrases are written: outside quotes, and outside any column's
name (a column `total`, a field `requests.total`, is not the question's word). Only a query of
the op and column the model chose is changed, its rows kept, and only where the question's
words point one way:

- `sum` (or a `group` whose agg is sum) where the question speaks of an average or a mean, and
  of no total or sum, becomes the average of the same column and rows;
- `top` (the most common values first) where the question asks for the fewest, the least or
  the rarest, and not the most, becomes a `group` by that column, least first (a `group`
  ordered by most likewise);
- `top` of a number column where the question asks for the largest, highest or maximum (or the
  smallest, lowest or minimum) of a value, not of a number of lines, becomes its max (min);
- `sum` where the question asks for the largest, longest or highest (or the smallest,
  shortest or lowest) and for no total becomes the max (min) of the same value, rows kept,
  a value read after a text (`after`) too;
- `count` of the rows where one number column passes a lower bound (`N > 30`), where the
  question asks for the largest value, becomes that column's max over the same rows (an upper
  bound and the smallest, its min): such a bound leaves the extreme as it is;
- `top`, `group` or `rows` cut at one (`k` 1) where the question asks for a list ("list ...",
  "one per line") gets the default k: a list of one, the model's top-1 habit, was a whole
  list's first item (a run of the development sets answered one address of ten); where it asks
  for every or all of them, any k below the largest gets the largest (a top 5 of a list of
  six left one out);
- a `group` counting lines per period where the question asks for the latest (earliest) time,
  and for no most, fewest nor how many, becomes the max (min) of that time column, rows kept;
- filters on the time column other than the window the question states ("from 03:15:00 to
  03:44:59" sent as `< '03:44:59'`) are replaced by that window (rlm.run.typed.window);
- a bound on a number whose comparison is not the one the question's words state for that
  number ("N or more" is `>= N`, "more than N" `> N`, "at most N" `<= N`, "under N" `< N`)
  gets the stated comparison: `> N` for "N or more" leaves out the rows of N;
- a query of another column where the question names the value after a marker (`the uid=
  value`: rlm.run.typed.markers) is moved onto that value's field: a top, a distinct count, a
  total, an average or an extreme of it, its groups, the rows of its largest value (where a
  "which" asks what goes with it), or a count of the rows where it passes the one bound the
  question states (_onto_marked);
- a query of other rows or another column where a "which" asks what goes with the largest
  (smallest) number the question's one quoted line reads (`spent N ms in ...`: N): the rows
  of that number's largest value, with what the "which" names beside it, as for a marker's
  value (_which_of_quoted); a total, an average or an extreme of another number is left alone;
- a bound on a number of lines ("N or more times", "at least N warnings"), a count of distinct
  values where their list is asked, and a count of rows where the question asks which values of
  one column: the values listed or named, each on at least N lines (_listing). Told that a
  count was computed, the 1.5B model sent the same count again (0 of 10 mended on blind17's
  traces); where the question names the values' column, or the model did, rlm can say the query.

Done once for an action as sent and told to the model, as an added condition is (rlm.run.node):
the same action sent again runs as written, and an answer after it is in doubt
(`measure_left_out`).

These are told and leave the answer in doubt, but are not rewritten, as no query of the
model's says what the right one is:

- a `count` of rows where the question asks how many distinct (unique, different) values:
  which values is the question's to say (a column, or a value inside the text);
- a count of rows (`count`, `top`, a `group` counting) where the question asks for a total, an
  average or the largest or smallest of a value, or for a list, and not how many: which value
  to add up or list is the question's to say (a column, or a number inside the text);
- a text filter holding the number a question compares with ("over 250" matched by
  `contains '250'`): the text holds the digits, it does not compare them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Any

from rlm.run.answer_form import asked_parts
from rlm.run.typed.asked import (
    STATED,
    as_number,
    asked_column,
    column_bounds,
    lines_bound,
    name_words,
    singular,
    unquoted,
)
from rlm.run.typed.check import Checked, Problem, check_action, shown_value
from rlm.run.typed.columns import DATE, NUMBER, TEXT, TIME, TableColumns, table_columns
from rlm.run.typed.compile import checked_query
from rlm.run.typed.examples_given import without_examples
from rlm.run.typed.fields import ADDRESS_TEMPLATE, SHAPE_TEMPLATES, read_fields, stated_amounts
from rlm.run.typed.vocabulary import (
    AGGREGATES,
    ASKS,
    DEFAULT_K,
    EMPTY,
    MAX_FILTERS,
    MAX_K,
    PERIODS,
    ROW_NOUNS,
)
from rlm.run.typed.window import table_window

__all__ = ["measure_left_out", "with_asked_measure"]

_AVERAGE = re.compile(r"\b(?:average|averages|averaged|avg)\b|\b(?:the|a)\s+mean\b|\bmean\s+of\b", re.I)
_TOTAL = re.compile(r"\b(?:total|totals|totaled|totalled|sum|summed|altogether|combined)\b", re.I)
_FEWEST = re.compile(r"\b(?:fewest|rarest|least)\b", re.I)
_EACH_ASKED = re.compile(r"\b(?:each|per|every)\b", re.I)
_AT_LEAST = re.compile(r"\bat\s+least\b", re.I)  # a threshold, not an order
_MOST = re.compile(r"\b(?:most|largest|highest|greatest|biggest)\b", re.I)
# What follows a superlative when it ranks a count ("the largest number of requests"), or
# another measure ("the highest average"), rather than a value.
_OF_COUNT = r"(?!\s+(?:number|count|amount|share|frequency|average|mean|total|sum)\b)"
_LARGEST_WORD = r"\b(?:largest|biggest|highest|greatest|longest|maximum|max)\b"
_SMALLEST_WORD = r"\b(?:smallest|lowest|shortest|minimum|min)\b"
_LARGEST = re.compile(_LARGEST_WORD + _OF_COUNT, re.I)
_SMALLEST = re.compile(_SMALLEST_WORD + _OF_COUNT, re.I)
# A superlative before "number of" too: one total is never the highest of anything, so where a
# query sums one value with no group, "the biggest number of <value>" asks for that value's max.
_LARGEST_OF_ANY, _SMALLEST_OF_ANY = re.compile(_LARGEST_WORD, re.I), re.compile(_SMALLEST_WORD, re.I)
_LOWER, _UPPER = frozenset({">", ">="}), frozenset({"<", "<="})
_LIST = re.compile(r"\blist\b|\bone (?:\w+ )?(?:per|a|on each) line\b|\beach on (?:a|its own) line\b", re.I)
_EVERY = re.compile(r"\b(?:every|all)\b", re.I)
# Words that ask for a count of rows ("how many", "the number of", "count the"): a count is then
# right. Not "count" as the noun of a value each row holds (a row's "cent count", to be summed).
_HOW_MANY = re.compile(
    r"\bhow many\b|\bnumber of\b|^\W*count\b|\b(?:the|a) count\b|\bcount(?:s|ed)? (?:the|of|all|every|each|how)\b"
    r"|\bcounts\b|\bfrequency\b",
    re.I,
)
# Words that ask for the sum of a value ("add up", "the sum of", "the total of"); a
# bare "total" does so where the question names a number column ("total requests" is a count).
_HOW_MANY_OF = re.compile(r"\bhow many\s+([a-z]+)(?:\s+([a-z]+))?", re.I)  # "how many (failed) trips"
_ADD_UP = re.compile(r"\badd(?:ed|ing)? (?:\w+ )?up\b|\bsum\b|\bsummed\b|\btotal\s+of\b", re.I)
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
# One moment asked for ("the latest timestamp", "the earliest ERROR"): not a period's count.
_LATEST = re.compile(r"\blatest\b", re.I)
_EARLIEST = re.compile(r"\bearliest\b", re.I)
# Where a column's name the question writes ends: no word goes on, nor a dotted name
# (`connections` of `connections.idle`); a full stop after it ends a sentence ("the longest distance.").
_NAME_ENDS = r"(?!\w|\.\w)"
_ANY_EXTREME = re.compile(
    r"\b(?:largest|biggest|highest|greatest|longest|maximum|max|smallest|lowest|shortest|minimum|min)\b", re.I
)


def _words(question: str, table: dict[str, Any]) -> str:
    """The question without its quotes and without any column's name: its own words. A number
    column named by its words ("idle connections" for `connections.idle`) goes too, with a
    "number of" before it: "the largest number of idle connections" asks for that value's
    largest, not for a count of rows."""
    text = unquoted(question)
    cols = table_columns(table)
    names = sorted(cols.names(), key=len, reverse=True)
    for name in names:
        text = re.sub(rf"(?<![\w.]){re.escape(name)}{_NAME_ENDS}", " ", text, flags=re.I)
    for label in _quoted_labels(table):
        text = re.sub(rf"(?<![\w.]){re.escape(label)}(?!\w)", " ", text, flags=re.I)
    for name in cols.names(NUMBER):
        words = name_words(name)
        if len(words) >= 2:
            word = "(?:" + "|".join(rf"{re.escape(w)}(?:s|es)?" for w in words) + ")"
            phrase = rf"(?:\b(?:number|count|amount)\s+of\s+)?\b{word}(?:\s+{word}){{{len(words) - 1}}}\b"
            text = re.sub(phrase, " ", text, flags=re.I)
    return text


def _quoted_labels(table: dict[str, Any]) -> set[str]:
    """The words a quoted line writes as the name of its number placeholder (`total = N`,
    `elapsed: N`): in the question ("which total was the biggest") they name that number, as a
    column's name does, and ask for no total."""
    labels = set()
    for field in read_fields(table):
        if not field.number or field.marked or field.counted:
            continue
        found = re.search(rf"([^\W\d_][\w.-]*)\s*[=:]\s*{re.escape(field.name)}(?!\w)", field.template)
        if found is not None:
            labels.add(found.group(1))
    return labels


@dataclass(frozen=True)
class _Read:
    """What the question's own words say of the measure, read once for a table."""

    words: str  # the question without its quotes and its columns' names (_words)
    listed: bool  # it asks for a list (its quotes aside: "one per line" names no column `line`)
    numbers_named: frozenset[str]  # the number columns it names
    asked_column: str | None  # the one column its "which <things>" names (_asked_column)
    lines_bound: int | None  # the fewest lines a value must be on ("N or more times"), if stated
    column_bounds: tuple[tuple[str, str, float], ...]  # (column, cmp, number) stated beside a column
    cols: TableColumns  # the table's columns, the fields of the question's quotes and markers among them
    marked: tuple[str, bool] | None = None  # the one field after a marker (rlm.run.typed.markers), a number?
    # The one number the lines write with a word the question asks an amount of, and whether they
    # write it before the word (`48213 bytes`: an amount) rather than after (`session 12`: often an id).
    counted: tuple[str, bool] | None = None
    table: dict[str, Any] | None = None  # the table's description, for the window on the query's own date
    question: str = ""  # as asked, quotes and all
    quoted_number: str | None = None  # the one number field of the texts the question quotes (`N`)


def _asked(action: dict[str, Any], checked: Checked, read: _Read) -> tuple[dict[str, Any], str] | None:
    """The query the question's words ask for instead of `action`, and what changed, in words."""
    words, listed, numbers_named = read.words, read.listed, read.numbers_named
    average = _AVERAGE.search(words) is not None and _TOTAL.search(words) is None
    fewest = _FEWEST.search(_AT_LEAST.sub(" ", words)) is not None and _MOST.search(words) is None
    column = checked.column
    rows = {"where": action["where"]} if action.get("where") else {}
    moved = _onto_marked(action, checked, read) or _onto_counted(action, checked, read)
    if (moved := moved or _onto_named_number(action, checked, read)) is not None:
        # Moved onto the value (or the number named), the query is read again: its measure (an
        # average asked) and its list may still be another than the question's.
        try:
            again = check_action(moved[0], read.cols)
        except Problem:
            return moved
        more = _asked(moved[0], again, read)
        return (more[0], f"{moved[1]}; {more[1]}") if more is not None else moved
    if (unstated := _min_count_unstated(action, checked, read)) is not None:
        return unstated
    if (empty := _empty_asked(action, checked, read)) is not None:
        return empty
    if (after := _number_after_quoted(action, checked, read)) is not None:
        return after
    if (listing := _listing(action, checked, read)) is not None:
        return listing
    if (which := _which_of_quoted(action, checked, read)) is not None:
        return which
    if checked.op == "sum" and average:
        return {**action, "op": "avg"}, "avg instead of sum"
    # "how many requests ...", a total of bytes sent: the lines are counted, where the question
    # names no total, sum nor average, nor the column summed.
    # (The words of a total read in the whole question: a column may be named `total`.)
    said = unquoted(read.question)
    # Only lines by name ("how many trips", not "how many bytes": an amount).
    of_rows = any(
        singular(w.lower()) in ROW_NOUNS for m in _HOW_MANY_OF.finditer(said) for w in m.groups() if w
    )
    counted = of_rows and not _AVERAGE.search(said) and not _TOTAL.search(said)
    if checked.op == "sum" and counted and _ADD_UP.search(said) is None and column is not None:
        if column.name not in numbers_named and checked.after is None and column.quoted is None:
            return {"op": "count", **rows}, f"a count of the lines instead of the sum of {column.name}"
    if checked.op == "group" and checked.agg == "sum" and average:
        return {**action, "agg": "avg"}, "avg instead of sum in each group"
    if checked.op in ("top", "group", "rows") and listed and _EVERY.search(words) and checked.k < MAX_K:
        return {**action, "k": MAX_K}, f"a list of every value (k {MAX_K} instead of {checked.k})"
    if checked.op in ("top", "group", "rows") and checked.k == 1 and listed:
        return {**action, "k": DEFAULT_K}, f"a list (k {DEFAULT_K} instead of 1)"
    if (stated := _stated_bounds(action, checked, words)) is not None:
        return stated
    if (equal := _equal_as_named(action, checked, read)) is not None:
        return equal
    if (window := _window_as_stated(action, checked, read)) is not None:
        return window
    if (starts := _starts_as_stated(action, checked, read.question)) is not None:
        return starts
    if (moment := _moment_asked(action, checked, words)) is not None:
        return moment
    if (bucket := _bucket_as_asked(checked, read.question)) is not None:
        return {
            **action,
            "bucket": bucket,
        }, f"bucket {bucket}, the period the answer's form asks for, instead of {checked.bucket}"
    if checked.op == "group" and checked.bucket == "hour" and _HOUR_OF_DAY.search(words):
        return {
            **action,
            "bucket": "hour_of_day",
        }, "bucket hour_of_day (the hour 0-23, every day together) instead of hour"
    if (unbounded := _bounds_left_out(action, checked, read)) is not None:
        return unbounded
    if checked.op == "top" and fewest and column is not None and checked.after is None:
        group = {"op": "group", "by": column.name, "order": "least", "k": checked.k, **rows}
        return group, f"a group by {column.name}, least first, instead of top (the most common)"
    if checked.op == "group" and checked.order == "most" and fewest:
        return {**action, "order": "least"}, "least first instead of most"
    # Ordered by the key, a group's first rows are the first keys, not the most: with a small k
    # the most was cut off. Not where each group's figure is asked ("per", "each").
    most = _MOST.search(words) is not None and not fewest and not _EACH_ASKED.search(words)
    if checked.op == "group" and checked.order == "key" and most and checked.bucket != "hour_of_day":
        return {**action, "order": "most"}, "most first instead of in the order of the key"
    extreme = _extreme(words)
    if checked.op == "top" and column is not None and column.kind == NUMBER and extreme:
        return {"op": extreme, "column": column.name, **rows}, f"{extreme} instead of top (the most common)"
    # The extreme of the value the model summed, unless the question names another number's.
    others = numbers_named - {column.name} if column is not None else numbers_named
    # Where a "which" asks for another column, the highest is of its groups, not of one value.
    own = read.asked_column is None or (column is not None and read.asked_column == column.name)
    summed = _extreme(words, of_number=True) if own else extreme
    unadded = _TOTAL.search(words) is None and _ADD_UP.search(words) is None
    if checked.op == "sum" and summed and unadded and not others:
        return {**action, "op": summed}, f"{summed} instead of sum"
    # A count of the rows where a number passes a bound, where the largest of that number is asked:
    # a lower bound leaves the max as it is (an upper one the min), so the model's rows are kept.
    bounded = [f for f in checked.where if f.column.kind == NUMBER and f.cmp in _LOWER | _UPPER]
    harmless = _LOWER if extreme == "max" else _UPPER
    if (
        checked.op == "count"
        and extreme
        and len({f.column.name for f in bounded}) == 1
        and all(f.cmp in harmless for f in bounded)
    ):
        name = bounded[0].column.name
        return {"op": extreme, "column": name, **rows}, f"{extreme} of {name} instead of a count"
    return None


# Column names that are also words of a measure: a question writing one may mean the word.
_MEASURE_WORDS = frozenset("total sum count average mean amount max min maximum minimum".split())


def _onto_named_number(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """A total, an average or an extreme (or a group's) of a number column the question names in
    no way, where it names one number column and the query reads that one nowhere: the same
    measure of the named one, rows kept. A small model reaches for the table's first number
    column (`version`, `pid`) whatever number the question names."""
    column = checked.column
    measures = checked.op in AGGREGATES or (checked.op == "group" and checked.agg is not None)
    if not measures or column is None or checked.after is not None or len(read.numbers_named) != 1:
        return None
    (name,) = read.numbers_named
    if name.lower() in _MEASURE_WORDS:  # "the largest total" may be the word, not the column
        return None
    # A number the question bounds ("a fare over 70") names the rows, not the measure.
    if column.name == name or _named(checked, name) or any(b[0] == name for b in read.column_bounds):
        return None
    measure = checked.agg if checked.op == "group" else checked.op
    return {**action, "column": name}, (
        f"the {measure} of {name}, the number column the question names, instead of {column.name}"
    )


def _named(checked: Checked, name: str) -> bool:
    """Whether a checked query reads the column `name` anywhere."""
    read = [
        checked.column,
        checked.by,
        checked.order_by,
        *checked.columns,
        *(f.column for f in checked.where),
    ]
    return any(c is not None and c.name == name for c in read)


def _one_bound(words: str) -> tuple[str, float] | None:
    """The one bound on a number the question's words state (cmp, number); None for none or several."""
    found = {
        (cmp, n)
        for pattern, cmp in STATED
        for m in pattern.finditer(words)
        if (n := next((as_number(g) for g in m.groups() if g), None)) is not None
    }
    return found.pop() if len(found) == 1 else None


_WHICH_THING = re.compile(r"\bwhich\b", re.I)


def _onto_marked(action: dict[str, Any], checked: Checked, read: _Read) -> tuple[dict[str, Any], str] | None:
    """The query moved onto the value after the marker the question names, where it reads
    another column (see the module's doc); None where it reads that value already, or no form
    of the question says what to compute of it."""
    if read.marked is None or _named(checked, read.marked[0]):
        return None
    name, number = read.marked
    words, op = read.words, checked.op
    rows = {"where": action["where"]} if action.get("where") else {}
    was = checked.column or checked.by
    instead = f"{name}, the value the question names, instead of {was.name if was else 'a count of rows'}"
    how_many = _HOW_MANY.search(words) is not None
    extreme = _extreme(words) if number and not how_many else None
    if extreme is not None:
        if read.asked_column is None and not _WHICH_THING.search(words):
            return {"op": extreme, "column": name, **rows}, f"{extreme} of {instead}"
        return _rows_of_extreme(name, extreme, read, rows)
    if number and not how_many and op not in ("sum", "avg") and _AVERAGE.search(words):
        return {"op": "avg", "column": name, **rows}, f"avg of {instead}"
    if op in ("top", "count_distinct") or (op in ("sum", "avg", "min", "max") and number):
        query = {k: v for k, v in action.items() if k != "after"}
        return {**query, "column": name}, instead
    if op == "group" and checked.agg is None and checked.by is not None:
        query = {k: v for k, v in action.items() if k != "bucket"}
        return {**query, "by": name}, f"groups of {instead}"
    if op != "count":
        return None
    if _DISTINCT.search(words):
        return {"op": "count_distinct", "column": name, **rows}, f"a count of distinct {instead}"
    bound = _one_bound(words) if number else None
    if bound is not None and not any(f.column.kind == NUMBER for f in checked.where):
        if len(checked.where) >= MAX_FILTERS:
            return None
        cmp, n = bound
        added = {"column": name, "cmp": cmp, "value": int(n) if n.is_integer() else n}
        # A text filter holding the bound's digits ("over 1000" as `contains '1000'`) compares
        # nothing: the bound on the value replaces it.
        digits = {str(added["value"]), f"{added['value']:,}"}
        kept = [
            w
            for w in action.get("where") or []
            if not (isinstance(w, dict) and str(w.get("value")) in digits)
        ]
        where = [*kept, added]
        return {
            "op": "count",
            "where": where,
        }, f"{name} {cmp} {added['value']} as the question states, added to where"
    if not how_many and _ADD_UP.search(words) is None:
        return {"op": "top", "column": name, "k": DEFAULT_K, **rows}, f"top {instead}"
    return None


def _rows_of_extreme(
    name: str, extreme: str, read: _Read, rows: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Which thing goes with the largest (smallest) value of `name`: the rows of it, and what
    they hold beside it (the column a "which" names, else a value of the shape asked, else the
    line)."""
    shaped = [
        f.name for f in read_fields(read.table or {}) if f.template in (ADDRESS_TEMPLATE, *SHAPE_TEMPLATES)
    ]
    beside = (
        read.asked_column
        if read.asked_column not in (None, name)
        else shaped[0]
        if len(shaped) == 1
        else "line"
    )
    take = "last" if extreme == "max" else "first"
    query = {"op": "rows", "columns": [beside, name], "order_by": name, "take": take, "k": 3, **rows}
    largest = "largest" if extreme == "max" else "smallest"
    return query, f"the rows of the {largest} {name}, with their {beside}"


def _which_of_quoted(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """Which thing goes with the largest (smallest) number the question's one quoted line reads
    (`spent N ms in ...`: N), where the query reads another: its rows, as for a marker's value.
    A count, a ranking by lines or a group per period told the model nothing of which line wrote
    the largest; asked "which", the rows of that line say it. None where the question writes no
    "which", asks how many, or quotes more than one number."""
    if read.quoted_number is None or _named(checked, read.quoted_number):
        return None
    words = read.words
    extreme = _extreme(words)
    if extreme is None or _HOW_MANY.search(words) or not _WHICH_THING.search(words):
        return None
    if checked.op in ("sum", "avg", "min", "max") or (checked.op == "group" and checked.agg is not None):
        return None  # a measure of another number the model chose: which number is the question's to say
    rows = {"where": action["where"]} if action.get("where") else {}
    return _rows_of_extreme(read.quoted_number, extreme, read, rows)


def _moment_asked(action: dict[str, Any], checked: Checked, words: str) -> tuple[dict[str, Any], str] | None:
    """The latest (earliest) time of the rows, where the query counts lines per period and the
    question's words ask for one of those and for no most, fewest or how many: a count per hour
    says in which hour, not when (a model answered the busiest hour's start)."""
    by = checked.by
    if checked.op != "group" or not checked.bucket or by is None or by.kind not in (TIME, DATE):
        return None
    latest, earliest = _LATEST.search(words), _EARLIEST.search(words)
    if (latest is None) == (earliest is None) or _MOST.search(words) or _FEWEST.search(words):
        return None
    if _HOW_MANY.search(words) or _AVERAGE.search(words):
        return None
    op = "max" if latest is not None else "min"
    rows = {"where": action["where"]} if action.get("where") else {}
    word = "latest" if latest is not None else "earliest"
    return {
        "op": op,
        "column": by.name,
        **rows,
    }, f"{op} of {by.name} (the {word}), not a count per {checked.bucket}"


def _onto_counted(action: dict[str, Any], checked: Checked, read: _Read) -> tuple[dict[str, Any], str] | None:
    """The query of the number the lines write with the word the question asks an amount of
    (`2364 bytes`: rlm.run.typed.fields), where it reads another: a count of rows made the sum
    of that number (the bytes a host moved are no count of its lines), its average or extreme where
    asked; a total, an average or an extreme of another column moved onto it; and which value
    has the most of it, a group by that value totalling it. A number written after its word
    (`session 12`) is often an id: "how many sessions" stays a count of rows, and "the most
    sessions" a ranking by lines. None where the query reads it, or no form of the question
    says what to compute of it."""
    if read.counted is None:
        return None
    name, amount = read.counted
    # A number the question itself quotes or marks (`finished in N s`: N) is what it asks about:
    # the number written with one of its words is not put in its place, nor read instead.
    if any(c.quoted is not None and c.kind == NUMBER and c.name != name for c in read.cols.columns):
        return None
    if _named(checked, name):
        return None
    words, op, column = read.words, checked.op, checked.column
    rows = {"where": action["where"]} if action.get("where") else {}
    was = column.name if column is not None else "a count of rows"
    instead = f"{name}, the number the lines write with the question's word, instead of {was}"
    extreme = _extreme(words)
    average = _AVERAGE.search(words) is not None and _TOTAL.search(words) is None
    how_many = _HOW_MANY.search(words) is not None
    stated = _stated_with(name, read.question)
    if op == "count" and stated is not None:
        # "over 90 seconds": the rows whose number passes it, as the question states.
        if len(checked.where) >= MAX_FILTERS:
            return None
        bound = _one_bound(words)
        if bound is not None and bound[1] == stated:
            cmp = bound[0]
        elif re.search(
            rf"\b(?:with|of|at)\s+(?:an?\s+)?{re.escape(_plain(stated))}\b", words.replace(",", "")
        ):
            cmp = "="  # "with a 500 ms timeout": that value (not "the last 10 minutes", a window)
        else:
            return None
        added = {"column": name, "cmp": cmp, "value": int(stated) if stated.is_integer() else stated}
        query = {k: v for k, v in action.items() if k != "asks"}
        return {**query, "where": [*(action.get("where") or []), added]}, (
            f"{name} {cmp} {added['value']} as the question states, added to where"
        )
    if op == "count" and not _DISTINCT.search(words) and (amount or not how_many):
        how = "avg" if average else extreme if extreme and not how_many else "sum"
        return {"op": how, "column": name, **rows}, f"{how} of {instead}"
    summed = op in ("sum", "avg", "min", "max") or (op == "group" and checked.agg is not None)
    if summed and (column is None or column.name not in read.numbers_named):
        return {**{k: v for k, v in action.items() if k != "after"}, "column": name}, instead
    ranked = checked.by if op == "group" else column if op == "top" else None
    if amount and ranked is not None and checked.agg is None and not checked.bucket and _MOST.search(words):
        query = {"op": "group", "by": ranked.name, "agg": "sum", "column": name, "k": checked.k, **rows}
        return query, f"groups of {ranked.name} by their total {name}, instead of by their lines"
    return None


def _plain(number: float) -> str:
    """A number as a question writes it: `20000`, `0.5` (never `2e+04`)."""
    return str(int(number)) if number.is_integer() else repr(number)


def _stated_with(name: str, question: str) -> float | None:
    """The number the question states in the word a counted field is named by (`20 seconds` for
    `<seconds>`, its singular or plural), if it states one."""
    word = name.strip("<>").lower()
    stem = word[:-1] if word.endswith("s") and len(word) > 3 else word
    for number, unit in stated_amounts(question):
        if unit.lower() in (word, stem, stem + "s", stem + "es"):
            return as_number(number)
    return None


def _extreme(words: str, *, of_number: bool = False) -> str | None:
    """`max` where the question's words ask for the largest of a value (not of a number of
    lines, nor of an average), `min` for the smallest; None where they ask for neither, or both.
    `of_number`: a superlative before "number of" counts too (the extreme of a value summed)."""
    if of_number:
        largest, smallest = _LARGEST_OF_ANY.search(words), _SMALLEST_OF_ANY.search(words)
    else:
        largest, smallest = _LARGEST.search(words), _SMALLEST.search(words)
    average = _AVERAGE.search(words) is not None and _TOTAL.search(words) is None
    if len(_ANY_EXTREME.findall(words)) != 1 or (largest is None) == (smallest is None) or average:
        return None
    return "max" if largest is not None else "min"


def _listing(action: dict[str, Any], checked: Checked, read: _Read) -> tuple[dict[str, Any], str] | None:
    """The values the question asks to be listed or named, where the query counts instead:

    - a bound on a number of lines the question states ("3 or more times") that a `top`, a
      `count_distinct` or a `group` counting lines leaves out becomes its `min_count`, every
      value that passes shown (k the largest), unless a filter already compares a number
      with it (a bound on a column, not on lines);
    - a count of distinct values where the question asks for their list, and not how many,
      becomes their list: a `top` of the same column and rows, every value shown;
    - where the question asks which value of one column goes with the largest (smallest) value
      of one number column it names ("which zone had the longest distance"), a count, a top, a
      group or an aggregate becomes the rows of that number's largest values, the asked column
      beside it (`rows` ordered by it);
    - a count of rows where the question asks which values of one column ("which source IP",
      `src_ip`; rlm names it only where one column fits), and not how many, a total, an average
      nor an extreme, becomes a `top` of that column over the same rows; a `top` of another
      column likewise (the syslog's host where the question asks which MAC address)."""
    words, bound = read.words, read.lines_bound
    rows = {"where": action["where"]} if action.get("where") else {}
    least = {"min_count": bound} if bound is not None else {}
    counts_lines = checked.op in ("top", "count_distinct") or (checked.op == "group" and checked.agg is None)
    compared = {as_number(str(f.value)) for f in checked.where if f.column.kind == NUMBER}
    if bound is not None and checked.min_count is None and counts_lines and not compared & {bound, bound - 1}:
        every = {"k": MAX_K} if checked.op != "count_distinct" else {}
        return {**action, **least, **every}, f"only values on at least {bound} lines (min_count {bound})"
    how_many = _HOW_MANY.search(words) is not None
    if checked.op == "count_distinct" and read.listed and not how_many:
        kept = {k: v for k, v in action.items() if k in ("column", "after", "min_count", "where")}
        name = checked.column.name if checked.column is not None else "the column"
        return {
            "op": "top",
            **kept,
            "k": MAX_K,
        }, f"the list of {name}'s values (top, k {MAX_K}), not a count of them"
    asked = read.asked_column
    named = {f.column.name for f in checked.where if f.cmp == "="}
    extreme = _extreme(words)
    measured = sorted(read.numbers_named - {asked})
    plain = not how_many and _ADD_UP.search(words) is None and _AVERAGE.search(words) is None
    if (
        asked is not None
        and extreme is not None
        and len(measured) == 1
        and plain
        and checked.op in ("count", "top", "group", "sum", "max", "min")
    ):
        by, take = measured[0], "last" if extreme == "max" else "first"
        query = {"op": "rows", "columns": [asked, by], "order_by": by, "take": take, "k": 3, **rows}
        return (
            query,
            f"the rows of the {'largest' if extreme == 'max' else 'smallest'} {by}, with their {asked}",
        )
    ranked = _ANY_EXTREME.search(words) is not None  # an extreme asked, of whatever
    if checked.op == "count" and asked is not None and asked not in named and plain and not ranked:
        k = MAX_K if read.listed or bound is not None else DEFAULT_K
        return {
            "op": "top",
            "column": asked,
            "k": k,
            **least,
            **rows,
        }, f"top {asked} instead of a count of rows"
    # A top (or a count of rows per value) of another column than the one asked for; not of a
    # quoted line's own placeholder, which is what the question quotes the line for.
    key = checked.column if checked.op == "top" else checked.by if _counts_per_value(checked) else None
    ranks_other = (
        key is not None and key.name != asked and key.quoted in (None, ADDRESS_TEMPLATE, *SHAPE_TEMPLATES)
    )
    # Not where the question names the value after a marker: that is what it asks for (_onto_marked).
    unmarked = read.marked is None and checked.after is None
    if ranks_other and asked is not None and asked not in named and unmarked and plain and not ranked:
        other = key.name if key is not None else ""
        kept = {k: v for k, v in action.items() if k in ("k", "min_count", "where")}
        every = {"k": MAX_K} if read.listed else {}
        return {
            "op": "top",
            **kept,
            "column": asked,
            **every,
        }, f"top {asked}, the values the question asks for, instead of {other}"
    # A total (an average, an extreme) per value of another column than the one asked (the
    # highest tips per borough asked, a group by payment sent): the same per value asked.
    # Not onto an amount ("which cab colour tips best": `tip` is what is measured, not a key).
    regroups = checked.op == "group" and checked.agg is not None and checked.bucket is None
    key_asked = asked is not None and (found := read.cols.named(asked)) is not None and not found.amount
    if regroups and key_asked and checked.by is not None and asked != checked.by.name and asked not in named:
        if unmarked and checked.by.quoted is None:
            return {**action, "by": asked}, (
                f"a group by {asked}, the values the question asks for, instead of by {checked.by.name}"
            )
    return None


def _said_empty(name: str, question: str) -> bool:
    """Whether the question speaks of rows whose `name` holds nothing: "an empty region",
    "a blank region field", "region is missing", "entries with no region"."""
    words = r"[\s_.-]*".join(re.escape(w) for w in re.findall(r"[^\W_]+", name))
    named = rf"(?:{re.escape(name)}|{words})(?:\s+(?:field|column|value))?"
    empty = r"(?:empty|blank|missing|null|unset)"
    said = (
        rf"\b{empty}\s+{named}(?![\w-])|(?<![\w-]){named}\s+(?:is|was|are|were|left)\s+{empty}\b"
        rf"|\b(?:ha(?:ve|s|d)|with)\s+no\s+{named}(?![\w-])|\bwithout\s+(?:an?\s+)?{named}(?![\w-])"
    )
    return re.search(said, unquoted(question), re.I) is not None


def _empty_asked(action: dict[str, Any], checked: Checked, read: _Read) -> tuple[dict[str, Any], str] | None:
    """The rows that hold no value of a column, where the question speaks of them and the query
    keeps to no such filter: their count where how many is asked, else the rows themselves,
    with the columns the question names beside them. A ranking keys on values, and a row
    without one is in none of its rows (rlm.run.typed.empties tells of them too)."""
    if checked.args is not None or checked.bucket is not None or checked.after is not None:
        return None
    said = [
        c
        for c in read.cols.columns
        if c.values is not None and EMPTY in c.values and _said_empty(c.name, read.question)
    ]
    if len(said) != 1 or any(f.column.name == said[0].name for f in checked.where):
        return None
    column = said[0]
    where = [*(action.get("where") or []), {"column": column.name, "cmp": "=", "value": EMPTY}]
    if len(where) > MAX_FILTERS:
        return None
    if _HOW_MANY.search(read.words):
        return {"op": "count", "where": where}, f"a count of the rows whose {column.name} is empty"
    # What the question names beside them (`iso_code` of "list their iso_code"), else the first text column.
    # Named literally first ("alpha-2"); not a column the empty one's own name names ("region"
    # of "sub-region").
    text = unquoted(read.question)
    said_words = {singular(w) for w in re.findall(r"[^\W_]+", text)}
    own = set(name_words(column.name))
    named = [
        c.name
        for c in read.cols.columns
        if c.name not in (column.name, "line", "line_no")
        and c.quoted is None
        and said_words >= set(name_words(c.name))
        and not own >= set(name_words(c.name))
    ]
    literal = [n for n in named if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text, re.I)]
    first_text = (c.name for c in read.cols.columns if c.kind == TEXT and c.name not in ("line", column.name))
    shown = [*literal, *(n for n in named if n not in literal)] or [next(first_text, "line_no")]
    return {"op": "rows", "columns": shown[:3], "where": where, "k": MAX_K}, (
        f"the rows whose {column.name} is empty, with their {', '.join(shown[:3])}"
    )


# "the value after 'took'", "the figure following 'elapsed'": a number read after a quoted text.
_NUMBER_AFTER = re.compile(
    r"\b(?:number|value|figure|amount|integer)s?\s+(?:that\s+|which\s+)?(?:comes?\s+after|follow(?:s|ing)?"
    r"|written\s+after|right\s+after|after)\s+(?:the\s+(?:text|words?|phrase)\s+)?(['\"])([^'\"]{1,60})\1",
    re.I,
)


def _number_after_quoted(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """A total (an average, an extreme) of the number the question says follows a quoted text,
    where the query computes none of it: the same rows, the measure of the number read after
    that text in the line. Told of the number, a small model counted the lines that hold it."""
    m = _NUMBER_AFTER.search(read.question)
    line = read.cols.named("line")
    if m is None or line is None or checked.after is not None or checked.args is not None:
        return None
    words = read.words
    op = (
        "avg"
        if _AVERAGE.search(words)
        else "sum"
        if _TOTAL.search(words) or _ADD_UP.search(words)
        else _extreme(words)
    )
    if op is None or (checked.op == op and checked.column is not None and checked.column.name != "line"):
        return None
    after = m.group(2).strip()
    rows = {"where": action["where"]} if action.get("where") else {}
    if read.marked is not None and read.marked[1]:  # the value after that marker, offered as a column
        if checked.column is not None and checked.column.name == read.marked[0]:
            return None
        return {"op": op, "column": read.marked[0], **rows}, f"the {op} of {read.marked[0]}, rows kept"
    return {"op": op, "column": "line", "after": after + " ", **rows}, (
        f"the {op} of the number after {after!r} in each line, rows kept"
    )


# A number of lines written as a word ("at least five times"); one is no bound.
_COUNT_WORDS = dict(
    zip(
        "two three four five six seven eight nine ten eleven twelve".split() + ["fifteen", "twenty"],
        [*range(2, 13), 15, 20],
        strict=True,
    )
)


def _min_count_unstated(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """A `min_count` of a number the question writes nowhere: dropped, the rest kept. A small
    model made one up ("min_count": 50) and every value was left out of the ranking asked."""
    if checked.min_count is None or checked.min_count <= 1 or read.lines_bound is not None:
        return None
    text = read.question.replace(",", "").lower()
    written = {as_number(n) for n in re.findall(r"\d+(?:\.\d+)?", text)}
    written |= {float(n) for word, n in _COUNT_WORDS.items() if re.search(rf"\b{word}\b", text)}
    if float(checked.min_count) in written:
        return None
    return {k: v for k, v in action.items() if k != "min_count"}, (
        f"no min_count: the question states no {checked.min_count} lines a value must be on"
    )


def _counts_per_value(checked: Checked) -> bool:
    """Whether a `group` counts the rows of each value of a column (no total, no period)."""
    return checked.op == "group" and checked.by is not None and checked.agg is None and not checked.bucket


def _stated_bounds(action: dict[str, Any], checked: Checked, words: str) -> tuple[dict[str, Any], str] | None:
    """The model's filters with the comparison the question states for each bound's number
    (`>= N` for "N or more" where the model wrote `> N`; `!= N` for "other than N" where it wrote
    `> N` or `= N`), and what changed; None when every
    bound already compares as stated, or the question states a number two ways."""
    stated: dict[float, set[str]] = {}
    for pattern, cmp in STATED:
        for m in pattern.finditer(words):
            number = next((as_number(g) for g in m.groups() if g), None)
            if number is not None:
                stated.setdefault(number, set()).add(cmp)
                words = words.replace(m.group(0), " ")  # "at least N" is not read again as "N or ..."
    bounds = _LOWER | _UPPER
    wanted = {}
    for i, f in enumerate(checked.where):
        value = as_number(f.value) if f.column.kind == NUMBER and f.cmp in {*bounds, "="} else None
        cmps = stated.get(value) if value is not None else None
        # An `=` is changed only to the `!=` stated: "at least 3" may be written as its rows' `= 3`.
        turned = f.cmp != "=" or cmps == {"!="}
        if cmps is not None and len(cmps) == 1 and (cmp := next(iter(cmps))) != f.cmp and turned:
            wanted[i] = cmp
    where = action.get("where")
    if not wanted or not isinstance(where, list) or len(where) != len(checked.where):
        return None
    fixed = [
        {**w, "cmp": wanted[i]} if i in wanted and isinstance(w, dict) else w for i, w in enumerate(where)
    ]
    change = "; ".join(
        f"{checked.where[i].column.name} {cmp} {shown_value(checked.where[i].value)} as the question states, "
        f"instead of {checked.where[i].cmp}"
        for i, cmp in wanted.items()
    )
    return {**action, "where": fixed}, change


# Words that compare or bound a number stated after a name ("pid after 400", "port up to 1024"):
# the number is then no value the rows must equal.
_BOUNDING = re.compile(
    r"\b(?:more|less|fewer|higher|lower|above|below|over|under|greater|larger|smaller|bigger|least|most|"
    r"exceed\w*|beyond|past|after|before|since|until|till|up|to|from|between|within|outside|other|"
    r"except|but|not|than|range|top|last|first|min\w*|max\w*)\b",
    re.I,
)


# What after a number leaves a range open ("8443 and above", "22+", "1000 onwards").
_OPEN_END = re.compile(
    r"\s*(?:\+|(?:and|or)\s+(?:above|up|higher|more|over|greater|beyond|later|below|under|lower|less|"
    r"fewer|earlier|down)\b|onwards?\b|upwards?\b|plus\b)",
    re.I,
)


def _equal_as_named(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """A bound (`port > 8443`) on a number the question writes right after the column's name
    ("port 8443", "process 4242") with no word that compares or bounds it: the rows of that
    value, `=`: the rows above it are none of those asked about."""
    text = unquoted(read.question)
    where = action.get("where")
    if not isinstance(where, list) or len(where) != len(checked.where):
        return None
    compared = {  # the numbers the question compares ("8443 or higher"): bounds, as they are
        n
        for pattern, _ in STATED
        for m in pattern.finditer(text)
        for g in m.groups()
        if g and (n := as_number(g)) is not None
    }
    wanted = {}
    for i, f in enumerate(checked.where):
        number = as_number(f.value) if f.column.kind == NUMBER and f.cmp in _LOWER | _UPPER else None
        if number is None or f.column.quoted is not None or number in compared:
            continue
        words = "|".join(re.escape(w) for w in {f.column.name, *name_words(f.column.name)} if len(w) >= 2)
        written = re.escape(_plain(number))
        named = re.search(
            rf"\b(?:{words})(?:e?s)?\s*(?:[:=#]\s*|no\.?\s*|number\s+)?{written}(?![\d.,]\d)", text, re.I
        )
        # The one word before the name: "between port 22 and ...", "after pid 400".
        before = " ".join(text[: named.start()].split()[-1:]) if named is not None else ""
        after = text[named.end() : named.end() + 24] if named is not None else ""
        if (
            named is not None
            and not _BOUNDING.search(before)
            and not _OPEN_END.match(after)
            and len(re.findall(rf"(?<![\d.]){written}(?![\d])", text)) == 1
        ):
            wanted[i] = f
    if not wanted:
        return None
    fixed = [{**w, "cmp": "="} if i in wanted and isinstance(w, dict) else w for i, w in enumerate(where)]
    change = "; ".join(
        f"{f.column.name} = {shown_value(f.value)}, the value the question names, instead of {f.cmp}"
        for f in wanted.values()
    )
    return {**action, "where": fixed}, change


def _window_as_stated(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """The query's filters on the time column replaced by the window the question states, where
    they differ from it (`ts < '03:44:59'` for "from 03:15:00 to 03:44:59": its last second
    left out); None where the query has no such filter (rlm.run.typed.window adds one), or they
    are the window already."""
    times = [f for f in checked.where if f.column.kind in (TIME, DATE)]
    written = {
        id(f): str(getattr(f.value, "text", f.value)) for f in checked.where
    }  # a Moment: as the model wrote it
    days = {date.fromisoformat(written[id(f)][:10]) for f in times if _ISO_DAY.match(written[id(f)])}
    # Two clocks and no date: on the one date the query's own filters are on.
    if read.table is None:
        return None
    # An example's date and hours ("e.g. 2 March 2016 08:00-08:59") state no window.
    window = table_window(without_examples(read.question), read.table, days.pop() if len(days) == 1 else None)
    if window is None:
        return None
    names = {name for name, _, _ in window}
    on_time = [f for f in checked.where if f.column.name in names]
    added = [{"column": name, "cmp": cmp, "value": value} for name, cmp, value in window]
    try:  # compared as the table reads them: a zone written or not, the same time
        as_read = check_action({"op": "count", "where": added}, read.cols).where
    except Problem:
        return None
    # `!=` on an end of the stated range is that range misread (both ends "!=" came back for a
    # "between"); `!=` on another time is a condition of its own, and the query is left alone.
    ends = {f.value for f in as_read} | {value for _, _, value in window}
    if not on_time or any(
        f.cmp not in (*_LOWER, *_UPPER, "=")
        and not (f.cmp == "!=" and (f.value in ends or written[id(f)] in ends))
        for f in on_time
    ):
        return None
    if {(f.cmp, f.value) for f in on_time} == {(f.cmp, f.value) for f in as_read}:
        return None
    where = [w for w in action.get("where") or [] if not (isinstance(w, dict) and w.get("column") in names)]
    if len(where) + len(window) > MAX_FILTERS:
        return None
    told = " and ".join(f"{name} {cmp} {value!r}" for name, cmp, value in window)
    sent = " and ".join(f"{f.column.name} {f.cmp} {written[id(f)]!r}" for f in on_time)
    return {**action, "where": [*where, *added]}, f"{told} as the question states, instead of {sent}"


def _bounds_left_out(
    action: dict[str, Any], checked: Checked, read: _Read
) -> tuple[dict[str, Any], str] | None:
    """The bounds the question states beside a number column's name that the query has no filter
    on, added to its filters; where it asks how many and the query sums that column, the count
    of the rows within them (a count of the trips with 3 or more riders is no total of riders).
    None where there is none, or no room."""
    filtered = {f.column.name for f in checked.where}
    missing = [(c, cmp, n) for c, cmp, n in read.column_bounds if c not in filtered]
    where = list(action.get("where") or [])
    if not missing or len(where) + len(missing) > MAX_FILTERS:
        return None
    added = [{"column": c, "cmp": cmp, "value": int(n) if n.is_integer() else n} for c, cmp, n in missing]
    said = "; ".join(f"{f['column']} {f['cmp']} {f['value']}" for f in added)
    summed = checked.column.name if checked.op == "sum" and checked.column is not None else None
    if summed in {c for c, _, _ in missing} and _HOW_MANY.search(read.words):
        return {
            "op": "count",
            "where": [*where, *added],
        }, f"a count of the rows where {said}, not a sum of {summed}"
    return {**action, "where": [*where, *added]}, f"{said} as the question states, added to where"


def _listed(question: str) -> bool:
    """Whether the question asks for a list (its quotes aside: "one per line" names no column `line`)."""
    return _LIST.search(unquoted(question)) is not None


def _numbers_named(question: str, table: dict[str, Any]) -> set[str]:
    """The table's number columns the question names, outside its quotes: by the name as it is
    written, or by all of its two or more words in any order ("idle connections" names
    `connections.idle`)."""
    text = unquoted(question)
    said = {singular(w) for w in re.findall(r"[^\W_]+", text)}
    return {
        n
        for n in table_columns(table).names(NUMBER)
        if re.search(rf"(?<![\w.]){re.escape(n)}{_NAME_ENDS}", text, re.I)
        or (len(words := name_words(n)) >= 2 and all(w in said for w in words))
    }


def _read(question: str, table: dict[str, Any]) -> _Read:
    cols = table_columns(table)
    numbers = frozenset(_numbers_named(question, table))
    text = unquoted(question)
    fields = read_fields(table)
    marked = [(f.name, f.number) for f in fields if f.marked]
    counted = [(f.name, f.template.startswith("N ")) for f in fields if f.counted]
    quoted = [
        f.name
        for f in fields
        if f.number and not (f.marked or f.counted) and f.template not in (ADDRESS_TEMPLATE, *SHAPE_TEMPLATES)
    ]
    return _Read(
        _words(question, table),
        _listed(question),
        numbers,
        asked_column(question, table, cols),
        lines_bound(text, cols),
        column_bounds(text, cols),
        cols,
        marked[0] if len(marked) == 1 else None,
        counted[0] if len(counted) == 1 else None,
        table,
        question,
        quoted[0] if len(quoted) == 1 and not marked else None,
    )


def _measured(sent: tuple[dict[str, Any], Checked], read: _Read) -> tuple[dict[str, Any], str] | None:
    """The query the question's words ask for instead of the one sent, its `asks` said anew."""
    asked = _asked(*sent, read)
    if asked is None:
        return None
    query, change = asked
    query = {k: v for k, v in query.items() if k != "asks"}
    return {"asks": ASKS[query["op"]], **query}, change


def with_asked_measure(
    question: str, content: str | None, table: dict[str, Any]
) -> tuple[dict[str, Any], str] | None:
    """The typed query in `content` computing what the question's words ask for, and what
    changed (`avg instead of sum`); None when it already does, or they do not say."""
    sent = checked_query(content, table)
    return _measured(sent, _read(question, table)) if sent is not None else None


def _starts_as_stated(
    action: dict[str, Any], checked: Checked, question: str
) -> tuple[dict[str, Any], str] | None:
    """A `contains` filter whose text the question says a value begins with ("the text starts
    with 'Backup'") made `starts_with`: a line that holds the text further on
    (a summary that repeats it) is not one the question counts. None where there is none."""
    where = action.get("where")
    if not isinstance(where, list) or len(where) != len(checked.where):
        return None
    changed = []
    for i, f in enumerate(checked.where):
        text = str(f.value)
        said = rf"\b(?:begins?|began|starts?|started|beginning|starting)\s+with\s+['\"“]?{re.escape(text)}"
        if f.cmp == "contains" and text.strip() and re.search(said, question, re.IGNORECASE):
            changed.append(i)
    if not changed:
        return None
    fixed = [
        {**w, "cmp": "starts_with"} if i in changed and isinstance(w, dict) else w
        for i, w in enumerate(where)
    ]
    said = "; ".join(
        f"{checked.where[i].column.name} starts_with {str(checked.where[i].value)!r}" for i in changed
    )
    return {**action, "where": fixed}, f"{said} as the question states, instead of contains"


def _bucket_as_asked(checked: Checked, question: str) -> str | None:
    """The period of the time form the question asks its answer in (`HH:MM`: minute, `YYYY-MM-DD
    HH`: hour, `Mon D`: day), where a group per period of a time column counts per another one;
    None where it asks none, a second (no period), or the group already counts per it."""
    asked = asked_parts(question)
    if checked.op != "group" or checked.bucket not in PERIODS or checked.by is None or asked is None:
        return None
    if checked.by.kind != TIME or "second" in asked[1]:
        return None
    finest = next((p for p in PERIODS if p in asked[1]), None)
    return finest if finest is not None and finest != checked.bucket else None


# An hour of any day asked, not each day's hours apart: "by hour of day", "from 0 to 23".
_HOUR_OF_DAY = re.compile(r"\bhours?\s+of\s+(?:the\s+|a\s+)?day\b|(?<![\d:])0?0\s*(?:-|–|to)\s*23\b", re.I)
# Whole lines asked for as the values: "distinct lines", "the most repeated message".
_WHOLE_LINES = re.compile(
    r"\b(?:distinct|unique|different|identical|duplicate[sd]?|repeated)\s+(?:\w+\s+)?(?:lines?|messages?|entries|rows?)\b"
    r"|\b(?:lines?|messages?|entries|rows?)\s+(?:that\s+are\s+|are\s+)?(?:repeated|duplicated|identical)",
    re.I,
)
_DISTINCT = re.compile(r"\b(?:distinct|unique|different)\b", re.I)
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"
_COMPARED = re.compile(
    rf"\b(?:greater|more|larger|higher|bigger|less|fewer|smaller|lower)\s+than\s+{_NUMBER}"
    rf"|\b(?:over|above|below|under|exceeding|at\s+least|at\s+most)\s+{_NUMBER}",
    re.I,
)


def _told_only(checked: Checked, read: _Read) -> list[str]:
    """What the query computes other than the question asks, where rlm cannot say the right query."""
    words, listed, numbers_named = read.words, read.listed, read.numbers_named
    found = []
    if checked.op == "count" and _DISTINCT.search(words):
        found.append("a count of distinct values, not of rows")
    counts_rows = checked.op in ("count", "top") or (checked.op == "group" and checked.agg in (None, "count"))
    if counts_rows and not _HOW_MANY.search(words):
        extreme = _LARGEST.search(words) or _SMALLEST.search(words)
        bounded = checked.op == "count" and any(f.column.kind == NUMBER for f in checked.where)
        wanted = (
            "a total of a value"
            if _ADD_UP.search(words) or (numbers_named and _TOTAL.search(words))
            else "an average of a value"
            if _AVERAGE.search(words)
            else f"the {extreme.group(0).lower()} value"
            if extreme and not bounded
            else "a list of values"
            if listed and checked.op == "count"
            else None
        )
        if wanted is not None:
            found.append(f"{wanted}, not a count of rows")
    # (A top of whole lines, each on one, is in doubt by its rows: rlm.run.typed.matched.)
    whole = checked.column if checked.op == "count_distinct" and checked.after is None else None
    if whole is not None and whole.name == "line" and not _WHOLE_LINES.search(unquoted(read.question)):
        found.append(
            "values written inside the lines, not whole lines (each line's own time and ids set it "
            'apart): "after" reads the value written just after a text'
        )
    compared = {n.replace(",", "") for m in _COMPARED.finditer(words) for n in m.groups() if n}
    texts = {
        str(f.value).strip().replace(",", "") for f in checked.where if f.cmp in ("contains", "starts_with")
    }
    found += [f"a comparison with {n}, not text holding '{n}'" for n in sorted(compared & texts)]
    return found


def measure_left_out(question: str, content: str | None, table: dict[str, Any]) -> list[str]:
    """What the question's words ask the query in `content` to compute instead (a query sent
    again as written after rlm changed it, as `avg instead of sum`; a count of rows where
    distinct values are asked): [] when nothing."""
    sent = checked_query(content, table)
    if sent is None:
        return []
    read = _read(question, table)  # once: the question's words are read against the table's names
    changed, told = _measured(sent, read), _told_only(sent[1], read)
    if changed is not None:  # the change names the list it makes
        told = [t for t in told if not t.startswith("a list of values")]
    return ([changed[1]] if changed is not None else []) + told
