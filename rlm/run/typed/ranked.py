"""A final that names a lower row of a result ranked most first, where the question asks for
the one most: refused once, in doubt after.

A small model answers with the row of a ranking whose words echo the question's, not the row
on top: a row far down whose name holds a word of the question. The ranking is the model's own last typed
query (a `top`, or a `group` ordered most first), read from the table it printed.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.asked import name_words
from rlm.run.typed.check import Checked, Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import read_json

__all__ = [
    "SENTENCES",
    "list_left_short",
    "fewest_first",
    "lone_value",
    "measure_for_key",
    "off_top",
    "one_said",
    "printed_rows",
    "ranked_keys",
    "ranked_in_full",
    "ranked_measures",
    "ranking_of",
    "top_tied",
    "unasked_top",
]

_FEWEST = re.compile(r"\b(?:fewest|least|rarest)\b", re.I)  # the one fewest: ranked least first
# The question asks for one value that is the most: not a list, not a number of them ("top 3").
_MOST = re.compile(r"\b(?:most|top|busiest|largest|highest|greatest|biggest|commonest)\b", re.I)
_MANY = re.compile(
    r"\b(?:top|first|the)\s+(?:\d+|two|three|four|five|six|seven|eight|nine|ten)\b|\blist\b|\bper line\b|\beach\b",
    re.I,
)
SENTENCES = re.compile(r"(?<=[.?!])\s+")  # where a question's sentences part


def _many_most(question: str) -> bool:
    """Whether the question asks for several values where it asks for a most: a list or a top N
    anywhere, or "each" in the sentence that asks for the most ("which host sent the most for
    each day"). A sentence that only tells what the data is ("the result of each job is ...")
    asks for nothing."""
    if _MANY.search(re.sub(r"\beach\b", " ", question, flags=re.I)):
        return True
    return any(_MOST.search(s) and re.search(r"\beach\b", s, re.I) for s in SENTENCES.split(question))


_RULE = re.compile(r"^-+(?:\+-+)*$")
# The question asks which value (a name, an address, an id), and not how many lines or how much:
# a ranking's count or total is then no answer, however much it is a number.
_WHICH = re.compile(r"\b(?:which|who)\b|\bwhat\s+(?!(?:is|was|are|were|'s)\b)\w", re.I)
_HOW_MUCH = re.compile(r"\bhow (?:many|much|often)\b|\bnumber of\b|\bcounts?\b|\bfrequency\b|\btotal\b", re.I)
# The question asks for a whole list (not a number of them: "the top 3").
_A_LIST = re.compile(r"\blist\b|\bone (?:\w+ )?(?:per|a|on each) line\b|\bcomma[- ]separated\b", re.I)
_SO_MANY = re.compile(
    r"\b(?:top|first|last)\s+(?:\d+|two|three|four|five|six|seven|eight|nine|ten)\b|\b\d+\s+(?:most|least)\b",
    re.I,
)
_CUT = re.compile(r"as many as the query's LIMIT")
_ONE_NUMBER = re.compile(r"\s*(-?\d[\d,]*(?:\.\d+)?)\s*\.?\s*")


def ranking_of(content: str | None, table: dict[str, Any]) -> Checked | None:
    """The typed ranking `content` asks for (a `top`, or a `group` ordered most first, of a
    column's values or of periods: the busiest day first), if it is one."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return None
    ranking = checked.op == "top" or (checked.op == "group" and checked.order == "most")
    return checked if ranking and checked.args is None else None


def ranked_keys(content: str | None, observation: str, table: dict[str, Any]) -> list[str]:
    """The keys, in rank order, of the typed ranking `content` ran (its first column, as printed;
    a group fewest first too), or of the rows it listed largest value first (the first column
    after `line_no`: the value beside the largest, which a small model took from the row below);
    [] for any other action."""
    if ranking_of(content, table) is not None or fewest_first(content, table):
        return [cells[0] for cells in printed_rows(observation)]
    if _largest_first(content, table):
        return [cells[1] for cells in printed_rows(observation) if len(cells) > 1]
    return []


def fewest_first(content: str | None, table: dict[str, Any]) -> bool:
    """Whether `content` is a typed `group` ordered least first: its first row is the fewest."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return False
    return checked.op == "group" and checked.order == "least" and checked.args is None


def _largest_first(content: str | None, table: dict[str, Any]) -> bool:
    """Whether `content` is a typed `rows` ordered by a column, its largest value first."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return False
    by = checked.order_by
    return checked.op == "rows" and by is not None and by.name != "line_no" and checked.take == "last"


def ranked_measures(content: str | None, observation: str, table: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, measure) of each row the typed ranking `content` ran printed, as printed: the first
    cell and the last (a count of rows, or the group's sum, average or extreme); [] for any other
    action."""
    if ranking_of(content, table) is None:
        return []
    return [(cells[0], cells[-1]) for cells in printed_rows(observation) if len(cells) >= 2]


def ranked_in_full(observation: str) -> bool:
    """Whether a printed ranking shows every row its query found (no LIMIT cut it)."""
    return _CUT.search(observation) is None


def list_left_short(question: str, answer: str, measured: list[tuple[str, str]], whole: bool) -> str | None:
    """Why `answer` does not fit: the question asks for a list, the ranking it is read from shows
    every value (`whole`), and the answer names some of them and leaves others out (not those
    the question names itself: "besides GET"); None when it fits, or there is no such ranking.
    A small model listed the rows below the first of a ranking and left one out."""
    if not whole or len(measured) < 2 or not _A_LIST.search(question) or _SO_MANY.search(question):
        return None
    keys = [key for key, _ in measured if key and key.upper() != "NULL" and not _names(question, key)]
    named = [key for key in keys if _names(answer, key)]
    if not named or len(named) == len(keys):
        return None
    return f"the answer lists {len(named)} of the {len(keys)} values its ranking shows"


def _as_number(text: str) -> float | None:
    found = _ONE_NUMBER.fullmatch(text)
    return float(found.group(1).replace(",", "")) if found else None


def measure_for_key(question: str, answer: str, measured: list[tuple[str, str]]) -> str | None:
    """Why `answer` does not fit: it is a ranking's count (or total) of a row, not the row's
    value, where the question asks which value and not how many; None when it fits, or there is
    no ranking. A small model read the last column of `key | count` as the answer to "which
    key" (both numbers: a process id and its lines)."""
    given = _as_number(answer)
    if given is None or not measured or not _WHICH.search(question) or _HOW_MUCH.search(question):
        return None
    if any(_as_number(key) == given or _names(answer, key) for key, _ in measured):
        return None
    row = next((k for k, (_, measure) in enumerate(measured, start=1) if _as_number(measure) == given), None)
    if row is None:
        return None
    return f"the answer is what a ranking counts for its row {row}, not the row's value, where the question asks which"


def printed_rows(observation: str) -> list[list[str]]:
    """The cells of each row of a printed result (rlm.sandbox.worker.sql_result.render_table),
    those between the rule under its header and its closing `(N rows)`; [] for other output."""
    lines = observation.splitlines()
    rule = next((k for k, line in enumerate(lines[:3]) if _RULE.match(line.strip())), None)
    if rule is None:
        return []
    one_column = rule == 0 or " | " not in lines[rule - 1]
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith("(") or (" | " not in line and not one_column):
            break
        rows.append([cell.strip() for cell in line.split(" | ")])
    return rows


def top_tied(
    question: str, content: str | None, observation: str, table: dict[str, Any]
) -> tuple[str, str] | None:
    """(note for the model, the answer's doubt) where the question asks which one is the most and
    the typed ranking `content` ran puts no value alone on top: the first two rows rank the same
    (a tie the order of the keys broke), or the first counts one row (every value counted once:
    a ranking by a column whose values are all distinct, a whole line); None otherwise."""
    checked = ranking_of(content, table)
    if checked is None or not _MOST.search(question) or _many_most(question):
        return None
    rows = printed_rows(observation)
    if not rows or len(rows[0]) < 2:
        return None
    top = rows[0][-1]
    by = checked.by or checked.column
    name = by.name if by is not None else "its column"
    if len(rows) > 1 and len(rows[1]) == len(rows[0]) and rows[1][-1] == top:
        return (
            f"Note: {rows[0][0]!r} and {rows[1][0]!r} rank the same ({top}): neither is the most; the "
            "order between them is the order of their names. If the question asks about some rows "
            "only, filter on what sets those apart; else say that they tie.",
            f"ranked {rows[0][0]!r} first in a tie with {rows[1][0]!r} ({top} each)",
        )
    if checked.op == "top" and top == "1":
        return (
            f"Note: the {name} ranked first counts one row: every {name} the query kept is counted "
            "once, so none is the most. Rank by the column that holds what the question asks "
            "about, not one whose every value differs.",
            f"ranked values of {name} that each count one row",
        )
    return None


# The question says there is one such thing ("exactly one", "the only", "a single"), in a sentence
# that is not the answer's form ("Give one number").
_ONE_SAID = re.compile(
    r"\b(?:exactly|only|just)\s+(?:one|1|a single)\b(?!\s+(?:of each|per)\b)|\bone and only\b"
    r"|\ba single\b|\bthe only\b|\b(?:exactly|only) once\b",
    re.I,
)
_FORM_SENTENCE = re.compile(
    r"^\W*(?:reply|answer|respond|return|give|output|print|write|format|just|only|provide|state|"
    r"use|list|name)\b",
    re.I,
)


def _one_thing_said(question: str) -> str | None:
    """The words after the question's "exactly one" (the thing it says there is one of), in a
    sentence that is not the answer's form; None where it says no such thing."""
    for sentence in re.split(r"(?<=[.?!])\s+", question):
        if not _FORM_SENTENCE.match(sentence) and (found := _ONE_SAID.search(sentence)) is not None:
            return " ".join(re.findall(r"[^\W_]+", sentence[found.end() :])[:3])
    return None


def one_said(
    question: str, content: str | None, observation: str, table: dict[str, Any]
) -> tuple[str, str] | None:
    """(note for the model, the answer's doubt) where the question says a line or event of its
    kind occurs once, and the first row of the typed ranking `content` ran counts several
    lines: the query kept more than the one the question describes, and its top is the
    commonest of those, not that line's; None otherwise."""
    checked = ranking_of(content, table)
    thing = _one_thing_said(question)
    if checked is None or checked.agg is not None or thing is None:
        return None
    by = checked.by or checked.column
    if by is not None and set(name_words(by.name)) & set(name_words(thing)):
        return None  # one value of the ranked column ("one worker"), which many lines share
    rows = printed_rows(observation)
    if not rows or len(rows[0]) < 2 or not re.fullmatch(r"\d[\d,]*", rows[0][-1]):
        return None
    counted = int(rows[0][-1].replace(",", ""))
    if counted < 2:
        return None
    return (
        f"Note: the question says one line of that kind is in the input, and {rows[0][0]!r}, ranked first, "
        f"counts {counted} lines: the query kept lines other than the one the question describes. "
        "Filter on what the question says sets that line apart, so that the query keeps it alone.",
        f"ranked {rows[0][0]!r} first with {counted} lines, where the question says there is one",
    )


def _names(text: str, key: str) -> bool:
    # Not inside a longer name: no word, path or dotted character on either side (a sentence's
    # full stop after it is not one).
    return bool(key) and re.search(rf"(?<![\w/.-]){re.escape(key)}(?![\w/-]|\.\w)", text, re.I) is not None


# Words by which a question ranks, or asks for an order: the first row of a ranking may then be
# what it asks for. Read wide on purpose: where one is written, the first row is not doubted.
_RANKS = re.compile(
    r"\b(?:most|mostly|top|busiest|largest|highest|greatest|biggest|commonest|heaviest|longest|"
    r"hottest|noisiest|slowest|fastest|loudest|worst|best|peak|popular|frequent|frequently|common|"
    r"commonly|dominant|dominates|leading|leads|max|maximum|majority|least|fewest|rarest|min|minimum|"
    r"smallest|lowest|shortest|earliest|latest|first|last|more|fewer|less|rank|ranked|ranks|"
    r"order|ordered|sorted|primary|main|chief|often|repeatedly|usually|typically)\b",
    re.I,
)
_HOW_MANY = re.compile(r"\bhow (?:many|much)\b|\bnumber of\b|\bcount\b", re.I)


def unasked_top(question: str, answer: str, keys: list[str]) -> str | None:
    """Why `answer` does not fit: it names the first row of a ranking of several values, and
    only that row, where the question asks for no most, no order and no list. Such a question
    asks about one thing (the line it describes, the one it says there is); the first row of a
    ranking is the commonest of the rows the query kept, which is that thing only if the
    query's filters kept its rows alone. None when it fits."""
    if len(keys) < 2 or keys[0] == keys[1] or _RANKS.search(question) or _MANY.search(question):
        return None
    if _HOW_MANY.search(question) or not _names(answer, keys[0]):
        return None
    if any(key != keys[0] and _names(answer, key) for key in keys[1:]):
        return None
    return (
        "the answer is the first row of a ranking of several values, and the question asks for no "
        "most: the first row is the commonest of the rows the query kept, not the one asked about"
    )


def off_top(question: str, answer: str, keys: list[str], *, fewest: bool = False) -> str | None:
    """Why `answer` does not fit: it names the key of a lower row and not the first, where the
    question asks for the one most (`fewest`: the keys are ranked fewest first, and the question
    asks for the one fewest); None when it fits, or there is no ranking."""
    asked = (
        _FEWEST.search(re.sub(r"\bat\s+least\b", " ", question, flags=re.I))
        if fewest
        else _MOST.search(question)
    )
    if len(keys) < 2 or not asked or _many_most(question) or _names(answer, keys[0]):
        return None
    lower = next(
        (k for k, key in enumerate(keys[1:], start=2) if key != keys[0] and _names(answer, key)), None
    )
    if lower is None:
        return None
    order = "fewest" if fewest else "most"
    return (
        f"the answer names row {lower} of a ranking, {order} first, where the question asks for the {order}"
    )


def lone_value(
    question: str, content: str | None, observation: str, table: dict[str, Any]
) -> tuple[str, str] | None:
    """(note for the model, the answer's doubt) where the question asks which one is the most
    and the typed ranking `content` ran, asked for several rows, found one value only: every row
    it kept has the same (a host column of a one-host log, a constant), so it sets nothing apart;
    None otherwise."""
    checked = ranking_of(content, table)
    keys = ranked_keys(content, observation, table)
    if (
        checked is None
        or checked.k < 2
        or len(keys) != 1
        or not _MOST.search(question)
        or _many_most(question)
    ):
        return None
    by = checked.by or checked.column
    name = by.name if by is not None else "its column"
    return (
        f"Note: every row the query kept has the same {name} ({keys[0]!r}): a ranking of one value "
        "sets nothing apart. If the question asks which of several is the most, rank by the column "
        "that holds them, over the rows the question asks about.",
        f"ranked one value of {name} only (every row it kept has the same)",
    )
