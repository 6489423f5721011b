"""The examples a question gives, which state no condition of the lines it asks about.

A question shows the form it wants by an example ("answer like 'Mar 9'", "one hour,
e.g. 2 March 2016 08:00-08:59"). Read as a condition, such an example filtered the
lines down to the example's own day (a count of a day nobody asked about) or to lines that
quote it (no row at all). The example clauses are blanked before a question's quotes, values
and window are read as conditions; the form of the answer is still read from the whole question
(rlm.run.answer_form).

What is an example depends on its marker alone: "e.g.", "for example" or "for instance" and
what follows up to the end of its clause (a closing bracket, a semicolon, the end of a
sentence); "such as" after a comma or a bracket, up to the end of its clause; a quote after
", like" (an answer's form: "in days, like '3'") or "like" at the start of a parenthesis. A
quote after "like" or "such as" elsewhere ("lines like 'Accepted publickey ...'") names the
lines, and stays.
"""

from __future__ import annotations

import re

__all__ = ["without_examples"]

# From a marker to the end of its clause: ")", ";", a sentence's end (". " or "?"/"!"), or the end.
_MARKED = re.compile(
    r"\b(?:e\.\s?g\.|eg\.|for example|for instance)[,:]?\s.*?(?=\)|;|[.?!](?:\s|$)|$)"
    r"|(?:,|\()\s*such as\s.*?(?=\)|;|,|[.?!](?:\s|$)|$)",
    re.IGNORECASE,
)
# A quote after ", like" or after "(like": the form of an answer, not the lines asked about.
_LIKE_QUOTE = re.compile(r"(?:,\s*|\(\s*)like[,:]?\s*(?:'[^']*'|\"[^\"]*\"|“[^”]*”)", re.IGNORECASE)


def without_examples(question: str) -> str:
    """The question with each example clause it gives blanked (spaces where it stood)."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731  (one use, two patterns)
    return _LIKE_QUOTE.sub(blank, _MARKED.sub(blank, question))
