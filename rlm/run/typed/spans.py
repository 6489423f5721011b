"""How long a row took, offered as a column where the question asks for it.

A table of trips, sessions or jobs keeps when each began and ended in two time columns; how long
one took is then the difference, which no column holds and no op of the vocabulary computes (a
small model cannot write the subtraction). Where the question's words ask about a length of
time (`took`, `longest`, `duration`, `minus`, ...; not `last`, which mostly means the latest),
each pair of the table's time columns, in the table's order, is offered as a number column:
`seconds_<start>_to_<end>`. Only for a table of two or three time columns (more make pairs that
mean nothing), and only where asked: each column offered costs the prompt its description on a
4,096-token window.

Where the question asks for its answer in minutes, hours or days ("in minutes", "how many
hours"), the columns are in that unit (`minutes_<start>_to_<end>`): a small model gives the
average of a seconds column as it reads it, asked in minutes.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.placeholders import unquoted

__all__ = [
    "MAX_SPAN_TIMES",
    "SPANS_KEY",
    "UNIT_SECONDS",
    "asks_a_span",
    "offered_unit",
    "span_name",
    "span_unit",
    "with_spans",
]

SPANS_KEY = "typed_spans"  # in a table's description: the unit of how long a row took, where asked
UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
MAX_SPAN_TIMES = 3

# Words that ask about a length of time, not a moment: how long, the longest or shortest, what a
# row took or lasted, its duration, one time minus another.
_LENGTH_OF_TIME = re.compile(
    r"\b(?:how\s+long|long(?:er|est)|short(?:er|est)|quick(?:er|est)|durations?|took|lasted|lasting|"
    r"elapsed|minus|length\s+of\s+time|time\s+spent)\b",
    re.IGNORECASE,
)


# The unit a question asks its answer in: "in minutes", "how many hours", "(days)"; a number's
# unit ("over 40 minutes") is a condition's (rlm.run.typed.seconds), not the answer's.
_ANSWER_UNIT = re.compile(
    r"\b(?:in|how\s+many|number\s+of|as)\s+(minutes|hours|days)\b|\((minutes|hours|days)\)", re.IGNORECASE
)


def asks_a_span(question: str) -> bool:
    """Whether the question's own words (quotes aside: a line's text) ask about a length of time."""
    return _LENGTH_OF_TIME.search(unquoted(question)) is not None


def span_unit(question: str) -> str:
    """The unit of time the question asks its answer in (a key of UNIT_SECONDS): seconds unless
    its own words name one unit of minutes, hours or days."""
    units = {(m[1] or m[2]).lower() for m in _ANSWER_UNIT.finditer(unquoted(question))}
    return units.pop() if len(units) == 1 else "seconds"


def offered_unit(table: dict[str, Any]) -> str | None:
    """The unit the table's description offers the time between its times in; None if it offers none."""
    unit = table.get(SPANS_KEY)
    return None if not unit else unit if unit in UNIT_SECONDS else "seconds"


def span_name(start: str, end: str, unit: str = "seconds") -> str:
    return f"{unit}_{start}_to_{end}"


def with_spans(table: dict[str, Any], question: str) -> dict[str, Any]:
    """The table's description marked to offer the time between its time columns, in the unit
    the question asks (a copy), where it asks about a length of time; the same table otherwise."""
    return {**table, SPANS_KEY: span_unit(question)} if asks_a_span(question) else table
