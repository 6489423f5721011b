"""A percentage asked: a typed count then also gives the rows it is a share of.

A question that asks what percentage (share, proportion, fraction) of the rows are of some kind
needs two counts and a division; a small model sends the count of the kind, then answers that
count, or divides by a total it guessed. Where the question's words ask for a share, a count
with conditions is run as one query that also gives the table's rows and the count's
percentage of them, and, for a count of two conditions or more, its percentage of the rows each
condition but one keeps (`of the failed logins, how many were root's` is a share of the rows
of one condition, not of the table). Rounded to the decimals the question asks for (2 where it
asks none). The percentages are then in the query's own output, where the answer is grounded.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.placeholders import unquoted

__all__ = ["SHARE_KEY", "asks_for_decimals", "asks_a_share", "with_share"]

SHARE_KEY = "typed_share"  # in a table's description: the decimals of the share the question asks for

_SHARE = re.compile(r"\b(?:percent(?:ages?)?|per\s+cent|proportion|fraction|share\s+of)\b|%", re.IGNORECASE)
_DECIMALS = re.compile(
    r"\b(\d|one|two|three|four|five|six)\s+decimals?\b|\bdecimal\s+places?\s*:?\s*(\d)\b", re.I
)
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
DEFAULT_DECIMALS = 2


def asks_a_share(question: str) -> bool:
    """Whether the question's own words (quotes aside: a line's text) ask for a percentage."""
    return _SHARE.search(unquoted(question)) is not None


def asks_for_decimals(question: str) -> int:
    """The decimals the question asks an answer rounded to; DEFAULT_DECIMALS where it says none."""
    m = _DECIMALS.search(question)
    if m is None:
        return DEFAULT_DECIMALS
    said = (m.group(1) or m.group(2)).lower()
    return _NUMBER_WORDS.get(said) or int(said)


def with_share(table: dict[str, Any], question: str) -> dict[str, Any]:
    """The table's description marked to give a count's share (a copy), where the question asks
    for a percentage; the same table otherwise."""
    return {**table, SHARE_KEY: asks_for_decimals(question)} if asks_a_share(question) else table
