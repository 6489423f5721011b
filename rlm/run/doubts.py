"""Why the query behind an answer leaves it in doubt, in the words stderr, --strict and the
synthesis's confidence use.

A run's `doubts` hold conditions the question names that the query had no filter on
(`status = 404`, `line contains '...'`: rlm.run.typed.conditions and quoted), and
EXAMPLE_COPIED when the query was the prompt's example for its op as shown there, nothing of
the question added (rlm.run.node): a query not written for the question; and a measure other
than the one the question's words ask for (`avg instead of sum`: rlm.run.typed.measure); and an
answer of another kind than the question's words ask for (a host name where an IP address is
asked: rlm.run.answer_kind); and a count whose conditions kept no row, or every row of the table
(rlm.run.typed.matched).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["EXAMPLE_COPIED", "doubt_clause", "doubt_sentence", "kind_doubt", "measure_doubt", "rows_doubt"]

EXAMPLE_COPIED = "the prompt's example"
_MEASURE = "measure: "  # a doubt of what the query computes, not of its rows
_KIND = "kind: "  # a doubt of the answer's kind, whatever the query
_ROWS = "rows: "  # a doubt of the rows a count kept: none, or all


def measure_doubt(change: str) -> str:
    """The doubt of a query that computes other than the question's words ask (`avg instead of sum`)."""
    return _MEASURE + change


def rows_doubt(what: str) -> str:
    """The doubt of a count that kept no row or every row (`matched no row (...)`)."""
    return _ROWS + what


def kind_doubt(misfit: str) -> str:
    """The doubt of an answer not of the kind the question asks for (rlm.run.answer_kind.misfit)."""
    return _KIND + misfit


def doubt_clause(doubts: Sequence[str]) -> str:
    """What follows "the query behind the answer": `has no filter on A; B, which the question
    names`, `is the prompt's example ...`, or both joined by "and"."""
    conditions = [d for d in doubts if d != EXAMPLE_COPIED and not d.startswith((_MEASURE, _KIND, _ROWS))]
    measures = [d.removeprefix(_MEASURE) for d in doubts if d.startswith(_MEASURE)]
    clauses = [d.removeprefix(_ROWS) for d in doubts if d.startswith(_ROWS)]
    if conditions:
        clauses.append(f"has no filter on {'; '.join(conditions)}, which the question names")
    if measures:
        clauses.append(f"computes other than the question's words ask for ({'; '.join(measures)})")
    if EXAMPLE_COPIED in doubts:
        clauses.append("is the prompt's example action as shown there, not one written for the question")
    return " and ".join(clauses)


def doubt_sentence(doubts: Sequence[str]) -> str:
    """Why the answer is in doubt, whole: `the query behind the answer ...` for the query's
    doubts, `the answer is not of the kind asked (...)` for its own; both joined by "; and"."""
    parts = []
    if clause := doubt_clause([d for d in doubts if not d.startswith(_KIND)]):
        parts.append(f"the query behind the answer {clause}")
    if kinds := [d.removeprefix(_KIND) for d in doubts if d.startswith(_KIND)]:
        parts.append(f"the answer is not of the kind asked ({'; '.join(kinds)})")
    return "; and ".join(parts)
