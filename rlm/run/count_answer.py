"""An answer that is a count of lines where the question asks for values.

A small model answers "which task attempts failed?" with the 2 its query counted beside the
level: the figure is in a finding, so the answer is grounded, and it is printed as confidently
as a right one (blind18's traces: a count where a list of ids was asked). Whether a figure is a
count is read from the query echoes the findings hold (rlm.sandbox.worker.sql_result): a table
whose header names its columns. The answer is in doubt when it is one whole number, the
question's answer-form words ask for no number (rlm.run.answer_kind), and every place a finding
holds that number is a cell of a count column (`count`, `count_star()`, `distinct x`); a number
held anywhere else (a key, a value column, a line) is left alone: a port or a status is a
number the question may well ask for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rlm.run.answer_kind import NUMBER, asked_kind

__all__ = ["count_for_values"]

_WHOLE = re.compile(r"-?\d{1,3}(?:,\d{3})+|-?\d+")
_RULE = re.compile(r"^-+(?:\+-+)*$")  # the line under an echo's header: `------+------`
_FOOTER = re.compile(r"^\(\d[\d,]* rows?\b")
# Words by which a question asks for a count or a figure of some kind: a count is then no misfit.
_COUNTING = re.compile(
    r"\b(?:how (?:many|much|often|long)|number|numbers|count|counts|counted|frequency|times|total|sum|"
    r"percent|percentage|share|ratio|average|mean|median|size|amount)\b",
    re.I,
)
# What a query names a column of counts: its own `count`, DuckDB's `count_star()`, `count(*)`,
# a typed count of distinct values (`distinct user`), `n`.
_COUNT_NAME = re.compile(r"^(?:count|n|count_star\(\)|count\(\*\)|distinct .+|count .+)$", re.I)


def _cells(text: str, number: str) -> tuple[int, int]:
    """How many times `number` is written in `text` in a count column's cells, and elsewhere."""
    lines = text.splitlines()
    counted = other = 0
    in_table: list[bool] | None = None  # per column: a count column?
    for i, line in enumerate(lines):
        stripped = line.strip()
        if in_table is not None and _FOOTER.match(stripped):
            in_table = None
            continue
        if stripped and i + 1 < len(lines) and _RULE.match(lines[i + 1].strip()):
            in_table = [bool(_COUNT_NAME.match(name.strip())) for name in line.split("|")]
            continue
        if _RULE.match(stripped):
            continue
        found = [m.group(0).replace(",", "") == number for m in _WHOLE.finditer(line)]
        if not any(found):
            continue
        cells = line.split("|") if in_table is not None else []
        if in_table is not None and len(cells) == len(in_table):
            for cell, is_count in zip(cells, in_table, strict=True):
                if cell.strip().replace(",", "") == number:
                    counted += is_count
                    other += not is_count
                elif number in {m.group(0).replace(",", "") for m in _WHOLE.finditer(cell)}:
                    other += 1
        else:
            other += sum(found)
    return counted, other


def count_for_values(question: str, answer: str | None, evidence: Iterable[str]) -> str | None:
    """Why the answer is in doubt as a count of lines where values are asked (see the module's
    doc); None where it is not."""
    if not answer or not _WHOLE.fullmatch(answer.strip()):
        return None
    asked = asked_kind(question)
    if (asked is not None and asked.kind == NUMBER) or _COUNTING.search(question):
        return None
    number = answer.strip().replace(",", "")
    counted = other = 0
    for text in evidence:
        c, o = _cells(text, number)
        counted, other = counted + c, other + o
    if counted == 0 or other > 0:
        return None
    return f"the answer {answer.strip()!r} is a count of lines its query made, and the question asks for values, not how many"
