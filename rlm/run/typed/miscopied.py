"""A final that is a shown value with characters lost or changed inside it.

A small model copies a value from a result and drops part of its middle: `10.100.250` for the
address `10.100.20.250` its ranking's first row wrote. The answer is then a value no result
showed, and nothing said so (as_shown mends only characters lost at a value's ends). Where a
typed final is one value that holds something other than digits (an address, a name, an id),
is in no output the node has seen, and is close to exactly one cell of the last result (most of
its characters in order, a few changed), the final is refused once, the close cells named in
the rows' order.
A value shown but for its case or an end character is no miscopy (as_shown writes it as
shown). A number alone is never taken for a copy: a count or a total is rightly a value no row shows.
"""

from __future__ import annotations

import difflib
import re

from rlm.run.typed.as_shown import core

__all__ = ["miscopied"]

_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+%?")
_CLOSE = 0.85  # difflib's ratio of the answer and the cell: 2 * matched characters / both lengths
_MAX_CHANGED = 3  # characters the answer may be longer or shorter than the cell


def miscopied(answer: str, cells: list[str], seen: str) -> list[str]:
    """The cells (of `cells`, in their order) that `answer` is a near copy of, where it is a
    value of no output in `seen`; [] otherwise."""
    value = answer.strip().strip("'\"`").strip()
    if not value or len(value) < 4 or " " in value or "," in value or _NUMBER.fullmatch(value):
        return []
    if value in seen or any(core(c) == core(value) for c in cells):
        return []  # shown, or shown but for case or an end character (as_shown mends that)
    return [
        c
        for c in cells
        if abs(len(c) - len(value)) <= _MAX_CHANGED
        and not _NUMBER.fullmatch(c)
        and difflib.SequenceMatcher(None, value.casefold(), c.casefold()).ratio() >= _CLOSE
    ]
