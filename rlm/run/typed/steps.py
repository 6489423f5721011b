"""A question that asks in two steps: first find one thing, then something about it.

"Find the client with the most errors. Which page was it after?" is answered by two queries:
a ranking that finds the client, then a query of that client's rows. A small model runs the
first and answers with what it found, the client where a page is asked, grounded all the same.
What is read is the question's form, never its subject: a first sentence that tells the reader
to find or look up one thing ("Find ...", "Look up ...", "Identify ...", "There was only one
..."), and a last one that asks about it by a word that points back ("it", "its", "that",
"they" ...). The second step is a query that filters on a value an earlier query found, or a query of
whole rows (`rows`: the row found and what it holds beside, both steps at once): `second_step`.
A final before one is refused once (rlm.run.node), and in doubt after. The refusal names the
filter on the value the last ranking found first (`found_filter`), which the 1.5B model, told only
to run a query of that value's rows, sent its first query again instead of writing.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Problem
from rlm.run.typed.columns import NUMBER
from rlm.run.typed.compile import read_json
from rlm.run.typed.ranked import SENTENCES, ranking_of

__all__ = ["asks_in_two_steps", "first_sentence", "found_filter", "second_step"]

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
# A first sentence that sets the reader to find one thing.
_FIND_FIRST = re.compile(
    r"^\s*(?:first,?\s+)?(?:find|look\s+up|identify|determine|locate|take|pick|work\s+out)\b"
    r"|^\s*there\s+(?:is|was)\s+(?:exactly\s+|only\s+|just\s+)?one\b",
    re.IGNORECASE,
)
# A later sentence that asks about what was found, pointing back at it.
# "Then", or "tell me" / "give" / "report", may come before it ("Then tell me how many ...").
_ASKS_BACK = re.compile(
    r"^\s*(?:then,?\s+)?(?:(?:tell\s+me|give|report|say)\s+)?"
    r"(?:what|which|how|who|when|where|did|does|do|was|were|is)\b",
    re.IGNORECASE,
)
_POINTS_BACK = re.compile(
    r"\b(?:it|its|that|this|they|their|them|those|these|he|she|his|her)\b", re.IGNORECASE
)


def asks_in_two_steps(question: str) -> bool:
    """Whether the question's form asks to find one thing first and then about it."""
    sentences = [s for s in SENTENCES.split(question.strip()) if s]
    if len(sentences) < 2 or not _FIND_FIRST.search(sentences[0]):
        return False
    return any(_ASKS_BACK.search(s) and _POINTS_BACK.search(s) for s in sentences[1:])


def first_sentence(question: str) -> str | None:
    """The sentence that sets the reader to find one thing, where the question asks in two steps."""
    if not asks_in_two_steps(question):
        return None
    return SENTENCES.split(question.strip())[0]


def second_step(content: str | None, found: set[str]) -> bool:
    """Whether the typed query in `content` asks about what an earlier one found: it filters on
    one of the values `found`, or it lists whole rows (the one found, and what it holds)."""
    try:
        action: Any = read_json(content)
    except Problem:
        return False
    if not isinstance(action, dict):
        return False
    if action.get("op") == "rows":
        return True
    where = action.get("where")
    where = [where] if isinstance(where, dict) else where if isinstance(where, list) else []
    return any(isinstance(f, dict) and str(f.get("value")) in found for f in where)


def found_filter(content: str | None, keys: list[str], table: dict[str, Any]) -> dict[str, Any] | None:
    """The filter on the first of `keys`, the values the typed ranking `content` printed in rank
    order (`{"column": "ip", "cmp": "=", "value": "10.0.0.7"}`): what a query of that value's
    rows holds to. None for another action, a value read after a text (no column to filter on),
    or no value printed."""
    ranking = ranking_of(content, table)
    # A period is no value to filter on with `=` (an hour's key is where it starts), but for a
    # day: `= "2019-03-14"` on a time column is that whole day (rlm.run.typed.compile).
    day = (
        ranking is not None and ranking.bucket == "day" and bool(keys) and _DAY.fullmatch(keys[0]) is not None
    )
    plain = ranking is not None and ranking.after is None and (ranking.bucket is None or day)
    column = (ranking.column or ranking.by) if plain and ranking is not None else None
    if column is None or not keys or keys[0].upper() == "NULL":
        return None
    value: Any = keys[0]
    if column.kind == NUMBER:
        try:
            value = int(keys[0]) if re.fullmatch(r"-?\d+", keys[0]) else float(keys[0])
        except ValueError:
            return None
    return {"column": column.name, "cmp": "=", "value": value}
