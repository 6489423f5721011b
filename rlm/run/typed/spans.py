"""How long a row took, offered as a column where the question asks for it.

A table of trips, sessions or jobs keeps when each began and ended in two time columns; how long
one took is then the difference, which no column holds and no op of the vocabulary computes (a
small model cannot write the subtraction). Where the question's words ask about a length of
time (`took`, `longest`, `duration`, `minus`, ...; not `last`, which mostly means the latest),
each pair of the table's time columns, in the table's order, is offered as a number column:
`seconds_<start>_to_<end>`. Only for a table of two or three time columns (more make pairs that
mean nothing), and only where asked: each column offered costs the prompt its description on a
4,096-token window.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.placeholders import unquoted

__all__ = ["MAX_SPAN_TIMES", "SPANS_KEY", "asks_a_span", "span_name", "with_spans"]

SPANS_KEY = "typed_spans"  # in a table's description: the question asks how long a row took
MAX_SPAN_TIMES = 3

# Words that ask about a length of time, not a moment: how long, the longest or shortest, what a
# row took or lasted, its duration, one time minus another.
_LENGTH_OF_TIME = re.compile(
    r"\b(?:how\s+long|long(?:er|est)|short(?:er|est)|quick(?:er|est)|durations?|took|lasted|lasting|"
    r"elapsed|minus|length\s+of\s+time|time\s+spent)\b",
    re.IGNORECASE,
)


def asks_a_span(question: str) -> bool:
    """Whether the question's own words (quotes aside: a line's text) ask about a length of time."""
    return _LENGTH_OF_TIME.search(unquoted(question)) is not None


def span_name(start: str, end: str) -> str:
    return f"seconds_{start}_to_{end}"


def with_spans(table: dict[str, Any], question: str) -> dict[str, Any]:
    """The table's description marked to offer the seconds between its time columns (a copy), where
    the question asks about a length of time; the same table otherwise."""
    return {**table, SPANS_KEY: True} if asks_a_span(question) else table
