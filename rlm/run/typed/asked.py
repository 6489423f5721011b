"""What a question's own words name of the query it asks for, read against the table's columns:
the column whose values it asks for ("which source IP": `src_ip`), a bound on a number of lines
("3 or more times"), and the bounds it states beside a number column's name ("a tip over 10").

The words are the few every question of a kind uses (which, what is the, list; at least, or
more, more than), and a column is named by its own name's words, short forms written out
(`src` is source): nothing here knows a particular question (rlm.run.typed.measure acts on
what is read).
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.answer_kind import IP, asked_kind, columns_of_kind
from rlm.run.typed.columns import NUMBER, Column, TableColumns
from rlm.run.typed.placeholders import unquoted

__all__ = [
    "STATED",
    "as_number",
    "asked_column",
    "column_bounds",
    "lines_bound",
    "name_words",
    "singular",
    "unquoted",
]

# The comparison a question states for a number, a unit between allowed ("4 miles or longer"):
# (regex, the comparison), the number in a group.
_N = r"(-?\d[\d,]*(?:\.\d+)?)"
_MORE = r"(?:more|higher|above|greater|over|larger|bigger|longer)"
_LESS = r"(?:less|fewer|lower|below|under|smaller|shorter)"
STATED = (
    (
        re.compile(
            rf"\bat\s+least\s+{_N}|\bno\s+(?:less|fewer)\s+than\s+{_N}|{_N}(?:\s+[a-z]+)?\s+or\s+{_MORE}\b",
            re.I,
        ),
        ">=",
    ),
    (
        re.compile(
            rf"\bat\s+most\s+{_N}|\bno\s+(?:more|greater|higher)\s+than\s+{_N}|{_N}(?:\s+[a-z]+)?\s+or\s+{_LESS}\b",
            re.I,
        ),
        "<=",
    ),
    (re.compile(rf"\b{_MORE}\s+than\s+{_N}|\b(?:over|above|exceeding|exceeds)\s+{_N}", re.I), ">"),
    (re.compile(rf"\b{_LESS}\s+than\s+{_N}|\b(?:under|below)\s+{_N}", re.I), "<"),
    # Any number but this one: "anything but 512", "not equal to 200".
    (
        re.compile(
            rf"\b(?:other\s+than|different\s+from|not\s+equal\s+to|anything\s+but|except(?:\s+for)?)\s+{_N}",
            re.I,
        ),
        "!=",
    ),
)
# A lower bound on a number of lines, as questions state one: "N or more times", "at least N
# <things>", "more than N <things>" (the number in a group, then the counted word). The counted
# word is `times`, or a plural that no number column is named by and that is no unit of an
# amount: "at least 4 passengers" bounds a column, "over 500 bytes" an amount.
_COUNTED = r"(?:\s+(?:[a-z]+\s+)??(times|[a-z]+s)\b)"
_LINES_BOUND = (
    (re.compile(rf"\b(?:at\s+least|no\s+(?:less|fewer)\s+than)\s+{_N}{_COUNTED}", re.I), 0),
    (re.compile(rf"{_N}\s*(?:\+|or\s+more){_COUNTED}", re.I), 0),
    (re.compile(rf"{_N}{_COUNTED}\s+or\s+more\b", re.I), 0),
    (re.compile(rf"\b(?:more|greater)\s+than\s+{_N}{_COUNTED}", re.I), 1),
)
_UNITS = frozenset(
    "bytes kilobytes megabytes gigabytes kb mb gb ms millis milliseconds seconds secs minutes mins hours "
    "days weeks months years miles kilometers kilometres meters metres km dollars euros cents percent "
    "degrees points".split()
)
# "which <things>", "what <things>", "list (every) <thing>": the words that name what is asked for
# (`ip:port` and `requests.total` are words of a name too).
# A word after them may be put in brackets: "the short (iso) names".
_WHICH = re.compile(
    r"\b(?:which|what)\s+(?!(?:is|was|are|were|does|did|do|has|had)\b)((?:[\w:.()-]+\s+){0,3}[\w:.()-]+)"
    r"|\bwhat\s+(?:is|was|are|were)\s+(?:(?:the|its|their)\s+)?((?:[\w:.()-]+\s+){0,3}[\w:.()-]+)"
    r"|\blist\s+(?:(?:every|all|each|the|of|distinct|unique|different)\s+){0,3}((?:[\w:.()-]+\s+){0,3}[\w:.()-]+)",
    re.I,
)
# A column's name in short, as the question writes it in full ("src_ip" for "source IP").
_SHORT = {
    "src": "source",
    "dst": "destination",
    "dest": "destination",
    "addr": "address",
    "msg": "message",
    "proc": "process",
    "ts": "time",
    "num": "number",
    "qty": "quantity",
    "amt": "amount",
    "desc": "description",
    "cat": "category",
}


def as_number(text: str) -> float | None:
    """A number written with or without thousands' commas; None for anything else."""
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def singular(word: str) -> str:
    word = word.lower()
    if re.search(r"(?:ss|sh|ch|x)es$", word):
        return word[:-2]
    return word[:-1] if len(word) > 2 and word.endswith("s") and not word.endswith("ss") else word


def name_words(name: str) -> list[str]:
    """A column's name as words: split at `_`, `-`, `.` and case changes, short forms written out."""
    parts = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)
    return [singular(_SHORT.get(p.lower(), p.lower())) for p in parts]


def asked_column(question: str, table: dict[str, Any], cols: TableColumns) -> str | None:
    """The column whose values the question asks for ("which source IP" -> `src_ip`): the one
    whose name's words are all among those after its "which", "what" or "list", the most of them
    where several fit; else, where an IP address is asked, the table's one column of them. None
    when no column, or more than one, fits."""
    # The first "which", "what" or "list" after which a column is named ("Which jobs failed? List
    # the job ids": `job_id`).
    for m in _WHICH.finditer(unquoted(question)):
        said = {singular(w) for w in re.findall(r"[^\W_]+", next(g for g in m.groups() if g))}
        best = best_named(said, [c for c in cols.columns if c.name not in ("line", "line_no")])
        if best:
            return best[0].name if len(best) == 1 else None
    kind = asked_kind(question)
    addresses = columns_of_kind(IP, table) if kind is not None and kind.kind == IP else []
    return addresses[0] if len(addresses) == 1 else None


def best_named(said: set[str], columns: list[Column]) -> list[Column]:
    """Of `columns`, those whose name's words are all among the words `said`, the most of them
    (several where as many fit); [] when none fits."""
    fits: dict[int, list[Column]] = {}
    for column in columns:
        words = name_words(column.name)
        if words and set(words) <= said:
            fits.setdefault(len(words), []).append(column)
    return fits[max(fits)] if fits else []


def lines_bound(words: str, cols: TableColumns) -> int | None:
    """The fewest lines a value must be on, where the question states a bound on a number of lines
    ("3 or more times", "at least 3 warnings"); None where it states none, or two."""
    columns = {singular(w) for name in cols.names(NUMBER) for w in name_words(name)}
    found = set()
    for pattern, above in _LINES_BOUND:
        for m in pattern.finditer(words):
            number, counted = as_number(m.group(1)), singular(m.group(2))
            if (
                number is None
                or not number.is_integer()
                or counted in columns
                or m.group(2).lower() in _UNITS
            ):
                continue
            found.add(int(number) + above)
    return found.pop() if len(found) == 1 else None


def column_bounds(text: str, cols: TableColumns) -> tuple[tuple[str, str, float], ...]:
    """(column, cmp, number) of each bound the question states beside a number column's name
    ("3 or more riders", "a tip of 2 or higher", "a fare over 70"): the one column whose name's
    words are all among the three words before or after it. A number stated two ways, or beside
    two columns, is none."""
    found: dict[float, set[tuple[str, str]]] = {}
    names = [n for n in cols.names(NUMBER) if n != "line_no"]
    for pattern, cmp in STATED:
        for m in pattern.finditer(text):
            number = next((as_number(g) for g in m.groups() if g), None)
            before = re.findall(r"[^\W_]+", text[: m.start()])[-3:]
            near = {singular(w) for w in [*before, *re.findall(r"[^\W_]+", m.group(0) + text[m.end() :])[:6]]}
            fits = [n for n in names if all(w in near for w in name_words(n))]
            if number is not None and len(fits) == 1:
                found.setdefault(number, set()).add((fits[0], cmp))
    return tuple((c, cmp, n) for n, said in found.items() if len(said) == 1 for c, cmp in said)
