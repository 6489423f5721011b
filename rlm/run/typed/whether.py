"""A yes or no about whether any row is so, against the model's own count of such rows.

A small model counted the rows a question asks about (96 matched) and answered "No" to whether
there were any. Where the question asks yes or no whether any row is so (its words: "yes/no",
or "is there / are there / was there ... any", "... at least one"), the last query the model
ran was a count with conditions, and the final's yes or no says other than that count (yes
where it is 0, no where it is more), the final is refused once with the count named, and in
doubt after. A question that asks about groups or amounts ("a day with more than 100") is not
read: a count of rows does not answer it.
"""

from __future__ import annotations

import re

__all__ = ["count_contradicted"]

_YES_NO = re.compile(r"\byes\s*(?:/|or|\|)\s*no\b", re.I)
_ANY = re.compile(
    r"\b(?:is|are|was|were)\s+there\s+(?:any|an?|at\s+least\s+one)\b|\bany\b|\bat\s+least\s+one\b|\bever\b",
    re.I,
)
# Words that compare an amount or ask about groups: the count of rows is then not the answer.
_NOT_ROWS = re.compile(
    r"\b(?:more|fewer|less|greater|higher|lower)\s+than\b|\bover\s+\d|\bunder\s+\d|\bat\s+least\s+(?!one\b)\w+"
    r"|\bat\s+most\b|\bper\b|\beach\b|\bevery\b|\bmost\b|\btimes\b|\btwice\b",
    re.I,
)
# A question that opens with the verb a yes or no answers ("Were any ...", "Did any ...").
_ASKS_YES_NO = re.compile(r"\s*(?:is|are|was|were|do|does|did|has|have)\b", re.I)
_SAID = re.compile(r"^\W*(yes|no)\b", re.I)


def count_contradicted(question: str, answer: str, count: int | None) -> str | None:
    """Why the final's yes or no is not what the model's count says, where the question asks
    whether any row is so; None otherwise."""
    if count is None or not _ANY.search(question) or _NOT_ROWS.search(question):
        return None
    said = _SAID.match(answer.strip())
    if said is None or not (_YES_NO.search(question) or _ASKS_YES_NO.match(question)):
        return None
    yes = said.group(1).lower() == "yes"
    if yes == (count > 0):
        return None
    return f"the answer says {said.group(1).lower()} where the count of the rows asked about is {count:,}"
