"""A text the question quotes, as the condition on raw lines that a typed query leaves out.

Questions about logs name the lines they mean by quoting them: a message, or its fixed words
with placeholders for what varies (`<ip>`, `N`, `...`). A small model's query often ranks or
totals over every line instead, and its figure is grounded all the same.

What is taken depends on the question's quoting and the file, never on particular words: the
one text the question quotes (two or more may be alternatives or a comparison: none is taken;
a marker beside another quote, `the 'elapsed:' values`, says where a value is read, and is not
counted: rlm.run.typed.markers),
that is not a column's name nor a value a column lists (rlm.run.typed.conditions has those),
with no negation just before it; of a quote with placeholders, its longest literal part. The
node adds `line contains PART` only where the file holds that part (a worker grep) and the
query has no text filter of its own nor reads a value of the quote (rlm.run.typed.fields), and
tells the model, as for a value (`with_conditions`).

A name the question writes outside its quotes that only a raw line can hold is such a
condition too: a dotted or underscored identifier (`Dropbox.exe`, `proxy.example.org`,
`pam_unix`) that is no column's name nor a value one lists. A table whose parse has no column
for the program or host leaves the model one way to keep to it, a `line contains` it seldom
writes: its totals then covered every program. Taken where the question writes one such name,
not negated, and the input holds it as a whole word (an example of a form, `blk_123`, begins
longer ids); added beside the quote's part (both hold of the lines asked about).

So is a word in capitals before the lines asked about ("the POST requests", "WARN entries")
where no column lists it: an HTTP method inside a message, with no column of its own, was left
out and the average taken over every request. Taken where the input holds it as a whole word in
those capitals (kind_words).

A quote is the log's own text, and a word in capitals too: where the input writes it in that
case, it is matched in that case (`contains_as_written`), as lines that write it in another
("invalid user" inside another message) are other lines; else in any case.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import read_json
from rlm.run.typed.conditions import negated, said_filter, unstated, with_conditions
from rlm.run.typed.examples_given import without_examples
from rlm.run.typed.fields import names_a_field
from rlm.run.typed.markers import marker_quotes
from rlm.run.typed.placeholders import literal_parts, quoted_texts, unquoted
from rlm.run.typed.vocabulary import AS_WRITTEN, MAX_FILTERS, TEXT_MATCHES
from rlm.run.typed.window import with_window

__all__ = [
    "HoldsText",
    "named_part",
    "quoted_left_out",
    "quoted_part",
    "with_question_conditions",
    "with_stated_in_place",
    "with_quoted",
]

_MIN_LETTERS = 3  # a quote shorter than this matches too much to be a condition
_MAX_NAME = 160  # as a quote: longer is no name of a program or a host
# An identifier with a dot or an underscore inside: a program, a host, a module (not `e.g.`).
# Its pieces hold no `.` or `_`, so that a long run of them is read in one pass, not in every split.
_NAME = re.compile(
    r"(?<![\w./-])([A-Za-z][A-Za-z0-9-]*(?:[._][A-Za-z0-9-]+)+)(?![\w-]|\.\w)"
    # a key and its value as a line writes them (`user=root`): the line's own text
    r"|(?<![\w./=-])([A-Za-z_][\w.-]{0,40}=[\w.:/@-]*\w)(?![\w=])"
)
# A word in capitals naming the kind of lines asked about ("the POST requests", "WARN entries"):
# the log's own word, which only a raw line holds where no column lists it.
_KIND_WORD = re.compile(
    r"(?<![\w./-])([A-Z][A-Z0-9]{2,})(?![\w./-])\s+(?:requests?|lines?|messages?|entries|entry|events?|calls?|records?)\b"
)


class HoldsText(Protocol):
    """Whether some line of the input holds a text, in any case; `whole`, not inside a longer
    word; `case`, in the case it is written (the run's worker grep:
    rlm.run.runner.ActionRunner.holds_text)."""

    def __call__(self, text: str, whole: bool = False, case: bool = False, /) -> bool: ...


def quoted_part(question: str, table: dict[str, Any]) -> str | None:
    """The literal text of the one line-like text the question quotes; None when it quotes
    none, several, or only names or values the table knows. A marker it quotes beside another
    text (a value is read after it: rlm.run.typed.markers) is not one of them."""
    cols = table_columns(table)
    known = {n.casefold() for n in cols.names()}
    known |= {str(v).casefold() for c in cols.columns for v in (c.values or ())}
    quotes = [q for q in quoted_texts(question) if q.strip().casefold() not in known]
    # A marker (`the 'elapsed:' values`) says where a value is read: beside another quote, that one
    # ('status: 200') is the lines' condition. Alone, it is (the lines that carry the value).
    markers = set(marker_quotes(question))
    quotes = [q for q in quotes if q not in markers] if len(quotes) > 1 else quotes
    if len(quotes) != 1 or negated(question, quotes[0]):
        return None
    # Around a placeholder, punctuation belongs to the varying part ("close, N bytes" -> "bytes").
    parts = literal_parts(quotes[0])
    part = max(parts, key=len).strip() if parts else ""
    return part if sum(ch.isalpha() for ch in part) >= _MIN_LETTERS else None


def named_part(question: str, table: dict[str, Any]) -> str | None:
    """The one identifier (`Dropbox.exe`, `user=root`) the question writes outside its quotes that is no
    column's name nor a value one lists, not negated; None when it writes none or several."""
    cols = table_columns(table)
    # A column's name, or a value a column lists (rlm.run.typed.conditions adds that one), is not.
    known = {n.casefold() for n in cols.names()} | {
        str(v).casefold() for c in cols.columns for v in c.values or ()
    }
    names = {
        name
        for m in _NAME.finditer(unquoted(question))
        if len(name := m[1] or m[2]) <= _MAX_NAME
        and sum(ch.isalpha() for ch in name) >= _MIN_LETTERS
        and name.casefold() not in known
    }
    if len(names) != 1:
        return None
    name = names.pop()
    return None if negated(question, name) else name


def kind_words(question: str, table: dict[str, Any]) -> list[str]:
    """The words in capitals the question writes before the lines it asks about ("the POST
    requests"), outside its quotes, that no column is named by and no value a column lists
    holds as a word (`HTTP` of a protocol column's `HTTP/1.1`), not negated."""
    cols = table_columns(table)
    listed = " ".join(str(v) for c in cols.columns for v in c.values or ()).casefold()
    named = {n.casefold() for n in cols.names()}
    words = dict.fromkeys(m[1] for m in _KIND_WORD.finditer(unquoted(question)))
    return [
        w
        for w in words
        if w.casefold() not in named
        and not re.search(rf"(?<![a-z0-9]){re.escape(w.casefold())}(?![a-z0-9])", listed)
        and not negated(question, w)
    ]


def _with_named(action: dict[str, Any], name: str, *, as_written: bool = False) -> dict[str, Any] | None:
    """The action with `line contains NAME` added (`as_written`: in its case); None where a filter
    names it already (or a piece of it), or there is no room for one more."""
    where = _where(action)
    values = [str(f.get("value", "")).casefold() for f in where if isinstance(f, dict)]
    if len(where) >= MAX_FILTERS or any(v and (v in name.casefold() or name.casefold() in v) for v in values):
        return None
    cmp = AS_WRITTEN if as_written else "contains"
    return {**action, "where": [*where, {"column": "line", "cmp": cmp, "value": name}]}


def with_quoted(action: dict[str, Any], part: str, *, as_written: bool = False) -> dict[str, Any] | None:
    """The action with `line contains PART` added (`as_written`: in the case the question writes
    it); None where it has a text filter already (the model chose its own), names the part in a
    filter, or has no room for one more."""
    where = _where(action)
    if len(where) >= MAX_FILTERS or _filters_text(where, part):
        return None
    cmp = AS_WRITTEN if as_written else "contains"
    return {**action, "where": [*where, {"column": "line", "cmp": cmp, "value": part}]}


def _where(action: dict[str, Any]) -> list[Any]:
    where = action.get("where") or []
    return [where] if isinstance(where, dict) else list(where)  # one filter given bare


def _filters_text(where: list[Any], part: str) -> bool:
    """Whether the filters have a text match of their own, or a value that holds the whole part.
    A value that is a piece of it does not: `level = 'ERROR'` keeps every error, of which the
    quoted message is one kind (its count was the count of all errors)."""
    whole = part.strip().casefold()
    for f in where:
        if not isinstance(f, dict):
            continue
        value = str(f.get("value", "")).strip().casefold()
        if f.get("cmp") in TEXT_MATCHES or (value and whole in value):
            return True
    return False


def with_question_conditions(
    question: str, content: str, table: dict[str, Any], holds_text: HoldsText
) -> tuple[dict[str, Any], list[str]] | None:
    """The typed action in `content` with the conditions the question names and it leaves out:
    the line the question quotes where `holds_text` finds it in the input, and values a column
    lists (with_conditions) but the quote's own, and the time window it states (with_window); and
    those conditions. None when nothing is added. The examples it gives state none."""
    question = without_examples(question)
    try:
        action = read_json(content)
        if check_action(action, table_columns(table)).args is not None:
            return None  # grep, peek, final: not a query of the table's rows
    except Problem:
        return None
    # The quote first: a value it says is then not added as well (rlm.run.typed.conditions).
    part = quoted_part(question, table) if not names_a_field(action, table, quoted_only=True) else None
    quoted = with_quoted(action, part) if part is not None else None
    query, added = action, list[str]()
    if part is not None and quoted is not None and holds_text(part):
        # A quote is the log's own text: where the input writes it in the quote's case, lines
        # that write it in another ("invalid user" inside another message) are other lines.
        as_written = holds_text(part, False, True)
        query = with_quoted(action, part, as_written=as_written) or quoted
        added = [f"line contains {part!r}" + (" as written" if as_written else "")]
    name = named_part(question, table)
    named = _with_named(query, name) if name is not None else None
    # As a whole word: an example of a form (`blk_123`) is not a condition where it begins longer ids.
    if name is not None and named is not None and holds_text(name, True):
        query, added = named, [*added, f"line contains {name!r}"]
    for word in kind_words(question, table):
        kind = _with_named(query, word, as_written=True)
        if kind is not None and holds_text(word, True, True):
            query, added = kind, [*added, f"line contains {word!r} as written"]
    amended = with_conditions(question, json.dumps(query), table)
    if amended is not None:
        query, added = amended[0], [*amended[1], *added]
    windowed = with_window(question, query, table)
    if windowed is not None:
        query, added = windowed[0], [*added, *windowed[1]]
    return (query, added) if added else None


def with_stated_in_place(
    question: str, content: str, table: dict[str, Any], holds_text: HoldsText, found: set[str]
) -> tuple[dict[str, Any], list[str]] | None:
    """with_question_conditions; and where the action's filters are as many as it takes, so that
    a condition the question names has no room, a filter's copies, then the filters the
    question states in no way (rlm.run.typed.conditions.unstated; not a value an earlier query
    `found`), give their place to it: four such filters had left no room for the line a
    question quoted, and the count was of other rows. None where nothing is added."""
    amended = with_question_conditions(question, content, table, holds_text)
    if amended is not None:
        return amended
    try:
        action = read_json(content)
    except Problem:
        return None
    where = _where(action)
    if len(where) < MAX_FILTERS:
        return None
    # A filter written twice holds no more rows apart than once: its copies go first.
    kept = [f for i, f in enumerate(where) if f not in where[:i]]
    copies = list(dict.fromkeys(said_filter(f) for i, f in enumerate(where) if f in where[:i]))
    dropped: list[str] = []
    if len(kept) >= MAX_FILTERS:
        made_up = set(unstated(question, content, table, found))
        dropped = [said_filter(f) for f in kept if isinstance(f, dict) and said_filter(f) in made_up]
        kept = [f for f in kept if not (isinstance(f, dict) and said_filter(f) in made_up)]
    if len(kept) == len(where):
        return None
    again = with_question_conditions(question, json.dumps({**action, "where": kept}), table, holds_text)
    if again is None:
        return None
    gave_way = [
        *([f"a copy of {'; '.join(copies)}"] if copies else []),
        *([f"{'; '.join(dropped)}, which it does not state"] if dropped else []),
    ]
    return again[0], [*again[1][:-1], f"{again[1][-1]} (in place of {', and '.join(gave_way)})"]


def quoted_left_out(
    question: str, content: str | None, table: dict[str, Any], holds_text: HoldsText
) -> list[str]:
    """`line contains PART` when the query in `content` leaves out the line the question quotes,
    or the name it writes (named_part), and the input holds it (a query sent again as written
    after rlm added it): [] otherwise."""
    question = without_examples(question)
    try:
        action = read_json(content)
        checked = check_action(action, table_columns(table))
    except Problem:
        return []
    if checked.args is not None:
        return []
    out = []
    part = quoted_part(question, table)
    if (
        part is not None
        and not _filters_text(_where(action), part)
        and not names_a_field(action, table, quoted_only=True)
    ):
        out += [f"line contains {part!r}"] if holds_text(part) else []
    name = named_part(question, table)
    if name is not None and _with_named(action, name) is not None and holds_text(name, True):
        out.append(f"line contains {name!r}")
    out += [
        f"line contains {word!r} as written"
        for word in kind_words(question, table)
        if _with_named(action, word) is not None and holds_text(word, True, True)
    ]
    return out
