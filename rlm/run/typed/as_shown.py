"""A final's values written as the rows the model was shown write them.

A small model copies a value from a result with a character lost at its end: `misc/a.php` for
the path `/misc/a.php` it was shown, a value a script then looks up and does not find. Where an
item of a typed final (the answer, or one of its comma-separated items) holds a letter, is no
value the last result shows, and is what exactly one shown value is with only characters that
are no letter or digit taken off its ends, the item is written as shown. Nothing else is
changed: a number, a word the rows do not hold, an item two values fit.
"""

from __future__ import annotations

import re

from rlm.run.typed.ranked import printed_rows

__all__ = ["as_shown", "core", "shown_cells", "shown_order"]

_ENDS = " \t/\\'\"`.,;:()[]{}<>*-_#"


def shown_cells(observation: str) -> set[str]:
    """The cells of a printed result's rows (rlm.run.typed.ranked.printed_rows); empty for any
    other output."""
    return {cell for row in printed_rows(observation) for cell in row if cell}


def shown_order(observation: str) -> list[str]:
    """The cells of shown_cells, each once, in the order the rows write them."""
    return list(dict.fromkeys(cell for row in printed_rows(observation) for cell in row if cell))


def core(text: str) -> str:
    """A value as compared: no characters that are no letter or digit at its ends, any case."""
    return text.strip(_ENDS).casefold()


def as_shown(answer: str, cells: set[str]) -> str | None:
    """`answer` with each item written as the one shown cell it is with end characters lost;
    None when no item changes."""
    if not cells:
        return None
    parts = re.split(r"(\s*,\s*)", answer.strip())
    changed = False
    for k in range(0, len(parts), 2):
        item = parts[k]
        if not re.search(r"[^\W\d_]", item) or item in cells:
            continue
        fits = [c for c in cells if core(c) == core(item) and item.casefold() in c.casefold() and c != item]
        if len(fits) == 1:
            parts[k], changed = fits[0], True
    return "".join(parts) if changed else None
