"""A final that names a lower row of a result ranked most first, where the question asks for
the one most: refused once, in doubt after.

A small model answers with the row of a ranking whose words echo the question's, not the row
on top: a row far down whose name holds a word of the question. The ranking is the model's own last typed
query (a `top`, or a `group` ordered most first), read from the table it printed.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Checked, Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import read_json

__all__ = ["lone_value", "off_top", "ranked_keys"]

# The question asks for one value that is the most: not a list, not a number of them ("top 3").
_MOST = re.compile(r"\b(?:most|top|busiest|largest|highest|greatest|biggest|commonest)\b", re.I)
_MANY = re.compile(
    r"\b(?:top|first|the)\s+(?:\d+|two|three|four|five|six|seven|eight|nine|ten)\b|\blist\b|\bper line\b|\beach\b",
    re.I,
)
_RULE = re.compile(r"^-+(?:\+-+)*$")


def _ranking(content: str | None, table: dict[str, Any]) -> Checked | None:
    """The typed ranking `content` asks for (a `top`, or a `group` ordered most first), if it is one."""
    try:
        checked = check_action(read_json(content), table_columns(table))
    except Problem:
        return None
    ranking = checked.op == "top" or (
        checked.op == "group" and checked.order == "most" and not checked.bucket
    )
    return checked if ranking and checked.args is None else None


def ranked_keys(content: str | None, observation: str, table: dict[str, Any]) -> list[str]:
    """The keys, in rank order, of the typed ranking `content` ran (its first column, as printed);
    [] for any other action."""
    if _ranking(content, table) is None:
        return []
    lines = observation.splitlines()
    rule = next((k for k, line in enumerate(lines[:3]) if _RULE.match(line.strip())), None)
    if rule is None:
        return []
    keys = []
    for line in lines[rule + 1 :]:
        if " | " not in line:
            break
        keys.append(line.split(" | ", 1)[0].strip())
    return keys


def _names(text: str, key: str) -> bool:
    # Not inside a longer name: no word, path or dotted character on either side (a sentence's
    # full stop after it is not one).
    return bool(key) and re.search(rf"(?<![\w/.-]){re.escape(key)}(?![\w/-]|\.\w)", text, re.I) is not None


def off_top(question: str, answer: str, keys: list[str]) -> str | None:
    """Why `answer` does not fit: it names the key of a lower row and not the first, where the
    question asks for the one most; None when it fits, or there is no ranking."""
    if len(keys) < 2 or not _MOST.search(question) or _MANY.search(question) or _names(answer, keys[0]):
        return None
    lower = next(
        (k for k, key in enumerate(keys[1:], start=2) if key != keys[0] and _names(answer, key)), None
    )
    if lower is None:
        return None
    return f"the answer names row {lower} of a ranking, most first, where the question asks for the most"


def lone_value(
    question: str, content: str | None, observation: str, table: dict[str, Any]
) -> tuple[str, str] | None:
    """(note for the model, the answer's doubt) where the question asks which one is the most
    and the typed ranking `content` ran, asked for several rows, found one value only: every row
    it kept has the same (a host column of a one-host log, a constant), so it sets nothing apart;
    None otherwise."""
    checked = _ranking(content, table)
    keys = ranked_keys(content, observation, table)
    if (
        checked is None
        or checked.k < 2
        or len(keys) != 1
        or not _MOST.search(question)
        or _MANY.search(question)
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
