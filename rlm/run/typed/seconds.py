"""A condition on how long a row took, in the unit the question names it in.

A span column holds seconds, or the unit the question asks its answer in (rlm.run.typed.spans);
a question names a length of time in the unit it thinks in (`over 40 minutes`, `under 2
hours`). A small model writes the question's number into the condition as it reads it, and so
compares seconds with minutes. Where a condition on a span column has the very number the
question gives with a unit of time other than the column's, the number is made the column's
unit, and the model is told. A number the question does not give with a unit, or gives in the
column's, is left as written.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.check import Problem
from rlm.run.typed.columns import table_columns
from rlm.run.typed.compile import read_json
from rlm.run.typed.placeholders import unquoted
from rlm.run.typed.spans import UNIT_SECONDS, offered_unit

__all__ = ["in_seconds"]

_SECONDS_IN = {"sec": 1, "min": 60, "hour": 3600, "hr": 3600, "day": 86400, "week": 604800}
# A number and its unit of time: "50 minutes", "1.5 hrs", "2-hour", "90 mins", "30 seconds".
_AMOUNT = re.compile(
    r"\b(\d+(?:\.\d+)?)[\s-]*(sec(?:ond)?s?|min(?:ute)?s?|hours?|hrs?|days?|weeks?)\b",
    re.IGNORECASE,
)


def _said(question: str) -> list[tuple[float, str, int]]:
    """(number, unit as written, seconds in one) for each length of time the question gives."""
    out = []
    for number, unit in _AMOUNT.findall(unquoted(question)):
        one = next(v for k, v in _SECONDS_IN.items() if unit.lower().startswith(k))
        out.append((float(number), unit, one))
    return out


def in_seconds(
    question: str, content: str | None, table: dict[str, Any]
) -> tuple[dict[str, Any], str] | None:
    """The typed action in `content` with each condition on a span column made seconds where the
    question gives its number in another unit of time, and what was made of what (`50 minutes
    is 3000 seconds`); None when nothing is to change."""
    said = _said(question)
    if not said:
        return None
    try:
        action = read_json(content)
    except Problem:
        return None
    where = action.get("where") if isinstance(action, dict) else None
    if not isinstance(where, list):
        return None
    spans = {c.name for c in table_columns(table).columns if c.span is not None}
    column_unit = offered_unit(table) or "seconds"
    per = UNIT_SECONDS[column_unit]
    told: list[str] = []
    for condition in where:
        if not isinstance(condition, dict) or condition.get("column") not in spans:
            continue
        value = condition.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        for number, unit, one in said:
            if float(value) == number:
                if one != per:
                    made = number * one / per
                    condition["value"] = int(made) if made.is_integer() else made
                    told.append(f"{value:g} {unit} is {condition['value']:g} {column_unit}")
                break
    return (action, "; ".join(told)) if told else None
