"""Why the query behind an answer leaves it in doubt, in the words stderr, --strict and the
synthesis's confidence use.

A run's `doubts` hold conditions the question names that the query had no filter on
(`status = 404`, `line contains '...'`: rlm.run.typed.conditions and quoted), and
EXAMPLE_COPIED when the query was the prompt's example for its op as shown there, nothing of
the question added (rlm.run.node): a query not written for the question.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["EXAMPLE_COPIED", "doubt_clause"]

EXAMPLE_COPIED = "the prompt's example"


def doubt_clause(doubts: Sequence[str]) -> str:
    """What follows "the query behind the answer": `has no filter on A; B, which the question
    names`, `is the prompt's example ...`, or both joined by "and"."""
    conditions = [d for d in doubts if d != EXAMPLE_COPIED]
    clauses = []
    if conditions:
        clauses.append(f"has no filter on {'; '.join(conditions)}, which the question names")
    if EXAMPLE_COPIED in doubts:
        clauses.append("is the prompt's example action as shown there, not one written for the question")
    return " and ".join(clauses)
