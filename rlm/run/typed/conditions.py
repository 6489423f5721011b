"""The conditions a question names that a typed query leaves out.

A small model's commonest wrong answer is a right query of the wrong rows: it counts the
distinct clients of the whole log when the question asked for those sent a 404, or sums a
column over every row when it asked for one kind. Such an answer is grounded (its figure is
in what the query printed), so grounding alone lets it through.

What is checked depends on the table alone, never on the question's wording: a value of a
column whose whole set of values the table lists (a status, a level, a kind, a region) that
the question states as a word, in a query that neither filters on that column nor names the
value in any filter, nor ranks or groups by that column (there the question may name the
values it compares). A value the question joins by "or" to a word that is no value of its
column ("local or remote clients") is one of two ways it keeps both of: no condition.

A time the question states (a date, a clock) is a condition too where the table has a time
column and the query neither filters, groups nor orders on one: it is told and in doubt. It is
added only where the question states both sides of a window, or a whole day
(rlm.run.typed.window); one side alone is the question's to say (after it, or from it).

Where such a condition is plain (its value listed by one column only, or by several of which
the question's words name one, no negation just before it, room for the filter), rlm adds it
to the query before it runs (`with_conditions`): a small model told of the filter answered
from the rows it had, without running the query again. The model is told what was added and
that sending the same action again runs it as written. A value the question leaves out by a
word of exclusion just before it ("other than Queens", "excluding the 404s", "not WARN") is
added as `!=`: the rows of every other value. Where
it is not plain, the model is told (it may add the filter); a final answer given after such a
query, and not after a later one without it, carries the doubt to the run's result, where
`--strict` withholds it.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Checked, Problem, check_action
from rlm.run.typed.columns import DATE, TEXT, TIME, Column, TableColumns, table_columns
from rlm.run.typed.compile import read_json
from rlm.run.typed.examples_given import without_examples
from rlm.run.typed.placeholders import quoted_texts
from rlm.run.typed.vocabulary import MAX_FILTERS, TEXT_MATCHES

__all__ = ["excluded", "left_out", "negated", "said_filter", "unstated", "with_conditions"]

# Values that stand for no condition when a question states them ("answer yes or no").
_NOT_CONDITIONS = frozenset({"yes", "no", "true", "false", "none", "null", "n/a", "unknown", "other", "all"})
# Letters a question's word and a column name's word share at their start to name the same
# thing ("picked" and "pickup", "dropped" and "dropoff"): four, so that `src`/`dst` never do.
_STEM = 4
_MAX_NAMED = 3  # conditions told at once: more would be noise in the model's next prompt
# Words that turn a value stated just after them into a condition to leave out, not to keep.
_NEGATIONS = (
    r"not|no|non|never|nor|neither|without|except|excluding|exclude|excludes|besides|"
    r"other\s+than|apart\s+from|aside\s+from|rather\s+than|instead\s+of|isn't|aren't|wasn't|weren't"
)

# Words before a value that keep every row but its own ("other than Queens"): a `!=` filter.
_EXCLUDING = (
    r"not|non|except(?:\s+for)?|excluding|exclude|excludes|besides|other\s+than|apart\s+from|aside\s+from|"
    r"rather\s+than|instead\s+of"
)

# A date, a date and a clock, or a clock alone, as a question states a time ("after 14:02").
_TIME_STATED = re.compile(
    r"(?<![\w:.-])(?:\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}:\d{2}(?::\d{2})?)(?![\w:])"
)
_EXAMPLE = re.compile(r"\b(?:e\.g\.|eg|for example|for instance|such as|like)\W{0,3}$", re.IGNORECASE)


def left_out(question: str, content: str | None, table: dict[str, Any]) -> list[str]:
    """Each condition (`column = value`) the question names that the typed action in `content`
    leaves out; [] for an action that is not a query, or that could not be read. The examples it
    gives state none (rlm.run.typed.examples_given)."""
    question = without_examples(question)
    cols = table_columns(table)
    try:
        checked = check_action(read_json(content), cols)
    except Problem:
        return []
    named = [
        _said(column, value, "!=" if excluded(question, text) else "=")
        for text, column, value in _missing(question, checked, cols)[:_MAX_NAMED]
    ]
    return named + _times_left_out(question, checked, cols)


def unstated(question: str, content: str | None, table: dict[str, Any], found: set[str]) -> list[str]:
    """Each `=` or `!=` filter of the typed action in `content` on a text value that the question
    states in no way (`user = 'root'`, `level != 'INFO'` where no word of it begins as a word of
    the value does), nor an earlier query found (`found`: a second step filters on it): a
    condition the model made up, which keeps only those rows (or leaves them out: a `!=` on a
    level no question named kept no line of the kind asked). [] for an action that is not a query.

    A word stands for a value's word where it begins as that word does, its last two letters
    aside ("failures" for `failed_password`, "warnings" for `WARN`); a quote or an example states
    a value as plainly as the question's own words. An address, or another value of three digits
    or more between separators and no word (`83.149.9.216`), is stated only where the question writes it (a model had added the
    log's first address to a count of one hour); a number, and a code of few digits, are left
    alone: they are compared, not named."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return []
    if checked.args is not None:
        return []
    words = question.casefold()
    out = []
    for f in checked.where:
        if (
            f.cmp not in ("=", "!=")
            or f.column.kind != TEXT
            or not isinstance(f.value, str)
            or f.value in found
        ):
            continue
        parts = [p for p in re.split(r"[^0-9a-z]+", f.value.casefold()) if len(p) >= 3 and not p.isdigit()]
        stems = [p[: max(3, len(p) - 2)] for p in parts]
        if stems and not any(re.search(rf"(?<![0-9a-z]){re.escape(s)}", words) for s in stems):
            out.append(f"{f.column.name} {f.cmp} {f.value!r}")
        elif not stems and _an_id(f.value) and f.value.casefold() not in words:
            out.append(f"{f.column.name} {f.cmp} {f.value!r}")
    return out


def said_filter(f: dict[str, Any]) -> str:
    """A filter as sent, in the words `unstated` names it with: `program = 'sshd'`."""
    return f"{f.get('column')} {f.get('cmp')} {f.get('value')!r}"


def _an_id(value: str) -> bool:
    """Whether a text value with no word in it is an address or another run of three digits or
    more between separators (`83.149.9.216`, `4.5-12`), not a number alone: a question names one
    only by writing it."""
    return sum(ch.isdigit() for ch in value) >= 3 and not value.strip().isdigit()


def _times_left_out(question: str, checked: Checked, cols: TableColumns) -> list[str]:
    """`ts at 2016-03-02 08:00 and 09:30`: the times the question states (a date, a clock),
    when the table has a time and the query neither filters, groups nor orders on one. A time
    in a quoted line, or given as an example of a form ("e.g. 15:16:01"), is no condition."""
    times = [c for c in cols.columns if c.kind in (TIME, DATE)]
    if checked.args is not None or not times:
        return []
    used = [f.column for f in checked.where] + [
        c for c in (checked.by, checked.order_by, checked.column) if c
    ]
    if checked.bucket is not None or any(c.kind in (TIME, DATE) for c in used):
        return []
    text = question
    for quote in quoted_texts(question):
        text = text.replace(quote, " ")
    stated = [m.group(0) for m in _TIME_STATED.finditer(text) if not _EXAMPLE.search(text[: m.start()])]
    return [f"{times[0].name} at {' and '.join(dict.fromkeys(stated))}"] if stated else []


def with_conditions(
    question: str, content: str | None, table: dict[str, Any]
) -> tuple[dict[str, Any], list[str]] | None:
    """The typed action in `content` with a `=` filter added for each condition the question
    names that it leaves out, and those conditions (`column = value`); None when there is none,
    or when any of them is not plain enough to add unasked: its value is listed by two columns
    and no word of the question names one of them (_named_column: a pickup or a dropoff
    borough), a negation that is no exclusion comes just before it ("without any Queens";
    "other than Queens" adds `!=`: excluded), "or" joins another value
    of its column to it ("ERROR or WARN"), or the filters would be more than an action takes."""
    cols = table_columns(table)
    try:
        action = read_json(content)
        checked = check_action(action, cols)
    except Problem:
        return None
    missing = _missing(question, checked, cols)
    where = list(action.get("where") or [])
    if not missing or len(where) + len(missing) > MAX_FILTERS:
        return None
    chosen: list[tuple[Column, Any, str]] = []
    for text, column, _ in missing:
        said = _spoken(text)
        listing = [c for c in cols.columns if c.values and any(_spoken(str(v)) == said for v in c.values)]
        named = _named_column(question, text, listing) if len(listing) > 1 else column
        # "other than X" keeps the rows of every other value; a looser negation says too little.
        cmp = "!=" if excluded(question, text) else "="
        if (
            named is None
            or (negated(question, text) and cmp == "=")
            or named.name in _filtered(where, chosen)
        ):
            return None
        if _one_of_several(question, text, named):
            return None
        chosen.append((named, next(v for v in named.values or () if _spoken(str(v)) == said), cmp))
    where += [{"column": column.name, "cmp": cmp, "value": value} for column, value, cmp in chosen]
    amended = {**action, "where": where}
    try:
        check_action(amended, cols)
    except Problem:
        return None
    return amended, [_said(column, value, cmp) for column, value, cmp in chosen]


def _filtered(where: list[Any], chosen: list[tuple[Column, Any, str]]) -> set[str]:
    """The columns a query's filters, and the conditions chosen so far, are on."""
    return {str(f.get("column")) for f in where if isinstance(f, dict)} | {c.name for c, _, _ in chosen}


def _named_column(question: str, text: str, listing: list[Column]) -> Column | None:
    """Of the columns that list a value the question states, the one its words name nearest
    the value: the closest word before it (else after it) whose first letters are those of a
    word in that column's name and in no other's (`picked up in Queens`: `pickup_borough`, not
    `dropoff_borough`); None when no word tells them apart. The question's words are read
    against the table's names, never as particular phrases."""
    stated = re.search(_stated(text), question, re.IGNORECASE)
    if stated is None:
        return None
    stems = {c.name: {w[:_STEM] for w in _name_words(c.name)} for c in listing}
    shared = set.intersection(*stems.values())
    own = {c.name: stems[c.name] - shared for c in listing}
    words = list(re.finditer(rf"[A-Za-z]{{{_STEM},}}", question))
    before = [m for m in reversed(words) if m.end() <= stated.start()]  # the nearest first
    after = [m for m in words if m.start() >= stated.end()]
    for word in [*before, *after]:
        naming = [c for c in listing if word[0][:_STEM].casefold() in own[c.name]]
        if len(naming) == 1:
            return naming[0]
    return None


def _name_words(name: str) -> list[str]:
    """The words of a column's name (`pickup_borough`, `pickupBorough`: pickup, borough),
    lower case, those of _STEM letters or more."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)
    return [w.casefold() for w in re.split(r"[^A-Za-z]+", spaced) if len(w) >= _STEM]


def _missing(question: str, checked: Checked, cols: TableColumns) -> list[tuple[str, Column, Any]]:
    """(the value as text, its column, the value) of each condition the question names that the
    query leaves out, the longest first; [] for an action that is not a query."""
    if checked.args is not None:  # grep, peek, final: not a query of the table's rows
        return []
    # A quoted text the query holds to (a filter on a piece of it, or a value read from it:
    # rlm.run.typed.fields) is the condition as the question wrote it: a value the quote itself
    # says is not one more to add (the parse's event for a quoted message may be narrower).
    for quote in quoted_texts(question):
        if _holds_to(quote, checked):
            question = question.replace(quote, " ")
    filtered = {f.column.name for f in checked.where}
    # A filter's text read as the question is: a value's `_` as a space.
    filter_text = " ".join(_spoken(str(getattr(f.value, "text", f.value))) for f in checked.where)
    keyed = {c.name for c in (checked.by, checked.column) if c is not None and checked.op in ("top", "group")}
    found: list[tuple[str, Column, Any]] = []
    for column in cols.columns:
        if column.values is None or column.name in filtered or column.name in keyed:
            continue
        for value in column.values:
            text = str(value)
            if (
                _condition_like(text)
                and _spoken(text) not in filter_text
                and _states(question, text)
                and not _inside_a_name(question, text)
                and not _either(question, text, column)
            ):
                found.append((text, column, value))
    # The longest first, and none inside one kept: "Central Asia" names a sub-region, not Asia.
    kept: list[tuple[str, Column, Any]] = []
    for text, column, value in sorted(found, key=lambda f: -len(f[0])):
        if all(text.casefold() not in k.casefold() for k, _, _ in kept) and column not in (
            c for _, c, _ in kept
        ):
            kept.append((text, column, value))
    return kept


def _or_joined(question: str, text: str) -> list[str]:
    """The words the question joins to a statement of `text` by "or" ("local or remote clients":
    `local`; "ERROR or WARN": `WARN`), as it would say them."""
    word = r"(\w[\w-]*)"
    the = r"(?:an?\s+|the\s+)?"
    joined = rf"{word}\s+(?:or|and/or|nor)\s+{the}{_stated(text)}|{_stated(text)}\s+(?:or|and/or|nor)\s+{the}{word}"
    return [_spoken(m.group(1) or m.group(2)) for m in re.finditer(joined, question, re.IGNORECASE)]


def _either(question: str, text: str, column: Column) -> bool:
    """Whether the question states `text` only as one of two ways a thing may be, the other no
    value of its column ("local or remote clients", "failed or not"): it keeps both, and names no
    condition."""
    others = _or_joined(question, text)
    values = {_spoken(str(v)) for v in column.values or ()}
    return bool(others) and not values & set(others)


def _one_of_several(question: str, text: str, column: Column) -> bool:
    """Whether the question states `text` beside another of its column's values by "or" ("ERROR
    or WARN lines"): a condition on both, which one `=` filter is not."""
    values = {_spoken(str(v)) for v in column.values or ()}
    return bool(values & set(_or_joined(question, text)))


def _holds_to(quote: str, checked: Checked) -> bool:
    """Whether the query reads a value of the quoted text, or filters its lines on a piece of it."""
    used = (checked.column, checked.by, checked.order_by, *checked.columns)
    if any(c is not None and c.quoted == quote for c in used):
        return True
    pieces = [str(f.value).casefold() for f in checked.where if f.cmp in TEXT_MATCHES]
    return any(piece and piece in quote.casefold() for piece in pieces)


def _spoken(text: str) -> str:
    """A value as a question would say it: any case, a `_` as a space."""
    return text.casefold().replace("_", " ")


def _condition_like(text: str) -> bool:
    """A value a question would state as a condition: a word or code of three characters or
    more, or a number of three digits or more (a status); not 2 (a count) nor `yes`."""
    if len(text) < 3 or text.casefold() in _NOT_CONDITIONS:
        return False
    return any(ch.isalpha() for ch in text) or (text.isdigit() and int(text) >= 100)


def _stated(text: str) -> str:
    """The pattern of `text` stated as a whole word (a plural `404s` counts; a `_` read as a
    space or an underscore: `failed_password` is stated by "failed password"). A word's value
    is stated by the first half of a hyphenated compound too ("green-taxi trips" states
    `green`), unless the second half takes it back ("error-free", "password-less"); a value
    ending in a digit is not (`2015` is no statement of "2015-05-17")."""
    words = r"[\s_]+".join(re.escape(w) for w in text.split("_") if w)
    compound = r"|-(?:free|less)\b" if text[-1:].isalpha() else "|-"
    return rf"(?<![\w.-]){words}s?(?!\w{compound}|-\d|\.\w)"


def _states(question: str, text: str) -> bool:
    """Whether the question states `text` as a whole word, in any case."""
    return re.search(_stated(text), question, re.IGNORECASE) is not None


def _inside_a_name(question: str, text: str) -> bool:
    """Whether a value written as a name (`Asia`, `Queens`) is stated only as part of a longer
    one: a capitalised word right before it, not the sentence's first, or right after it ("the
    Central Asia sub-region" states no region `Asia`). A value in capitals (`ERROR`, `GET`) or
    lower case is a name of nothing else."""
    if re.fullmatch(r"[A-Z][a-z]+(?:[ _][A-Za-z][a-z]*)*", text) is None:
        return False
    question = re.sub(r"[\"'`‘’“”]", "", question)  # a quote round the name: 'Central Asia'
    found = list(re.finditer(_stated(text), question, re.IGNORECASE))
    return bool(found) and all(
        re.search(r"(?<=[^.?!:\s]\s)[A-Z][a-z]+\s$", question[: m.start()]) is not None
        or re.match(r"\s[A-Z][a-z]+\b", question[m.end() :]) is not None
        for m in found
    )


def negated(question: str, text: str) -> bool:
    """Whether a negation comes within three words before a statement of `text`: "not from
    Queens", "other than green ones", "excluding the 404s"."""
    before = rf"\b(?:{_NEGATIONS})\b(?:\W+\w+){{0,3}}?\W+"
    return re.search(before + _stated(text), question, re.IGNORECASE) is not None


def excluded(question: str, text: str) -> bool:
    """Whether the question states `text` as the one value to leave out: a word of exclusion
    right before it, at most one word between ("other than Queens", "excluding the 404s", "not
    from Queens"). "No", "never" or "without" a few words before say less (whether any exists,
    how often): those are negated, not excluded."""
    before = rf"\b(?:{_EXCLUDING})\b(?:\W+\w+)?\W+"
    return re.search(before + _stated(text), question, re.IGNORECASE) is not None


def _said(column: Column, value: Any, cmp: str = "=") -> str:
    shown = repr(value) if isinstance(value, str) else str(value)
    return f"{column.name} {cmp} {shown}"
